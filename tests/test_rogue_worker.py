"""Threat level 2: a client that can reach Temporal can also poll phasegate's task queues.

A rogue worker on the verify queue that answers ``run_verify_checks`` with "passed"
and no results must not pass a gate: the workflow accepts a report only when it
answers every check of the gate, in order. (A rogue *workflow* worker on the main
queue is beyond any workflow-side check: see the README's threat model.)
"""

from __future__ import annotations

from temporalio import activity
from temporalio.worker import Worker

from phasegate.client.api import PhasegateClient
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.settings import verify_task_queue
from phasegate.domain.verify import VerifyReport, VerifyRequest
from phasegate.testing import running_worker
from phasegate.worker import build_worker


@activity.defn(name="run_verify_checks")
async def forged_pass(req: VerifyRequest) -> VerifyReport:
    return VerifyReport(results=[], passed=True)


async def test_a_forged_verify_report_does_not_pass_the_gate(env, settings_for, executor, tmp_path):
    from conftest import FIXTURES

    settings = settings_for(FIXTURES / "library")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "test_fail.py").write_text("def test_no():\n    assert False\n")
    rogue = Worker(
        env.client, task_queue=verify_task_queue(settings.task_queue), activities=[forged_pass]
    )
    async with build_worker(env.client, settings, executor=executor, verify=False), rogue:
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("verified_v1", str(workspace), options=SessionOptions())
        evidence = {"tests_passing": True, "test_path": "test_fail.py"}
        result = await pg.submit(sid, 0, evidence)
    assert not result.passed and result.current_phase == 0
    assert any("does not answer the gate's 2 checks" in p.message for p in result.problems)
    # The real verify worker runs the real checks: still refused (the test fails).
    async with running_worker(env.client, settings, executor=executor):
        again = await pg.submit(sid, 0, evidence)
    assert not again.passed and {v.name for v in again.verify} == {"tests_pass", "notes_file"}
