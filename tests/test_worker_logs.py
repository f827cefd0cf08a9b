"""The worker logs no traceback for an expected refusal (a spec that does not exist, a
gate that refuses): the person who asked gets the message; the log is for faults."""

from __future__ import annotations

import logging

import pytest

from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import SessionOptions


async def test_an_expected_refusal_leaves_no_traceback_in_the_worker_log(
    session_env, tmp_path, caplog
):
    pg, _ = session_env
    caplog.set_level(logging.DEBUG)
    with pytest.raises(PhasegateError) as caught:
        await pg.start(
            "spec_execution_v1",
            str(tmp_path),
            options=SessionOptions(spec_path=str(tmp_path / "no-such-tasks.md")),
            wait=True,
        )
    assert "spec not found" in str(caught.value)
    noisy = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and (r.exc_info or "Traceback" in r.getMessage())
    ]
    assert not noisy, [r.getMessage()[:300] for r in noisy]
