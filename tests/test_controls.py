"""Session controls through the `control` update: each audited; rollback only goes back."""

from __future__ import annotations

from typing import get_args

import pytest

from domain.errors import PhasegateError, PhaseSequenceViolation, SessionNotActive
from domain.messages import ControlRequest, PhaseView, SequenceViolation, SessionStatus
from workflows.gated_session import _details_markdown

GOOD_0 = {"modules_found": 3, "summary": "three modules, all small"}


async def _to_phase_2(pg, sid):
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
    view = await pg.decide(sid, approver="alice", decision="approve")
    assert view.current_phase == 2


async def test_pause_resume_retry_are_audited(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await pg.submit(sid, 0, {"modules_found": 0})
    await pg.submit(sid, 0, {})
    assert (await pg.status(sid)).attempts == 2
    result = await pg.control(
        sid, ControlRequest(action="retry_phase", reason="fresh start", actor="bob")
    )
    assert result.status == "active" and (await pg.status(sid)).attempts == 0
    await pg.control(sid, ControlRequest(action="pause", reason="review", actor="bob"))
    with pytest.raises(SessionNotActive):
        await pg.control(sid, ControlRequest(action="pause", actor="bob"))
    with pytest.raises(SessionNotActive) as err:
        await pg.submit(sid, 0, GOOD_0)
    assert "paused" in str(err.value)
    await pg.control(sid, ControlRequest(action="resume", actor="carol"))
    view = await pg.status(sid)
    assert [(a.action, a.actor, a.detail) for a in view.audit] == [
        ("retry_phase", "bob", "fresh start"),
        ("pause", "bob", "review"),
        ("resume", "carol", ""),
    ]
    assert all(a.at is not None and a.phase == 0 for a in view.audit)


async def test_rollback_keeps_superseded_artifacts(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    await _to_phase_2(pg, sid)
    result = await pg.control(
        sid,
        ControlRequest(action="rollback", to_phase=0, reason="wrong module count", actor="lead"),
    )
    assert result.current_phase == 0 and result.status == "active"
    view = await pg.status(sid)
    assert view.completed_phases == [] and view.artifacts == {}
    assert [(a.phase, a.superseded) for a in view.superseded] == [(0, True), (1, True)]
    assert view.superseded[0].evidence == GOOD_0  # nothing recorded is lost
    assert view.audit[-1].action == "rollback" and view.audit[-1].phase == 2
    # Phases after the rollback point are future again: not readable.
    assert isinstance(await pg.phase(sid, 1), SequenceViolation)
    assert isinstance(await pg.phase(sid, 2), SequenceViolation)
    # Work goes forward again only through the gates.
    again = await pg.submit(sid, 0, {"modules_found": 4, "summary": "four modules after all"})
    assert again.passed and again.next_phase and again.next_phase.phase == 1
    current = await pg.phase(sid, 1)
    assert isinstance(current, PhaseView) and current.artifacts["0"].evidence["modules_found"] == 4


async def test_rollback_never_moves_forward(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    assert (await pg.submit(sid, 0, GOOD_0)).passed  # on phase 1 now
    for target in (1, 2, 5, -1, None):
        with pytest.raises(PhaseSequenceViolation):
            await pg.control(sid, ControlRequest(action="rollback", to_phase=target, actor="x"))
    assert (await pg.status(sid)).current_phase == 1


async def test_abandon_is_terminal_and_needs_a_reason(session_env, tmp_path):
    pg, _ = session_env
    sid = await pg.start("mini_v1", str(tmp_path))
    with pytest.raises(PhasegateError):
        await pg.control(sid, ControlRequest(action="abandon", actor="bob"))
    await pg.control(sid, ControlRequest(action="abandon", reason="spec withdrawn", actor="bob"))
    summary = await pg.result(sid)
    assert summary.status == "abandoned"
    view = await pg.status(sid)
    assert view.status == "abandoned" and view.audit[-1].detail == "spec withdrawn"
    with pytest.raises(PhasegateError):
        await pg.submit(sid, 0, GOOD_0)


def test_every_status_renders_web_ui_details(tmp_path):
    """A status the details renderer does not know would fail the workflow task."""
    from domain.messages import DefinitionRef, PhaseDefinition
    from domain.session import SessionState

    state = SessionState(
        workflow_type="w",
        ref=DefinitionRef(workflow_type="w", total_phases=2, static_phase_count=2),
        current=PhaseDefinition(index=0, label="0", name="First", content="x"),
    )
    for status in get_args(SessionStatus):
        state.status = status
        assert "phase 0 (1 of 2)" in _details_markdown(state)
