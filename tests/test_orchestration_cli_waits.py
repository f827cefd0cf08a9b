"""``phasegate orchestrate`` when the run waits on something outside it (issue 19): in
developer mode mcp the coding agent that drives the developer's session (``--no-wait``
returns, saying so, with the session, its spec and the command that prints the
agent's prompt), and a session a replan replaced, never shown as waiting. The real CLI
in a subprocess against the shared dev server, a worker in this process."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from temporalio.client import WorkflowExecutionStatus
from test_cli_orchestrate import ISSUES, _cli, _env, _profile, _terminate

from phasegate.client.api import PhasegateClient
from phasegate.client.cli._issue_files import load_profile, read_issue
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.messages import OrchestrationView
from phasegate.testing import ScriptedAgent, WalkFailed

TERMINATED = WorkflowExecutionStatus.TERMINATED
CANCELED = WorkflowExecutionStatus.CANCELED

MCP = (
    "name: mcp\nmodels: {analyst: demo, architect: demo, reviewer: demo}\ndeveloper: {mode: mcp}\n"
)


async def _open_child(oc: OrchestrationClient, oid: str, count: int = 1) -> OrchestrationView:
    """The state once the orchestration has ``count`` developer sessions."""
    view = await oc.state(oid)
    for _ in range(200):
        view = await oc.state(oid)
        if len(view.child_sessions) >= count and view.plan.steps:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"no developer session {count}: {view.status} {view.failure}")


async def test_no_wait_returns_when_an_mcp_developer_waits_for_a_coding_agent(
    env, settings_for, run_worker, tmp_path
):
    """Issue 19: in developer mode mcp, `--no-wait` never returned (the run waits on a
    coding agent, not a person), and no command showed the session's spec or prompt."""
    settings = settings_for()
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("Install: `pip instal todo-api`\n")
    profile = _profile(tmp_path, MCP)
    cli_env = _env(settings, env.client)
    oid = "orch-cli-mcp"
    try:
        async with run_worker(settings):
            started = await _cli(
                cli_env, "orchestrate", str(ISSUES / "typo-fix.md"), "--profile", str(profile),
                "--workdir", str(work), "--id", oid, "--no-wait", timeout=60,
            )  # fmt: skip
            assert started.code == 3, started.out + started.err
            child = f"{oid}-dev-0-1"
            spec = work / ".phasegate" / "orchestrations" / oid / "dev-1" / "tasks.md"
            assert spec.is_file()
            out = started.out
            assert f"waiting for a coding agent (developer mode mcp): session {child}" in out
            assert f"spec: {spec}" in out
            assert f"phasegate orchestrate prompt {oid}" in out
            assert "waiting for a person" not in out

            prompt, shown, as_json, again = await asyncio.gather(
                _cli(cli_env, "orchestrate", "prompt", oid),
                _cli(cli_env, "plan", "show", oid),
                _cli(cli_env, "orchestrate", "watch", oid, "--no-wait", "--json"),
                _cli(cli_env, "orchestrate", "prompt", oid, "--json"),
            )
            assert prompt.code == 0, prompt.err
            assert f"gated session **`{child}`**" in prompt.out
            assert f"The spec of your session: {spec}" in prompt.out
            assert shown.code == 0, shown.err
            assert f"developer session {child} (mcp, open): spec {spec}" in shown.out
            assert f"phasegate orchestrate prompt {oid}" in shown.out
            assert as_json.code == 3, as_json.err
            doc = json.loads(as_json.out)
            assert doc["waiting_on"] == "coding_agent"
            assert doc["developer_sessions"] == [
                {"session_id": child, "mode": "mcp", "spec_path": str(spec), "status": "open"}
            ]
            assert json.loads(again.out)["session_id"] == child
    finally:
        await _terminate(env.client, oid, f"{oid}-dev-0-1")


async def test_a_replaced_developer_session_is_shown_as_replaced_never_as_waiting(
    env, settings_for, run_worker, tmp_path
):
    """Issue 19: after a replan, the session it replaced kept asking to be approved."""
    settings = settings_for()
    work = tmp_path / "work"
    work.mkdir()
    (work / "README.md").write_text("Install: `pip instal todo-api`\n")
    cli_env = _env(settings, env.client)
    oid = "orch-cli-replaced"
    old, new = f"{oid}-dev-0-1", f"{oid}-dev-1-1"
    try:
        async with run_worker(settings):
            oc = OrchestrationClient(env.client, settings.task_queue)
            pg = PhasegateClient(env.client, settings.task_queue)
            profile, _ = load_profile(str(_profile(tmp_path, MCP)), workdir=str(work))
            await oc.start(read_issue(ISSUES / "typo-fix.md"), profile, orchestration_id=oid)
            await _open_child(oc, oid)
            for _ in range(100):  # the session loads its definition first
                with contextlib.suppress(PhasegateError):
                    await pg.status(old)
                    break
                await asyncio.sleep(0.1)
            with pytest.raises(WalkFailed, match="awaits approval"):
                await ScriptedAgent(pg).walk(old)  # phase 0 passes, then waits for a person
            assert (await pg.status(old)).status == "awaiting_approval"
            await oc.request_replan(oid, "rethink it", as_key=None, requested_by="lead")
            view = await _open_child(oc, oid, 2)
            assert view.child_sessions == [old, new]

            watched = await _cli(cli_env, "orchestrate", "watch", oid, "--no-wait", timeout=60)
            old_status = (await env.client.get_workflow_handle(old).describe()).status
            shown = await _cli(cli_env, "plan", "show", oid)
    finally:
        await _terminate(env.client, oid, old, new)
    assert watched.code == 3, watched.out + watched.err
    assert f"developer session {old} was replaced by a replan" in watched.out
    assert f"session {old} phase" not in watched.out  # never "waits for approval"
    assert f"waiting for a coding agent (developer mode mcp): session {new}" in watched.out
    assert f"developer session {old} (mcp, replaced)" in shown.out
    assert old_status in (TERMINATED, CANCELED), old_status  # its run's end ended it
    assert f"developer session {new} (mcp, open)" in shown.out
