"""phasegate.testing, the public test kit: the scripted agent walks every shipped
workflow with the known-good evidence, fails loudly on bad evidence, and signs
approvals with a real key."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from phasegate.client import keys
from phasegate.domain.session.messages import SessionOptions
from phasegate.testing import (
    KNOWN_GOOD,
    ScriptedAgent,
    WalkFailed,
    known_good,
    signed_approver,
    unsigned_approver,
    workspace_for,
)

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "specs" / "todo-api"


@pytest.mark.parametrize("workflow_type", sorted(KNOWN_GOOD))
async def test_scripted_agent_walks_every_shipped_workflow(
    session_env, workflow_type, tmp_path, monkeypatch
):
    pg, _ = session_env
    # test_generation_v3 runs `python3 -m pytest` in the workspace: this venv's python.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    target = workspace_for(workflow_type, tmp_path)
    options = None
    if workflow_type == "spec_execution_v1":  # a spec is read from inside the target
        shutil.copytree(SPEC, target / "spec")
        options = SessionOptions(spec_path=str(target / "spec"))
    sid = await pg.start(workflow_type, str(target), options=options)
    agent = ScriptedAgent(pg, known_good(workflow_type), approve=unsigned_approver("lead"))
    final = await agent.walk(sid)
    assert final.status == "completed"
    assert [c.phase for c in final.completed_phases] == list(range(final.total_phases))
    assert all(step.result.passed for step in agent.steps)
    assert len(agent.steps) == final.total_phases  # one submission per phase, no retries


async def test_walk_stops_on_evidence_that_fails(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("production_code_v2", str(tmp_path))
    agent = ScriptedAgent(pg, {0: {"nothing": "useful"}}, approve=unsigned_approver("lead"))
    with pytest.raises(WalkFailed, match="phase 0 .* refused the evidence"):
        await agent.walk(sid)
    assert len(agent.steps) == 1 and not agent.steps[0].result.passed


async def test_walk_without_an_approver_names_the_fix(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("production_code_v2", str(tmp_path))
    with pytest.raises(WalkFailed) as err:
        await ScriptedAgent(pg).walk(sid)
    assert "awaits approval" in err.value.message and "signed_approver" in (err.value.hint or "")


async def test_signed_approver_uses_the_private_key(session_env, tmp_path):
    pg, _ = session_env
    lead = keys.new_key("lead", directory=tmp_path)
    sid = await pg.start(
        "production_code_v2", str(tmp_path), options=SessionOptions(approver_keys=[lead])
    )
    unsigned = ScriptedAgent(pg, approve=unsigned_approver("lead"))
    with pytest.raises(Exception, match="signature"):
        await unsigned.walk(sid)
    final = await ScriptedAgent(pg, approve=signed_approver("lead", key_dir=tmp_path)).walk(sid)
    assert final.status == "completed"
    assert {a.approver for a in final.approvals} == {"lead"}


def test_known_good_names_the_shipped_workflows() -> None:
    with pytest.raises(KeyError, match="production_code_v2"):
        known_good("nope_v1")


@pytest.mark.parametrize(
    ("expr", "params", "default", "expected"),
    [
        ("lambda x: x == 'high'", {}, "some text", "high"),
        ("lambda x: x >= 5", {}, 1, 5),
        ("lambda x: x < 0.3", {}, 1.0, 0.15),
        ("lambda x, min_val: x >= min_val", {"min_val": 10}, 1, 10),
        ("lambda x: len(x) > 3", {}, ["a"], ["a", "item-0", "item-1", "item-2"]),
        ("lambda x: x ** 9999999 > 1 / 0", {}, 5, 5),  # refused by the evaluator: default
    ],
)
def test_completion_satisfies_lambda_validators(expr, params, default, expected) -> None:
    from phasegate.agents._evidence import _satisfying

    assert _satisfying(expr, params, default) == expected
