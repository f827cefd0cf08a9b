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
