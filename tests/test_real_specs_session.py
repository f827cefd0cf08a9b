"""Real tasks.md files, written by people in public repositories, driven end to end:
spec_execution_v1 gates each of their phases and the scripted agent walks them all.
Phase labels keep the numbers as written (spec-kit's "Phase N: Polish" stays "N")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.testing import (
    ScriptedAgent,
    WalkFailed,
    known_good,
    unsigned_approver,
    workspace_for,
)

REAL = Path(__file__).resolve().parent / "fixtures" / "tasks" / "real"
FILES = [
    "kiro-ui-design-system.md",  # Kiro: sibling N.M subtasks, optional `*` tasks
    "speckit-deacon-phase-n.md",  # spec-kit: "## Phase N: Polish", "## Phase R:"
    "agent-os-spec-workflow.md",  # Agent OS
]


@pytest.mark.parametrize("name", FILES)
async def test_a_real_spec_walks_to_completion(session_env, tmp_path, name):
    pg, _ = session_env
    # The files the dynamic phases' example lists exist there (their gate checks).
    target = workspace_for("spec_execution_v1", tmp_path)
    spec = target / name  # a spec is read from inside the session's target
    shutil.copyfile(REAL / name, spec)
    parsed = parse_tasks_md(spec.read_text(encoding="utf-8"), source=name)
    sid = await pg.start(
        "spec_execution_v1", str(target), options=SessionOptions(spec_path=str(spec))
    )
    status = await pg.status(sid)
    assert status.total_phases == 1 + len(parsed.phases)
    agent = ScriptedAgent(pg, known_good("spec_execution_v1"), approve=unsigned_approver("lead"))
    final = await agent.walk(sid)
    assert final.status == "completed"
    assert len(agent.steps) == final.total_phases  # each phase passed at the first try
    views = [s.result.next_phase for s in agent.steps if s.result.next_phase]
    labels = [v.label for v in views if isinstance(v, PhaseView)]
    written = [p.written_number or str(p.number) for p in parsed.phases]
    assert labels == written[1:]  # phase 0's approval hands over phase 1 through status
    for view, phase in zip(views, parsed.phases[1:], strict=True):
        assert [t.id for t in view.tasks] == [t.id for t in phase.tasks]


async def test_a_real_specs_commands_are_listed_and_run(session_env, tmp_path):
    """prAxIs OS' validation gates name real commands (`ruff check ...`, `pytest ...`):
    phase 0 lists them, and the phase they check is refused while they fail (here the
    files they name do not exist), whatever the evidence claims."""
    pg, _ = session_env
    name = "praxis-workflow-guidance.md"
    target = workspace_for("spec_execution_v1", tmp_path)
    spec = target / name
    shutil.copyfile(REAL / name, spec)
    sid = await pg.start(
        "spec_execution_v1", str(target), options=SessionOptions(spec_path=str(spec))
    )
    view = await pg.phase(sid)
    assert isinstance(view, PhaseView)
    for command in (
        "ruff check mcp_server/workflow_engine.py",
        "pytest tests/unit/test_workflow_guidance.py -v",
        "pytest --cov=mcp_server.workflow_engine --cov-report=term",
    ):
        assert f"| `{command}` |" in view.content
    assert "no test command" in view.content  # none named, none found: phase 0 says so
    agent = ScriptedAgent(pg, known_good("spec_execution_v1"), approve=unsigned_approver("lead"))
    with pytest.raises(WalkFailed) as failed:
        await agent.walk(sid)
    assert "verify:checkpoint_1_1" in str(failed.value)
    assert "ruff" in str(failed.value)  # not installed, or the file it checks is missing
    assert (await pg.status(sid)).current_phase == 1
