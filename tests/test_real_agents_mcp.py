"""The real Claude Code and Codex CLIs (pinned, from .tools/) drive a gated session over
phasegate's MCP server, registered as docs/mcp.md says, their model a scripted fake
speaking the provider's streaming wire format: start a session, read phase 0, be
refused a future phase, submit, and find the phase waiting for a person's approval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_cli_helpers import (
    CLAUDE_MODEL,
    MCP_SERVER,
    base_env,
    call,
    cli,
    codex_home,
    run_cli,
    session_id,
)
from conftest import FIXTURES

from phasegate.client.api import PhasegateClient
from phasegate.testing.fake_anthropic import FakeAnthropic
from phasegate.testing.fake_openai import FakeOpenAI, FakeReply

WORKFLOW = "deadline_escalate_v1"  # phase 0 needs lead's approval; phase 1 comes after
PREFIX = "mcp__phasegate__"


def _walk(fake: FakeAnthropic | FakeOpenAI, target: Path) -> None:
    """The model's side of the walk, one step per request."""

    def ids(request, **more):
        return {"session_id": session_id(request), **more}

    fake.respond(call(PREFIX + "start_session", {"workflow_type": WORKFLOW, "target": str(target)}))
    fake.respond(call(PREFIX + "get_current_phase", lambda r: ids(r)))
    fake.respond(call(PREFIX + "task", lambda r: ids(r, action="show", phase=1, task_id="1")))
    evidence = {"plan": "Fix the typo in README.md and check the rendered page."}
    fake.respond(call(PREFIX + "submit_checkpoint", lambda r: ids(r, phase=0, evidence=evidence)))
    fake.respond(call(PREFIX + "get_session_state", lambda r: ids(r)))
    fake.push(FakeReply.text("Phase 0 passed; it waits for lead's approval."))


def _check_walk(fake: FakeAnthropic | FakeOpenAI) -> list[str]:
    assert not fake.script_errors, fake.script_errors
    last = fake.requests[-1]
    results = last.tool_results
    assert len(results) == 5, results
    started, phase, refused, submitted, state = results
    assert WORKFLOW in started
    assert "Plan" in phase and "plan" in phase  # phase 0's name and its gate's field
    assert "phase_sequence_violation" in refused and "Build" not in refused
    assert "awaiting" in submitted.lower() and "lead" in submitted
    assert "awaiting_approval" in state
    assert all(r.status == 200 and r.stream for r in fake.requests)
    return results


@pytest.fixture
def mcp_env(env, settings_for, run_worker):
    """Settings of a worker over the fixture library, and the MCP server's environment."""
    settings = settings_for(FIXTURES / "library")
    address = env.client.service_client.config.target_host
    return settings, {"TEMPORAL_ADDRESS": address, "PHASEGATE_TASK_QUEUE": settings.task_queue}


async def _session_waits_for_lead(env, settings, fake) -> None:
    pg = PhasegateClient(env.client, settings.task_queue)
    status = await pg.status(session_id(fake.requests[-1]))
    assert status.status == "awaiting_approval" and status.current_phase == 0
    assert status.awaiting_approval_from == ["lead"]


async def test_claude_code_walks_a_session_over_mcp(env, mcp_env, run_worker, tmp_path):
    settings, server_env = mcp_env
    config = tmp_path / "mcp.json"
    entry = {"type": "stdio", "command": MCP_SERVER[0], "args": MCP_SERVER[1:], "env": server_env}
    config.write_text(json.dumps({"mcpServers": {"phasegate": entry}}))
    async with run_worker(settings), FakeAnthropic() as fake:
        _walk(fake, tmp_path)
        environ = {
            **base_env(tmp_path / "home"),
            "ANTHROPIC_BASE_URL": fake.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-fake",
        }
        argv = [
            str(cli("claude")),
            "-p",
            "Work through a phasegate session.",
            "--mcp-config",
            str(config),
            "--strict-mcp-config",
            "--allowedTools",
            "mcp__phasegate",  # every tool of the server (docs/mcp.md)
            "--model",
            CLAUDE_MODEL,
        ]
        run = await run_cli(argv, cwd=tmp_path, env=environ)
        assert run.code == 0, run
        assert "waits for lead's approval" in run.stdout
        _check_walk(fake)
        await _session_waits_for_lead(env, settings, fake)


async def test_codex_walks_a_session_over_mcp(env, mcp_env, run_worker, tmp_path):
    settings, server_env = mcp_env
    async with run_worker(settings), FakeOpenAI() as fake:
        _walk(fake, tmp_path)
        home = codex_home(tmp_path / "codex", fake.base_url, mcp_env=server_env)
        environ = {
            **base_env(tmp_path / "home"),
            "CODEX_HOME": str(home),
            "OPENAI_API_KEY": "sk-fake",
        }
        argv = [str(cli("codex")), "exec", "--skip-git-repo-check", "Work through a session."]
        run = await run_cli(argv, cwd=tmp_path, env=environ)
        assert run.code == 0, run
        assert "waits for lead's approval" in run.stdout
        _check_walk(fake)
        assert all(r.path == "/v1/responses" for r in fake.requests)
        await _session_waits_for_lead(env, settings, fake)
