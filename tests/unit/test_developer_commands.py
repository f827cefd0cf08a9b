"""The shipped coding agents (``claude``, ``codex``) run unattended with the permissions
a developer step needs and no more, and ``PHASEGATE_DEVELOPER_COMMANDS`` adds agents to
them instead of silently replacing them (issue 19)."""

from __future__ import annotations

import json

from phasegate.domain.settings import CLAUDE_ALLOWED_TOOLS, DEVELOPER_COMMANDS, Settings


def _agents(value: object) -> dict:
    env = {"PHASEGATE_DEVELOPER_COMMANDS": json.dumps(value)} if value is not None else {}
    return Settings.from_env(env, default_library="lib").coding_agents


def test_developer_commands_extend_the_shipped_agents():
    agents = _agents({"mine": ["my-agent", "{prompt}"]})
    assert set(agents) == {"claude", "codex", "scripted", "mine"}
    assert agents["claude"].command == DEVELOPER_COMMANDS["claude"]
    # An entry of a shipped name replaces that one only.
    agents = _agents({"claude": ["claude", "-p", "{prompt}"]})
    assert agents["claude"].command == ["claude", "-p", "{prompt}"]
    assert agents["codex"].command == DEVELOPER_COMMANDS["codex"]
    assert set(_agents(None)) == {"claude", "codex", "scripted"}


def test_claude_may_run_the_sessions_commands_and_edit_the_workspace_nothing_else():
    command = DEVELOPER_COMMANDS["claude"]
    assert command[command.index("--allowedTools") + 1] == CLAUDE_ALLOWED_TOOLS
    assert command[-2:] == ["-p", "{prompt}"]
    allowed = CLAUDE_ALLOWED_TOOLS.split(",")
    shell = [t for t in allowed if t.startswith("Bash")]
    assert shell and all(t.startswith("Bash(phasegate ") for t in shell)
    assert "Bash(phasegate approve:*)" not in allowed and "Bash" not in allowed
    assert not any(t.startswith(("Bash(phasegate keys", "Bash(phasegate control")) for t in shell)
    assert {"Read", "Edit", "Write"} <= set(allowed) and "WebFetch" not in allowed


def test_codex_writes_only_the_workspace_and_never_waits_for_an_approval():
    command = DEVELOPER_COMMANDS["codex"]
    assert command[:2] == ["codex", "exec"] and command[-1] == "{prompt}"
    assert command[command.index("--sandbox") + 1] == "workspace-write"
    assert (
        "danger-full-access" not in command
        and "--dangerously-bypass-approvals-and-sandbox" not in command
    )


def test_the_shipped_agents_get_their_own_keys_never_the_workers():
    agents = _agents(None)
    assert agents["claude"].env == ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
    assert "CODEX_HOME" in agents["codex"].env and "OPENAI_API_KEY" in agents["codex"].env
    for agent in agents.values():
        assert not any(name.startswith(("PHASEGATE", "TEMPORAL")) for name in agent.env)
