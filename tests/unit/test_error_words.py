"""Temporal's internal wording never reaches a user: errors speak phasegate's terms."""

from __future__ import annotations

import pytest
from temporalio.service import RPCError, RPCStatusCode

from phasegate.domain.errors import SessionError
from phasegate.temporal import phasegate_error


@pytest.mark.parametrize(
    "message",
    [
        "Unable to perform workflow execution update due to Workflow Task in failed state.",
        "Workflow task is not scheduled yet.",
    ],
)
def test_a_busy_or_failing_session_is_said_in_users_terms(message):
    err = phasegate_error(RPCError(message, RPCStatusCode.FAILED_PRECONDITION, b""))
    assert isinstance(err, SessionError)
    text = str(err)
    assert "workflow task" not in text.lower() and "try again" in text
