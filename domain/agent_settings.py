"""What a worker may run for a developer step and which model servers it may call:
the coding agents (:class:`CodingAgent`, the shipped :data:`DEVELOPER_COMMANDS`, the
environment each gets) and OpenAI-compatible providers (:class:`ProviderConfig`). Part of
:class:`~phasegate.domain.settings.Settings`, which re-exports these names."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

__all__ = [
    "AGENT_NAME",
    "CLAUDE_ALLOWED_TOOLS",
    "CODING_AGENT_BASE_ENV",
    "CODING_AGENT_ENV",
    "DEVELOPER_COMMANDS",
    "PROVIDER_NAME",
    "RESERVED_PROVIDERS",
    "CodingAgent",
    "ProviderConfig",
    "check_agent_env",
]

# What a shipped coding agent may do unattended: the gated session's commands and the
# workspace's files, nothing else (no other shell command, no `phasegate approve`).
CLAUDE_ALLOWED_TOOLS = (
    "Bash(phasegate status:*),Bash(phasegate phase:*),Bash(phasegate task:*),"
    "Bash(phasegate submit:*),Bash(phasegate spec parse:*),Read,Edit,Write,Glob,Grep"
)

# Coding agents a worker runs by default (Settings.developer_commands).
DEVELOPER_COMMANDS: dict[str, list[str]] = {
    "claude": ["claude", "--allowedTools", CLAUDE_ALLOWED_TOOLS, "-p", "{prompt}"],
    # workspace-write: edits in the workspace only; network for the phasegate CLI's
    # Temporal connection; exec never asks for an approval nobody is there to give.
    "codex": [
        "codex",
        "exec",
        "--sandbox",
        "workspace-write",
        "-c",
        "sandbox_workspace_write.network_access=true",
        "-c",
        "allow_login_shell=false",  # a login shell would reset PATH (no phasegate on it)
        "--skip-git-repo-check",
        "{prompt}",
    ],
    # phasegate's scripted coding agent: walks the session honestly (demo and tests)
    "scripted": ["{python}", "-m", "phasegate.agents.scripted", "{prompt}"],
}

CODING_AGENT_ENV: dict[str, list[str]] = {
    "claude": ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"],
    "codex": ["OPENAI_API_KEY", "CODEX_API_KEY", "CODEX_HOME"],
}
"""Variables a well-known coding agent needs from the worker's environment, by agent
name or program name (``claude``, ``codex``): what an entry that declares no ``env``
gets, so a ``PHASEGATE_DEVELOPER_COMMANDS`` written as name -> argv keeps working."""

CODING_AGENT_BASE_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_*", "TERM", "TMPDIR", "TZ", "SHELL",
)  # fmt: skip
"""What every coding agent gets from the worker's environment (``LC_*``: each locale
variable), besides what phasegate sets for it and what its entry declares."""

RESERVED_PROVIDERS = frozenset({"openai", "anthropic", "demo", "test", "rules"})
"""Model-id prefixes phasegate reads itself; a configured provider takes another name."""

PROVIDER_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ENV_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}\*?")
AGENT_NAME = r"^[a-z0-9][a-z0-9_-]{0,31}$"


def check_agent_env(names: list[str]) -> list[str]:
    """Variable names a coding agent may get (``NAME`` or a prefix ``NAME_*``); never the
    worker's own ``PHASEGATE_*`` settings (approver keys, roots, switches)."""
    for name in names:
        if not _ENV_PATTERN.fullmatch(name):
            raise ValueError(
                f"{name!r} is not an environment variable name: use NAME or a prefix such "
                "as TEMPORAL_TLS_* (letters, digits and _, then at most one trailing *)"
            )
        if name.upper().startswith("PHASEGATE"):
            raise ValueError(
                f"{name!r}: PHASEGATE_* variables are the worker's own settings and never "
                "reach a coding agent (phasegate sets PHASEGATE_SESSION and "
                "PHASEGATE_TASK_QUEUE itself); remove it from env"
            )
    return names


class CodingAgent(BaseModel):
    """One coding agent a worker runs: its command and the variables it needs.

    The agent's environment is built, never inherited: :data:`CODING_AGENT_BASE_ENV`,
    what phasegate sets (``PHASEGATE_SESSION``, ``PHASEGATE_TASK_QUEUE``,
    ``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``) and the worker's values of ``env``.
    """

    model_config = ConfigDict(extra="forbid")

    command: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        min_length=1, max_length=64, description="argv; {prompt}, {session_id}, {python} filled in."
    )
    env: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Variables passed from the worker's environment: names, or prefixes "
        "ending in * (e.g. ANTHROPIC_API_KEY, TEMPORAL_TLS_*).",
    )

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: list[str]) -> list[str]:
        return check_agent_env(value)


class ProviderConfig(BaseModel):
    """An OpenAI-compatible model server (Ollama, vLLM, a gateway), named in model ids
    as ``NAME:MODEL`` (e.g. ``ollama:llama3.1``).

    Only the *name* of the variable that holds the API key is configured: the key stays
    in the worker's environment and never reaches a workflow or an activity payload.
    """

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(
        description="The server's OpenAI API root, e.g. http://localhost:11434/v1 (Ollama)."
    )
    api_key_env: str | None = Field(
        None,
        description="Environment variable holding the API key; unset for servers that "
        "need none (a local Ollama).",
    )

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("api_key_env")
    @classmethod
    def _check_env(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(
                "api_key_env names an environment variable (e.g. VLLM_API_KEY), not the key itself"
            )
        return value
