"""Activities of the ``Orchestration`` workflow that are not model calls: the worker's
checks at the start of every run, plan verification against the real workspace, and
keeping large outputs as files.

- :meth:`OrchestrationActivities.orchestration_setup` merges the models (profile over
  ``PHASEGATE_MODELS``, the rules planner by default), checks each one the run may
  call (and that the server of each configured provider they use answers), the
  working directory and who could approve, and returns the deployment's approver
  keys. Problems come back as a list, so the workflow fails with all of them at once,
  each with its fix; a client runs the same checks before it starts a run
  (``StartOrchestration.check_only``).
- :meth:`OrchestrationActivities.verify_plan`: a plan's goal must be actionable and
  the files it relies on must exist inside the working directory.
- :meth:`OrchestrationActivities.store_output`: an output too large to keep in history
  is written under ``<working_dir>/.phasegate/orchestrations/<id>/`` and travels by
  reference.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

import yaml
from temporalio import activity
from temporalio.exceptions import ApplicationError

from phasegate.activities._safe_read import read_text
from phasegate.activities._workspace_files import (
    WorkspaceFolder,
    WorkspaceRefused,
    checked_root,
    orchestration_parts,
)
from phasegate.activities.model_providers import current_providers
from phasegate.domain.errors import DefinitionError
from phasegate.domain.orchestration.activities import SetupRequest, StoreOutputRequest
from phasegate.domain.orchestration.agents import STEP_AGENTS, Profile
from phasegate.domain.orchestration.messages import (
    OrchestrationSetup,
    VerifyPlanRequest,
    VerifyPlanResult,
)
from phasegate.domain.orchestration.views import INLINE_OUTPUT_BYTES
from phasegate.domain.signing import ApproverKey
from phasegate.domain.trust import narrowed_to_nobody

__all__ = [
    "DEVELOPER_WORKFLOW",
    "OUTPUT_INLINE_BYTES",
    "OrchestrationActivities",
    "SetupRequest",
    "StoreOutputRequest",
]

DEVELOPER_WORKFLOW = "spec_execution_v1"  # the developer's gated session runs this
OUTPUT_INLINE_BYTES = INLINE_OUTPUT_BYTES  # larger outputs are kept as files (the domain decides)
_PATH_TOKEN = re.compile(
    r"`([^`\s]+\.[A-Za-z0-9]{1,8})`|(?<![\w/.])((?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,8})\b"
)
_VAGUE_GOALS = {"tbd", "todo", "n/a", "na", "none", "fix it", "do it", "?", "..."}


class OrchestrationActivities:
    """The worker-side checks and files of orchestrations.

    Args:
        default_models: Model per agent from the worker's settings (``PHASEGATE_MODELS``).
        check_model: ``(agent, model_id) -> problem | None`` for a model the run may call.
        approver_keys: The deployment's approver keys (``PHASEGATE_APPROVER_KEYS``).
        allow_unsigned_approvals: Whether decisions without a signature are accepted.
        target_roots: Folders a working directory must lie in (empty: anywhere but ``/``).
        temporal_address: The address a coding agent the worker runs connects to.
        library_paths: The worker's libraries; the developer's workflow must be in one.
        developer_commands: The coding agents this worker runs, by name; nothing else runs.
    """

    def __init__(
        self,
        *,
        default_models: dict[str, str] | None = None,
        check_model: Callable[[str, str], str | None] | None = None,
        approver_keys: list[ApproverKey] | None = None,
        allow_unsigned_approvals: bool = False,
        target_roots: list[str] | None = None,
        temporal_address: str = "",
        library_paths: list[str] | None = None,
        developer_commands: dict[str, list[str]] | None = None,
    ) -> None:
        self.developer_commands = dict(developer_commands or {})
        self.temporal_address = temporal_address
        self.library_paths = list(library_paths or [])
        self.default_models = dict(default_models or {})
        self.check_model = check_model
        self.approver_keys = list(approver_keys or [])
        self.allow_unsigned_approvals = allow_unsigned_approvals
        self.target_roots = list(target_roots or [])

    @activity.defn(name="orchestration_setup")
    def orchestration_setup(self, req: SetupRequest) -> OrchestrationSetup:
        """Check a run's profile on the worker: models, working directory, approvers."""
        profile = req.profile
        problems: list[str] = []
        models: dict[str, str] = {"planner": "rules", **self.default_models}
        models.update({str(agent): model for agent, model in profile.models.items()})
        needed = ["planner", *(a for a in STEP_AGENTS if a != "developer")]
        if profile.orchestration_mode == "fixed":
            needed = ["architect", "reviewer"]
        usable: list[str] = []  # agents whose model passed: their servers are checked next
        for agent in needed:
            model = models.get(agent)
            if not model:
                problems.append(
                    f"no model for the {agent}: set models.{agent} in the profile "
                    "(openai:NAME, anthropic:NAME, demo for the offline demo) or "
                    "PHASEGATE_MODELS on the worker"
                )
            elif model == "rules" and agent != "planner":
                problems.append(
                    f"models.{agent} is 'rules', which only the planner can use: "
                    "name a model (openai:NAME, anthropic:NAME, demo)"
                )
            elif model != "rules" and self.check_model is not None:
                problem = self.check_model(agent, model)
                if problem:
                    problems.append(problem)
                else:
                    usable.append(agent)
        problems += _unreachable_servers({a: models[a] for a in usable})
        working_dir = self._working_dir(profile.working_dir, problems)
        keys = [
            k for k in self.approver_keys if not profile.approvers or k.name in profile.approvers
        ]
        if profile.approvers and self.approver_keys and not keys:
            problems.append(
                f"profile approvers {profile.approvers} name none of the worker's approver keys "
                f"({', '.join(sorted({k.name for k in self.approver_keys}))}): fix approvers"
            )
        if profile.approval_required and not keys and not self.allow_unsigned_approvals:
            problems.append(
                f"approval_required names {profile.approval_required} but nobody could approve: "
                "the worker has no approver keys (PHASEGATE_APPROVER_KEYS, from "
                "`phasegate keys export NAME`) and refuses unsigned approvals"
            )
        self._check_developer_workflow(profile, problems)
        command = self._developer_command(profile, problems)
        return OrchestrationSetup(
            models=models,
            working_dir=working_dir,
            approver_keys=self.approver_keys,
            unsigned_approvals=self.allow_unsigned_approvals,
            temporal_address=self.temporal_address,
            developer_command=command,
            problems=problems,
        )

    def _check_developer_workflow(self, profile: Profile, problems: list[str]) -> None:
        """The developer's workflow is in a library, and ``profile.approvers`` leave
        someone its approval gates accept (else every developer step would fail)."""
        found = [
            Path(lib) / DEVELOPER_WORKFLOW
            for lib in self.library_paths
            if (Path(lib) / DEVELOPER_WORKFLOW / "metadata.json").is_file()
        ]
        if not found:
            problems.append(
                f"the developer's workflow {DEVELOPER_WORKFLOW} is in none of the worker's "
                f"libraries ({', '.join(self.library_paths) or 'none'}): add the shipped "
                "library to PHASEGATE_LIBRARY"
            )
            return
        if not profile.approvers:
            return
        for gate_file in sorted(found[0].glob("phases/*/gate-definition.yaml")):
            try:
                gate = yaml.safe_load(read_text(gate_file, limit=1024 * 1024, what="gate"))
            except (DefinitionError, yaml.YAMLError):
                continue  # the session reports a broken gate with its file:line
            approval = (gate or {}).get("approval") or {} if isinstance(gate, dict) else {}
            names = [str(n) for n in approval.get("approvers") or []]
            if approval.get("required") and narrowed_to_nobody(names, profile.approvers):
                problems.append(
                    f"profile approvers {profile.approvers} name nobody the developer's "
                    f"workflow {DEVELOPER_WORKFLOW} lets approve (phase {gate_file.parent.name} gate: "
                    f"{', '.join(names)}): add one of them to approvers, or drop approvers"
                )

    def _developer_command(self, profile: Profile, problems: list[str]) -> list[str]:
        """The worker's own command for the developer: named by ``developer.agent`` or
        spelled out as one of the worker's commands; never a program the starter chose."""
        dev = profile.developer
        if dev.mode != "command":
            return []
        names = ", ".join(sorted(self.developer_commands)) or "none"
        if dev.agent:
            if dev.agent in self.developer_commands:
                return list(self.developer_commands[dev.agent])
            problems.append(
                f"developer.agent {dev.agent!r} is not a coding agent this worker runs "
                f"({names}; PHASEGATE_DEVELOPER_COMMANDS on the worker lists them)"
            )
            return []
        for command in self.developer_commands.values():
            if _same_command(command, dev.command):
                return list(command)
        problems.append(
            "developer.command is not one of the worker's coding agents: name one with "
            f"developer.agent ({names}); the worker's PHASEGATE_DEVELOPER_COMMANDS lists "
            "them, and a starter cannot make the worker run another program"
            if dev.command
            else f"developer.mode is 'command' but names no agent: set developer.agent ({names}) "
            'or use mode "mcp"'
        )
        return []

    def _working_dir(self, working_dir: str, problems: list[str]) -> str:
        if not working_dir:
            problems.append("profile.working_dir is empty: name the project folder to work in")
            return ""
        real = os.path.realpath(working_dir)
        if not os.path.isdir(real):
            problems.append(f"working_dir {working_dir} is not a folder on the worker")
        elif real == os.path.sep:
            problems.append("working_dir is the file system's root: name the project folder")
        roots = [os.path.realpath(r) for r in self.target_roots]
        if roots and not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            problems.append(
                f"working_dir {working_dir} is outside the folders this worker serves "
                f"(PHASEGATE_TARGET_ROOTS: {', '.join(self.target_roots)})"
            )
        return real

    @activity.defn(name="verify_plan")
    def verify_plan(self, req: VerifyPlanRequest) -> VerifyPlanResult:
        """Is the goal actionable, and do the files the plan relies on exist?

        Files an analyst said are relevant must exist (a problem otherwise); other
        files the text names may be ones the plan creates (a warning). A path that
        leaves the working directory is always a problem.
        """
        result = VerifyPlanResult()
        goal = req.goal.strip()
        words = re.findall(r"[A-Za-z]{2,}", goal)
        if goal.lower() in _VAGUE_GOALS or len(words) < 2:
            result.problems.append(
                f"the goal {goal!r} is not actionable: say what changes, in a sentence"
            )
        root = Path(os.path.realpath(req.working_dir))
        named = {m.group(1) or m.group(2) for m in _PATH_TOKEN.finditer(req.text)}
        for path, claimed in [(p, True) for p in req.claimed_files] + [
            (p, False) for p in sorted(named - set(req.claimed_files))
        ]:
            problem = _check_path(root, path, claimed)
            if problem is None:
                continue
            (result.problems if claimed or "outside" in problem else result.warnings).append(
                problem
            )
        return result

    @activity.defn(name="store_output")
    def store_output(self, req: StoreOutputRequest) -> str:
        """Write one output as JSON under the orchestration's folder; returns its path.

        The working directory is re-checked against the worker's target roots (any
        workflow can schedule this activity), no folder under it is followed if it is a
        link, and the file is written whole under a random temp name, then renamed over
        whatever is at its name (``activities/_workspace_files.py``).

        Raises:
            ApplicationError: Non-retryable, type ``workspace_refused``: the working
                directory is not a folder or outside the target roots, or a folder on
                the way is a symlink or a file.
        """
        name = f"{re.sub(r'[^A-Za-z0-9_-]', '_', req.key)[:200]}.json"
        data = json.dumps(req.output, indent=2, ensure_ascii=False).encode("utf-8")
        try:
            root = checked_root(req.working_dir, self.target_roots)
            with WorkspaceFolder(root, orchestration_parts(req.orchestration_id, "outputs")) as f:
                return str(f.write(name, data))
        except WorkspaceRefused as exc:
            details = {"message": exc.message, "hint": exc.hint}
            raise ApplicationError(
                str(exc), details, type="workspace_refused", non_retryable=True
            ) from None


def _unreachable_servers(models: dict[str, str]) -> list[str]:
    """One problem per configured provider server nothing answers at, naming the agents
    whose models it serves. This worker's providers (its plugin makes them current in
    its activities): a server must answer where the worker runs, not the client."""
    providers = current_providers()
    agents_of: dict[tuple[str, str], list[str]] = {}
    for agent, model in models.items():
        server = providers.server(model)
        if server is not None:
            agents_of.setdefault(server, []).append(agent)
    problems = []
    for (name, url), agents in agents_of.items():
        why = providers.unreachable(url)
        if why:
            problems.append(
                f"{', '.join(f'models.{a}' for a in agents)}: the {name} provider at {url} "
                f"cannot be reached ({why}): start that server (Ollama: `ollama serve`), or "
                "fix its base_url in PHASEGATE_MODEL_PROVIDERS where `phasegate worker` runs"
            )
    return problems


def _same_command(allowed: list[str], asked: list[str]) -> bool:
    """Whether ``asked`` is ``allowed`` (``{python}`` may be spelled as this interpreter,
    the scripted agent by its former module name)."""
    python = {"{python}", sys.executable, os.path.realpath(sys.executable)}
    allowed, asked = [_MOVED.get(a, a) for a in allowed], [_MOVED.get(a, a) for a in asked]
    return len(allowed) == len(asked) and all(
        a == b or (a == "{python}" and b in python) for a, b in zip(allowed, asked, strict=True)
    )


# Profiles written before the scripted agent became production code still name it.
_MOVED = {"phasegate.testing.coding_agent": "phasegate.agents.scripted"}


def _check_path(root: Path, path: str, claimed: bool) -> str | None:
    if "\x00" in path or len(path) > 4096:
        return f"{path[:80]!r} is not a file path"
    full = Path(os.path.realpath(root / path))
    if full != root and root not in full.parents:
        return f"{path} is outside the working directory {root}"
    if full.exists():
        return None
    if claimed:
        return f"{path} does not exist in {root} although the analyst named it as relevant"
    return f"{path} does not exist yet in {root} (fine if the plan creates it)"
