"""How the worker starts a coding agent: named, isolated, with an environment it builds.

Used by :class:`phasegate.activities.developer.DeveloperActivities`. Whoever schedules
``run_coding_agent`` (the orchestration, or any workflow of anyone with a Temporal
client: trust level 2) only *names* a coding agent; the worker's own list
(``Settings.coding_agents``, from ``PHASEGATE_DEVELOPER_COMMANDS``) says what runs:

- :func:`resolve`: a name the worker lists, or :func:`command_ref` of one of its
  commands (what the developer step sends when a profile spells a command out);
  nothing else resolves;
- :func:`isolated`: a Python interpreter is started with ``-I``, so the working
  directory (the repository the agent works on) is not on ``sys.path`` and cannot
  shadow the module the agent runs (``phasegate.agents.scripted``), and ``PYTHON*``
  variables are ignored;
- :func:`coding_agent_env`: the environment is built from an allowlist, never the
  worker's own minus a few names: the worker's approver keys, ``PHASEGATE_*``
  settings, cloud credentials and Temporal TLS or API keys stay with the worker unless
  the agent's entry declares them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence

from phasegate.domain.settings import CODING_AGENT_BASE_ENV, CodingAgent

__all__ = [
    "SESSION_VARS",
    "coding_agent_env",
    "command_ref",
    "fill_command",
    "isolated",
    "resolve",
    "tail",
]

SESSION_VARS = (
    "PHASEGATE_SESSION",
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "PHASEGATE_TASK_QUEUE",
)
"""What phasegate itself sets for a coding agent: its session and where that lives."""

_PLACEHOLDER = re.compile(r"\{(prompt|session_id|python)\}")
_PYTHON = re.compile(r"(python|pypy)([0-9]+(\.[0-9]+)*)?")  # as verify's interpreter_argv


def command_ref(command: Sequence[str]) -> str:
    """A name for one of the worker's commands: ``sha256:`` and the digest of its argv
    as configured (placeholders unfilled). It resolves only to an agent whose command
    is exactly that argv, so it names what the worker lists and nothing else."""
    data = json.dumps(list(command), ensure_ascii=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def resolve(agents: Mapping[str, CodingAgent], ref: str) -> tuple[str, CodingAgent] | None:
    """The coding agent ``ref`` names (its name, or :func:`command_ref` of its command)."""
    if ref in agents:
        return ref, agents[ref]
    if ref.startswith("sha256:"):
        for name in sorted(agents):
            if command_ref(agents[name].command) == ref:
                return name, agents[name]
    return None


def isolated(command: Sequence[str]) -> list[str]:
    """``command`` with a Python interpreter (``{python}``, ``python3``, ``pypy``... also
    behind ``env``) started in isolated mode (``-I``): neither the working directory
    nor a script's folder is on ``sys.path``, ``PYTHON*`` variables and the user's
    site-packages are ignored. Other programs are left as they are."""
    argv = list(command)
    i = 0
    if argv and os.path.basename(argv[0]) == "env":
        i = 1
        while i < len(argv) and ("=" in argv[i] or argv[i].startswith("-")):
            i += 1
    if i >= len(argv):
        return argv
    program = argv[i]
    if program != "{python}" and _PYTHON.fullmatch(os.path.basename(program)) is None:
        return argv
    if argv[i + 1 : i + 2] == ["-I"]:
        return argv
    return [*argv[: i + 1], "-I", *argv[i + 1 :]]


def coding_agent_env(
    environ: Mapping[str, str],
    *,
    declared: Sequence[str] = (),
    session_id: str,
    temporal_address: str,
    namespace: str,
    task_queue: str,
) -> dict[str, str]:
    """The coding agent's whole environment (nothing else is inherited).

    From ``environ`` (the worker's): :data:`~phasegate.domain.settings.CODING_AGENT_BASE_ENV`
    (``PATH``, ``HOME``, ``LANG``, ``LC_*``...) and the names the agent's entry
    ``declared`` (``ANTHROPIC_API_KEY``, a prefix such as ``TEMPORAL_TLS_*``), never a
    ``PHASEGATE_*`` variable. Then ``PHASEGATE_SESSION``, ``PHASEGATE_TASK_QUEUE``,
    ``TEMPORAL_ADDRESS`` and ``TEMPORAL_NAMESPACE`` name the session and where it lives.
    """
    allowed = (*CODING_AGENT_BASE_ENV, *declared)
    env = {
        k: v
        for k, v in environ.items()
        if not k.upper().startswith("PHASEGATE") and any(_matches(k, p) for p in allowed)
    }
    env.update(
        PHASEGATE_SESSION=session_id,
        PHASEGATE_TASK_QUEUE=task_queue,
        TEMPORAL_ADDRESS=temporal_address,
        TEMPORAL_NAMESPACE=namespace,
    )
    return env


def _matches(name: str, pattern: str) -> bool:
    return name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern


def fill_command(command: Sequence[str], *, prompt: str, session_id: str) -> list[str]:
    """``command`` with ``{prompt}``, ``{session_id}`` and ``{python}`` (the worker's
    interpreter) filled in each argument (one pass: braces in the prompt are left as
    written; no shell ever parses it)."""
    values = {"prompt": prompt, "session_id": session_id, "python": sys.executable}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in command]


def tail(text: str, limit: int) -> str:
    """The last ``limit`` bytes of ``text`` (UTF-8), with a note of what was cut."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    kept = data[-limit:].decode("utf-8", errors="ignore")
    return f"[… {len(data) - limit} earlier bytes omitted …]\n{kept}"
