"""The developer step's decisions (domain.orchestration.developer), without a server."""

from __future__ import annotations

import pytest

from phasegate.domain.errors import DeveloperFailed
from phasegate.domain.orchestration import developer


def test_attempt_and_session_id() -> None:
    assert developer.attempt_of("developer_0") == 1
    assert developer.attempt_of("developer_3") == 4
    assert developer.session_id("orch-1", 2, 1) == "orch-1-dev-2-1"


@pytest.mark.parametrize(
    ("tail", "asked"),
    [
        ("working\nREPLAN: the plan misses the database", "the plan misses the database"),
        ("REPLAN: echoed from the issue\nall done", None),  # not the last line
        ("", None),
        ("  \n REPLAN:   spaced  \n\n", "spaced"),
    ],
)
def test_a_replan_request_is_only_the_last_line(tail: str, asked: str | None) -> None:
    assert developer.replan_request(tail) == asked


def test_only_a_completed_session_completes_the_step() -> None:
    done = developer.session_outcome("s", "completed", 3, 3, None)
    assert done.completed and done.confidence == 1.0 and done.phases_completed == 3
    with pytest.raises(DeveloperFailed, match="ended abandoned after 1 of 3 phases") as err:
        developer.session_outcome("s", "abandoned", 1, 3, None)
    assert err.value.code == "developer_failed" and "phasegate status s" in (err.value.hint or "")


def test_an_agent_that_stopped_early_is_named_with_its_last_words() -> None:
    err = developer.agent_stopped(
        "s", exit_code=2, timed_out=False, asked=None, output_tail="x" * 2000 + "boom"
    )
    assert "exited (code 2)" in err.message and err.message.endswith("boom")
    assert len(err.message) < 900
    assert (
        "timed out"
        in developer.agent_stopped(
            "s", exit_code=-9, timed_out=True, asked=None, output_tail=""
        ).message
    )
    asked = developer.agent_stopped("s", exit_code=0, timed_out=False, asked="why", output_tail="")
    assert asked.message == "the coding agent asked for a replan: why"
