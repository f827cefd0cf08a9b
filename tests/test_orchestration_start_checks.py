"""What ``phasegate orchestrate`` refuses before anything starts (issue 19): profile
problems the worker finds (a missing API key, an unknown provider or coding agent) and
a provider's server nothing answers at, reported with no orchestration id or UI link
printed and no run left behind. The real CLI in a subprocess against the shared dev
server, a worker in this process."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from ports import free_port
from temporalio.client import WorkflowExecutionStatus
from temporalio.service import RPCError
from test_cli_orchestrate import ISSUES, _cli, _env, _profile

from phasegate.client.orchestrations import OrchestrationClient

COMPLETED = WorkflowExecutionStatus.COMPLETED


async def _nothing_started(client, oid: str, task_queue: str) -> None:
    """No orchestration under ``oid``, and no failed run on the queue: only the worker's
    profile checks (completed, deleted once answered: Temporal removes them in a while),
    which ``orchestrate list`` never shows."""
    with pytest.raises(RPCError, match="not found"):
        await client.get_workflow_handle(oid).describe()
    await asyncio.sleep(2)  # visibility shows a run about 1.5 s after it changed
    query = f"WorkflowType = 'Orchestration' AND TaskQueue = '{task_queue}'"
    runs = [(wf.id, wf.status) async for wf in client.list_workflows(query)]
    assert all(".profile-check-" in wid and status == COMPLETED for wid, status in runs), runs
    assert await OrchestrationClient(client, task_queue).list_orchestrations() == []


@pytest.mark.parametrize(
    ("profile_text", "says"),
    [
        ("models: {analyst: nosuch:m1, architect: demo, reviewer: demo}\n",
         "unknown model provider in 'nosuch:m1'"),
        ("models: {analyst: openai:gpt-4o, architect: demo, reviewer: demo}\n",
         "OPENAI_API_KEY is not set in the worker's environment"),
        ("models: {analyst: demo, architect: demo, reviewer: demo}\n"
         + "developer: {mode: command, agent: nosuch}\n",
         "developer.agent 'nosuch' is not a coding agent this worker runs"),
    ],
)  # fmt: skip
async def test_profile_problems_the_worker_finds_are_reported_before_anything_starts(
    env, settings_for, run_worker, tmp_path, monkeypatch, profile_text, says
):
    """Issue 19: they came after the id and the UI link, and left a failed run behind."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the worker runs in this process
    settings = settings_for()
    oid = f"orch-cli-refused-{uuid.uuid4().hex[:6]}"
    async with run_worker(settings):
        run = await _cli(
            _env(settings, env.client), "orchestrate", str(ISSUES / "typo-fix.md"),
            "--profile", str(_profile(tmp_path, profile_text)), "--workdir", str(tmp_path),
            "--id", oid,
        )  # fmt: skip
        assert run.code == 1, run.out + run.err
        assert "the profile cannot run" in run.err and says in run.err, run.err
        assert "web UI" not in run.out and oid not in run.out, run.out
        await _nothing_started(env.client, oid, settings.task_queue)


async def test_an_unreachable_provider_fails_the_start_naming_its_url(
    env, settings_for, run_worker, tmp_path
):
    """Issue 19: an Ollama nothing listens on passed the start, then 4 plans x 5 attempts."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    settings = settings_for(model_providers={"ollama": {"base_url": url}})
    profile = _profile(
        tmp_path, "models: {analyst: ollama:llama3, architect: ollama:llama3, reviewer: demo}\n"
    )
    oid = f"orch-cli-ollama-{uuid.uuid4().hex[:6]}"
    async with run_worker(settings):
        run = await _cli(
            _env(settings, env.client), "orchestrate", str(ISSUES / "unclear-bug.md"),
            "--profile", str(profile), "--workdir", str(tmp_path), "--id", oid, timeout=30,
        )  # fmt: skip
        assert run.code == 1, run.out + run.err
        assert f"the ollama provider at {url} cannot be reached" in run.err, run.err
        assert "connection refused" in run.err and "PHASEGATE_MODEL_PROVIDERS" in run.err
        assert run.err.count(url) == 1, run.err  # one problem per server, naming its agents
        assert "models.analyst, models.architect" in run.err
        await _nothing_started(env.client, oid, settings.task_queue)
