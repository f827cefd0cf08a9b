"""Real tasks.md files, written by people in public repositories, driven end to end:
spec_execution_v1 gates each of their phases and the scripted agent walks them all.
Phase labels keep the numbers as written (spec-kit's "Phase N: Polish" stays "N")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.testing import ScriptedAgent, known_good, unsigned_approver, workspace_for

REAL = Path(__file__).resolve().parent / "fixtures" / "tasks" / "real"
FILES = [
    "kiro-ui-design-system.md",  # Kiro: sibling N.M subtasks, optional `*` tasks
    "speckit-deacon-phase-n.md",  # spec-kit: "## Phase N: Polish", "## Phase R:"
    "agent-os-spec-workflow.md",  # Agent OS
    "praxis-workflow-guidance.md",  # prAxIs OS task headings and validation gates
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
