"""One settings object for worker, CLI and activities.

Pure: callers pass the environment mapping in (``Settings.from_env(os.environ,
...)``), so this module reads nothing itself. Local-first: with no variables
set, everything points at the embedded dev server on localhost and the
``.phasegate/`` folder of the current directory.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated

from pydantic import (
    BaseModel,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from phasegate.domain.agent_settings import (
    AGENT_NAME,
    CLAUDE_ALLOWED_TOOLS,
    CODING_AGENT_BASE_ENV,
    CODING_AGENT_ENV,
    DEVELOPER_COMMANDS,
    PROVIDER_NAME,
    RESERVED_PROVIDERS,
    CodingAgent,
    ProviderConfig,
    check_agent_env,
)
from phasegate.domain.commands import CommandRefused, parse_allowlist, split_command
from phasegate.domain.errors import PhasegateError
from phasegate.domain.limits import AHEAD_BYTES, MAX_AHEAD_BYTES
from phasegate.domain.orchestration.agents import AgentName

__all__ = [
    "CLAUDE_ALLOWED_TOOLS",
    "CODING_AGENT_BASE_ENV",
    "CODING_AGENT_ENV",
    "DEVELOPER_COMMANDS",
    "RESERVED_PROVIDERS",
    "SEARCH_ATTRIBUTES",
    "TASK_QUEUE",
    "CodingAgent",
    "ProviderConfig",
    "Settings",
    "verify_task_queue",
]

TASK_QUEUE = "phasegate"


def verify_task_queue(task_queue: str) -> str:
    """The task queue of a session's verify activities: ``<task_queue>-verify``.

    Verify checks run tests and can take minutes; on their own queue, with their own
    concurrency limit, a backlog of them never delays advances, renders or queries.
    """
    return f"{task_queue}-verify"


SEARCH_ATTRIBUTES: dict[str, str] = {
    "PhasegateWorkflow": "Keyword",
    "PhasegatePhase": "Int",
    "PhasegateStatus": "Keyword",
}
"""Custom search attributes phasegate upserts, name -> Temporal type."""


class Settings(BaseModel):
    """Where phasegate finds Temporal, its library and its local data."""

    temporal_address: str = Field(
        "localhost:7233", description="Temporal frontend, host:port (TEMPORAL_ADDRESS)."
    )
    namespace: str = Field("default", description="Temporal namespace (TEMPORAL_NAMESPACE).")
    task_queue: str = Field(TASK_QUEUE, description="Task queue (PHASEGATE_TASK_QUEUE).")
    home: str = Field(
        ".phasegate",
        description="Local data: dev-server SQLite file, spec snapshots (PHASEGATE_HOME).",
    )
    library_paths: list[str] = Field(
        default_factory=list,
        description="Workflow library folders, searched in order (PHASEGATE_LIBRARY, "
        "os.pathsep-separated); the shipped library/ is always last.",
    )
    spec_roots: list[str] = Field(
        default_factory=list,
        description="Folders besides a session's target that a spec_path may point into "
        "(PHASEGATE_SPEC_ROOTS, os.pathsep-separated).",
    )
    target_roots: list[str] = Field(
        default_factory=list,
        description="When set, a session's target must be a folder inside one of these "
        "(PHASEGATE_TARGET_ROOTS, os.pathsep-separated); sealed deployments set the "
        "workspace, so a session cannot point its checks or its spec elsewhere.",
    )
    ui_port: int = Field(8233, description="Dev-server Web UI port (PHASEGATE_UI_PORT).")
    ui_url: str | None = Field(
        None,
        description="Web UI base URL for links (PHASEGATE_UI_URL). Unset: the UI of the running "
        "`phasegate dev` / `phasegate server` (<home>/dev.json), else http://localhost:<ui_port>.",
    )
    standards_dirs: list[str] = Field(
        default_factory=list,
        description="Folders of project standards (markdown) indexed for phase context "
        "(PHASEGATE_STANDARDS, os.pathsep-separated).",
    )
    context_tokens: int = Field(
        1200, ge=0, description="Token budget of a phase view's context (PHASEGATE_CONTEXT_TOKENS)."
    )
    context_k: int = Field(5, ge=0, description="Most chunks in a phase view's context.")
    allow_unsigned_approvals: bool = Field(
        False,
        description="Accept approvals checked by name only in sessions that name no approver "
        "keys (PHASEGATE_ALLOW_UNSIGNED_APPROVALS=1). Off: such approvals are refused, so an "
        "agent cannot approve by claiming a name. Turn on only where agents cannot reach "
        "Temporal or the CLI.",
    )
    approver_keys_file: str | None = Field(
        None,
        description="JSON list of signed approvers [{name, public_key}] that every session on "
        "this worker requires (PHASEGATE_APPROVER_KEYS). Session options cannot replace them.",
    )
    operator_keys_file: str | None = Field(
        None,
        description="JSON list of signed operators [{name, public_key}] who may pause, resume, "
        "roll back, retry or abandon any session on this worker (PHASEGATE_OPERATOR_KEYS). "
        "Approver keys may always sign controls of the sessions they approve.",
    )
    allow_unsigned_controls: bool | None = Field(
        None,
        description="Accept controls checked by actor name only in sessions that name no "
        "approver or operator keys (PHASEGATE_ALLOW_UNSIGNED_CONTROLS=1/0). Unset: follows "
        "allow_unsigned_approvals.",
    )
    prefetch: bool = Field(
        True,
        description="Allow sessions to render their next phase ahead (PHASEGATE_PREFETCH=0 "
        "turns it off for every session: a sealed deployment keeps future phases out of "
        "history whatever a starter asks).",
    )
    prefetch_ahead_bytes: int | None = Field(
        None,
        ge=0,
        le=MAX_AHEAD_BYTES,
        description="How much a prefetch renders past the next phase, in bytes of JSON "
        "(PHASEGATE_PREFETCH_AHEAD; 0: the next phase only). Unset: "
        f"{AHEAD_BYTES // 1024} KiB where the worker holds a seal key ring (the phases are "
        "sealed), else 0: a Temporal client reading an open deployment's history sees the "
        "next phase, not the walk. Set it where agents have no Temporal client (MCP only).",
    )
    workflow_sandbox: bool = Field(
        False,
        description="Run workflow code in the Temporal SDK's sandbox "
        "(PHASEGATE_WORKFLOW_SANDBOX=1): import and call restrictions at ~30% more worker "
        "time per workflow task. Off by default: the suite replays phasegate's recorded "
        "histories and walks its workflows in the sandbox instead.",
    )
    seal_keys_file: str | None = Field(None, description="Seal key ring (PHASEGATE_SEAL_KEYS).")
    verify_concurrency: int = Field(
        4,
        ge=1,
        le=64,
        description="Verify checks one worker runs at once, on its own task queue "
        "(PHASEGATE_VERIFY_CONCURRENCY).",
    )
    test_command: str | None = Field(
        None,
        max_length=4000,
        description="The test command of projects this deployment serves "
        "(PHASEGATE_TEST_COMMAND, e.g. 'python -m pytest -q'), where a session names none "
        "(--test-command) and its project none (phasegate.toml or [tool.phasegate] "
        "test_command); unset: found in the project (pytest, npm test, go test, cargo "
        "test, make test). Shown in phase 0 and run where a gate backs tests_passing.",
    )
    allowed_commands: list[str | list[str]] | None = Field(
        None,
        max_length=256,
        description="The only commands verify checks may run (PHASEGATE_ALLOWED_COMMANDS, "
        'a JSON list such as ["python -m pytest -q", ["npm", "test"], "make ..."]: each '
        "a command or an argv, a final word ... allowing further arguments). A session "
        "naming another is refused at start, and a worker refuses to run one. Unset: any.",
    )
    graph_function_modules: list[
        Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")]
    ] = Field(
        default_factory=list,
        max_length=64,
        description="Python modules (and their submodules) whose functions step graphs may "
        "name as `module:function` handlers (PHASEGATE_GRAPH_FUNCTION_MODULES, separated "
        "like PATH). phasegate's own handlers are always allowed; nothing else runs.",
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Serve Prometheus metrics of the Temporal runtime and phasegate's counters "
        "on this port (PHASEGATE_METRICS_PORT; `phasegate worker --metrics-port`).",
    )

    models: dict[AgentName, Annotated[str, StringConstraints(min_length=1, max_length=200)]] = (
        Field(
            default_factory=dict,
            description="Default model per agent, which a profile's `models` overrides "
            '(PHASEGATE_MODELS, JSON such as {"planner": "openai:gpt-4o", "reviewer": "demo"}): '
            "openai:NAME, anthropic:NAME, PROVIDER:NAME for a provider in model_providers, demo "
            "(offline, canned text) or rules (planner only). Unset agents use the rules planner "
            "(planner) or must be named by the profile.",
        )
    )
    model_providers: dict[str, ProviderConfig] = Field(
        default_factory=dict,
        description="OpenAI-compatible model servers by name (PHASEGATE_MODEL_PROVIDERS, JSON "
        'such as {"ollama": {"base_url": "http://localhost:11434/v1"}, "vllm": {"base_url": '
        '"http://gpu:8000/v1", "api_key_env": "VLLM_API_KEY"}}); a model id NAME:MODEL uses '
        "one. API keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY, a "
        "provider's api_key_env).",
    )

    developer_commands: dict[
        Annotated[str, StringConstraints(pattern=AGENT_NAME)],
        Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], Field(min_length=1)],
    ] = Field(
        default_factory=lambda: dict(DEVELOPER_COMMANDS),
        description="The coding agents this worker may run for an orchestration's developer, "
        "by name (PHASEGATE_DEVELOPER_COMMANDS, JSON; extends the shipped claude, codex and "
        "scripted, an entry of the same name replacing one). Each entry is an argv, "
        '{"claude": ["claude", "-p", "{prompt}"]}, or an object naming the variables the '
        "agent needs from the worker's environment, "
        '{"claude": {"command": ["claude", "-p", "{prompt}"], "env": ["ANTHROPIC_API_KEY", '
        '"TEMPORAL_TLS_*"]}} (kept in developer_env). A profile picks one by name '
        "(developer.agent); a starter can never make the worker run another program. "
        "{prompt}, {session_id} and {python} (the worker's interpreter) are filled in; a "
        "Python interpreter runs isolated (-I), so the workspace cannot shadow the module "
        "it runs. The agent's environment is PATH, HOME, USER, LOGNAME, LANG, LC_*, TERM, "
        "TMPDIR, TZ, SHELL, the session's PHASEGATE_SESSION, PHASEGATE_TASK_QUEUE, "
        "TEMPORAL_ADDRESS and TEMPORAL_NAMESPACE, and its declared env (default for claude: "
        "ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL; codex: OPENAI_API_KEY, CODEX_API_KEY, "
        "CODEX_HOME); "
        "nothing else of the worker's (no PHASEGATE_* settings, cloud credentials or "
        "Temporal TLS / API key variables unless declared).",
    )
    developer_env: dict[
        Annotated[str, StringConstraints(pattern=AGENT_NAME)],
        Annotated[list[str], Field(max_length=64)],
    ] = Field(
        default_factory=dict,
        description="Per coding agent, the variables it gets from the worker's environment "
        "(the env of a PHASEGATE_DEVELOPER_COMMANDS object entry). An agent not named here "
        "gets CODING_AGENT_ENV's list for its name or program (claude, codex), else none.",
    )

    @field_validator("allowed_commands")
    @classmethod
    def _check_allowed(cls, value: list[str | list[str]] | None) -> list[str | list[str]] | None:
        if value is not None:
            try:
                parse_allowlist(value)
            except CommandRefused as exc:
                raise ValueError(f"PHASEGATE_ALLOWED_COMMANDS: {exc}") from None
        return value

    @field_validator("test_command")
    @classmethod
    def _check_test_command(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                split_command(value)
            except CommandRefused as exc:
                raise ValueError(f"PHASEGATE_TEST_COMMAND: {exc}") from None
        return value

    def command_allowlist(self) -> list[list[str]] | None:
        """``allowed_commands`` as argv prefixes (``domain.commands.allowed``)."""
        return None if self.allowed_commands is None else parse_allowlist(self.allowed_commands)

    @model_validator(mode="before")
    @classmethod
    def _split_agent_entries(cls, data: object) -> object:
        """``developer_commands`` entries written as ``{"command", "env"}`` objects: the
        command stays there, the variable names go to ``developer_env``."""
        if not isinstance(data, dict) or not isinstance(data.get("developer_commands"), Mapping):
            return data
        commands: dict[object, object] = {}
        env = dict(data.get("developer_env") or {})
        for name, entry in data["developer_commands"].items():
            if not isinstance(entry, (Mapping, CodingAgent)):
                commands[name] = entry
                continue
            try:
                agent = CodingAgent.model_validate(entry)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                msg = first["msg"].removeprefix("Value error, ")
                raise ValueError(
                    f"coding agent {name!r}: {where + ': ' if where else ''}{msg} (an entry is "
                    'an argv or {"command": [...], "env": ["VARIABLE", ...]})'
                ) from None
            commands[name], env[name] = agent.command, agent.env
        return {**data, "developer_commands": commands, "developer_env": env}

    @field_validator("developer_env")
    @classmethod
    def _check_developer_env(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for names in value.values():
            check_agent_env(names)
        return value

    @model_validator(mode="after")
    def _env_of_listed_agents(self) -> Settings:
        unknown = sorted(set(self.developer_env) - set(self.developer_commands))
        if unknown:
            raise ValueError(
                f"developer_env names {', '.join(unknown)}, which developer_commands does "
                f"not list ({', '.join(sorted(self.developer_commands)) or 'none'})"
            )
        return self

    @property
    def coding_agents(self) -> dict[str, CodingAgent]:
        """The coding agents this worker runs, by name, each with the variables it gets."""
        agents = {}
        for name, command in self.developer_commands.items():
            env = self.developer_env.get(name)
            if env is None:
                program = command[0].rsplit("/", 1)[-1]
                env = CODING_AGENT_ENV.get(name) or CODING_AGENT_ENV.get(program) or []
            agents[name] = CodingAgent(command=command, env=env)
        return agents

    @field_validator("model_providers")
    @classmethod
    def _check_providers(cls, value: dict[str, ProviderConfig]) -> dict[str, ProviderConfig]:
        for name in value:
            if name in RESERVED_PROVIDERS or not PROVIDER_NAME.fullmatch(name):
                raise ValueError(
                    f"provider name {name!r} must be 1-32 lowercase letters, digits, _ or -, "
                    f"and not one of {', '.join(sorted(RESERVED_PROVIDERS))}"
                )
        return value

    @property
    def unsigned_controls(self) -> bool:
        """Whether name-only controls are accepted where a session names no keys."""
        if self.allow_unsigned_controls is None:
            return self.allow_unsigned_approvals
        return self.allow_unsigned_controls

    @property
    def web_ui_url(self) -> str:
        """Base URL of the Temporal Web UI that links point at (no trailing slash)."""
        return (self.ui_url or f"http://localhost:{self.ui_port}").rstrip("/")

    @property
    def dev_file(self) -> str:
        """``<home>/dev.json``: address, Web UI and pid of the running ``phasegate dev`` or
        ``phasegate server``, read when neither TEMPORAL_ADDRESS nor a profile names one."""
        return f"{self.home.rstrip('/')}/dev.json"

    @property
    def rag_db(self) -> str:
        """The retrieval index (SQLite FTS5) under ``home``."""
        return f"{self.home.rstrip('/')}/rag.db"

    @classmethod
    def from_env(
        cls, env: Mapping[str, str], *, default_library: str, pathsep: str = ":"
    ) -> Settings:
        """Build settings from an environment mapping.

        Args:
            env: Usually ``os.environ``.
            default_library: The shipped library folder, appended to the search path.
            pathsep: Separator of PHASEGATE_LIBRARY entries (``os.pathsep``).
        """
        extra = [p for p in env.get("PHASEGATE_LIBRARY", "").split(pathsep) if p]
        paths = [*extra, default_library] if default_library not in extra else extra
        return cls(
            temporal_address=env.get("TEMPORAL_ADDRESS") or "localhost:7233",
            namespace=env.get("TEMPORAL_NAMESPACE") or "default",
            task_queue=env.get("PHASEGATE_TASK_QUEUE") or TASK_QUEUE,
            home=env.get("PHASEGATE_HOME") or ".phasegate",
            library_paths=paths,
            ui_port=int(env.get("PHASEGATE_UI_PORT") or 8233),
            ui_url=env.get("PHASEGATE_UI_URL") or None,
            standards_dirs=[p for p in env.get("PHASEGATE_STANDARDS", "").split(pathsep) if p],
            spec_roots=[p for p in env.get("PHASEGATE_SPEC_ROOTS", "").split(pathsep) if p],
            target_roots=[p for p in env.get("PHASEGATE_TARGET_ROOTS", "").split(pathsep) if p],
            context_tokens=int(env.get("PHASEGATE_CONTEXT_TOKENS") or 1200),
            approver_keys_file=env.get("PHASEGATE_APPROVER_KEYS") or None,
            allow_unsigned_approvals=_flag(env.get("PHASEGATE_ALLOW_UNSIGNED_APPROVALS")) is True,
            operator_keys_file=env.get("PHASEGATE_OPERATOR_KEYS") or None,
            allow_unsigned_controls=_flag(env.get("PHASEGATE_ALLOW_UNSIGNED_CONTROLS")),
            verify_concurrency=int(env.get("PHASEGATE_VERIFY_CONCURRENCY") or 4),
            prefetch=_flag(env.get("PHASEGATE_PREFETCH")) is not False,
            prefetch_ahead_bytes=_ahead_env(env),
            workflow_sandbox=_flag(env.get("PHASEGATE_WORKFLOW_SANDBOX")) is True,
            seal_keys_file=env.get("PHASEGATE_SEAL_KEYS") or None,
            test_command=env.get("PHASEGATE_TEST_COMMAND") or None,
            allowed_commands=_allowed_env(env),
            graph_function_modules=[
                m for m in env.get("PHASEGATE_GRAPH_FUNCTION_MODULES", "").split(pathsep) if m
            ],
            metrics_port=int(env["PHASEGATE_METRICS_PORT"])
            if env.get("PHASEGATE_METRICS_PORT")
            else None,
            models=_json_env(env, "PHASEGATE_MODELS", "models", _MODELS_EXAMPLE),
            model_providers=_json_env(
                env, "PHASEGATE_MODEL_PROVIDERS", "model_providers", _PROVIDERS_EXAMPLE
            ),
            developer_commands=_with_shipped_agents(
                _json_env(
                    env, "PHASEGATE_DEVELOPER_COMMANDS", "developer_commands", _COMMANDS_EXAMPLE
                )
            ),
        )


def _allowed_env(env: Mapping[str, str]) -> list[str | list[str]] | None:
    """``PHASEGATE_ALLOWED_COMMANDS``: a JSON list of commands (strings or argv lists)."""
    text = env.get("PHASEGATE_ALLOWED_COMMANDS", "").strip()
    if not text:
        return None
    hint = 'set it to a JSON list such as ["python -m pytest -q", ["npm", "test"]]'
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PhasegateError(
            f"not JSON ({exc})", where="PHASEGATE_ALLOWED_COMMANDS", hint=hint
        ) from None
    if not isinstance(data, list) or not all(
        isinstance(e, str) or (isinstance(e, list) and all(isinstance(w, str) for w in e))
        for e in data
    ):
        raise PhasegateError(
            "expected a list of commands", where="PHASEGATE_ALLOWED_COMMANDS", hint=hint
        )
    return data


def _ahead_env(env: Mapping[str, str]) -> int | None:
    """``PHASEGATE_PREFETCH_AHEAD``: bytes, 0 to MAX_AHEAD_BYTES (unset: None)."""
    text = env.get("PHASEGATE_PREFETCH_AHEAD", "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) > MAX_AHEAD_BYTES:
        raise PhasegateError(
            f"expected a number of bytes from 0 to {MAX_AHEAD_BYTES}, got {text!r}",
            where="PHASEGATE_PREFETCH_AHEAD",
            hint=f"e.g. PHASEGATE_PREFETCH_AHEAD={AHEAD_BYTES} (0: the next phase only), "
            "or unset it for the default",
        )
    return int(text)


def _flag(value: str | None) -> bool | None:
    """An on/off environment value: None when unset or empty."""
    if not value:
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


_MODELS_EXAMPLE = '{"planner": "rules", "analyst": "openai:gpt-4o", "reviewer": "demo"}'
_COMMANDS_EXAMPLE = (
    '{"claude": ["claude", "-p", "{prompt}"], '
    '"mine": {"command": ["mine", "{prompt}"], "env": ["MINE_API_KEY"]}}'
)
_PROVIDERS_EXAMPLE = '{"ollama": {"base_url": "http://localhost:11434/v1"}}'


def _with_shipped_agents(given: object) -> dict[str, object]:
    """``PHASEGATE_DEVELOPER_COMMANDS`` extends the shipped coding agents; an entry of a
    shipped name replaces that one only."""
    return {**DEVELOPER_COMMANDS, **(given if isinstance(given, dict) else {})}


def _json_env(env: Mapping[str, str], variable: str, field: str, example: str) -> object:
    """A JSON object from ``variable``, checked against the settings ``field`` so a bad
    value fails here, naming the variable, rather than as a bare ``Settings`` error."""
    text = env.get(variable, "").strip()
    if not text:
        return {}
    try:
        data = json.loads(text)
        Settings.model_validate({field: data})
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            first = exc.errors()[0]
            loc = [str(p) for p in first["loc"][1:]]
            if loc[-1:] == ["[key]"]:
                loc = [f"key {loc[-2]!r}"]
            msg = first["msg"].removeprefix("Value error, ")
            problem = f"{'.'.join(loc)}: {msg}" if loc else msg
        else:
            problem = f"not JSON ({exc})"
        raise PhasegateError(
            problem,
            where=variable,
            hint=f"set {variable} to a JSON object such as {example}",
        ) from None
    return data
