"""SessionState's side of the workflow contract: from_carry and continue_as_new_due
(decisions that used to live in the workflow), without a server."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: shared helpers

from session_helpers import GOOD, new_state, submit

from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.session.state import UPDATES_BEFORE_CONTINUE, SessionState


def test_from_carry_counts_the_run_and_keeps_the_state() -> None:
    state = new_state()
    state.note_run("run-1")
    assert submit(state, 0, GOOD[0]).passed
    again = SessionState.from_carry(state.carry(), "run-2")
    assert again.runs == state.runs + 1 and again.run_chain[-2:] == ["run-1", "run-2"]
    assert again.current.index == state.current.index == 1


def test_continue_as_new_is_due_on_suggestion_event_limit_or_update_budget() -> None:
    plain = new_state()
    assert not plain.continue_as_new_due(suggested=False, events=10_000, messages=5)
    assert plain.continue_as_new_due(suggested=True, events=0, messages=0)
    assert plain.continue_as_new_due(suggested=False, events=0, messages=UPDATES_BEFORE_CONTINUE)
    low = new_state(options=SessionOptions(continue_as_new_after_events=10))
    # The event limit counts only once this run handled a message: never back to back.
    assert not low.continue_as_new_due(suggested=False, events=50, messages=0)
    assert low.continue_as_new_due(suggested=False, events=10, messages=1)


def _carried_in(history: str) -> dict:
    """The ``carried`` state a recorded continue-as-new handed over (flat: recorded
    before the state had owners)."""
    import base64
    import json

    data = json.loads((Path(__file__).parent.parent / "histories" / history).read_text())
    started = data["events"][0]["workflowExecutionStartedEventAttributes"]
    return json.loads(base64.b64decode(started["input"]["payloads"][0]["data"]))["carried"]


def test_flat_carried_state_from_before_the_owners_still_loads_into_them() -> None:
    flat = _carried_in("dynamic_after_continue_as_new--dynamic-can.json")
    assert "current" in flat and "phases" not in flat  # the old shape, as recorded
    state = SessionState.from_carry(flat, "run-next")
    assert state.current.index == flat["current"]["index"]
    assert sorted(state.phases.past) == sorted(int(k) for k in flat["past"])
    assert [c.phase for c in state.phases.completed] == [c["phase"] for c in flat["completed"]]
    assert sorted(state.phases.artifacts) == sorted(int(k) for k in flat["artifacts"])
    assert state.attempts.count == flat["attempt_count"]
    assert len(state.attempts.current) == len(flat["attempts"])
    assert len(state.attempts.earlier) == len(flat["attempt_log"])
    assert len(state.book.records) == len(flat["approvals"])
    assert state.book.unsigned_approvals == flat["unsigned_approvals"]
    assert set(state.answers.by_submission) == set(flat["processed"])
    # ... and what it carries on is the nested shape, loading back to the same state.
    again = state.carry()
    assert {"phases", "attempts", "book", "answers"} <= set(again) and "current" not in again
    assert SessionState.model_validate(again) == state


def test_every_field_of_the_flat_shape_has_an_owner() -> None:
    """A field added to the old flat shape and forgotten by the migration would be dropped
    silently (pydantic ignores unknown keys): every recorded key must land somewhere."""
    from phasegate.domain.session.ledger import nest_flat_state

    flat = _carried_in("dynamic_after_continue_as_new--dynamic-can.json")
    flat.update(operator_keys=[], unsigned_controls=True, signs_evidence=False, run_chain=[])
    nested = nest_flat_state(flat)
    owners = {"phases", "attempts", "book", "answers"}
    fields = set(SessionState.model_fields)
    assert set(nested) <= fields, set(nested) - fields
    for owner in owners:
        model = SessionState.model_fields[owner].annotation
        assert set(nested[owner]) <= set(model.model_fields)  # type: ignore[union-attr]
