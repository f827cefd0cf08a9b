"""Issue 14, what the orchestration fixes left open on sessions: reserved actor names
on unsigned session messages, reserved key names at worker start, and a gate's
``pattern`` on evidence an agent made as long as the cap allows."""

from __future__ import annotations

import json
import time

import pytest
from session_helpers import GOOD, decide, new_state, submit, to_phase

from phasegate.client import keys
from phasegate.domain.errors import ApprovalRefused, PhasegateError, SessionError
from phasegate.domain.gate_eval import MAX_PATTERN_TEXT, evaluate_gate
from phasegate.domain.gates import GateDefinition
from phasegate.domain.session.messages import ControlRequest
from phasegate.worker import load_approver_keys


@pytest.mark.parametrize("name", ["phasegate", "Phasegate ", "phasegate:deadline", "reviewer_0"])
def test_an_unsigned_approval_cannot_claim_a_reserved_name(name: str) -> None:
    state = new_state()
    to_phase(state, 1)
    assert submit(state, 1, GOOD[1]).awaiting_approval
    with pytest.raises(ApprovalRefused, match="reserved"):
        decide(state, name)


@pytest.mark.parametrize("name", ["phasegate", "PHASEGATE", "phasegate:deadline"])
def test_an_unsigned_control_cannot_claim_a_reserved_name(name: str) -> None:
    state = new_state()
    problem = state.check_control(ControlRequest(action="pause", actor=name))
    assert isinstance(problem, SessionError) and "reserved" in problem.message


def test_the_worker_refuses_a_deployment_key_with_a_reserved_name(tmp_path) -> None:
    key = keys.new_key("lead", directory=tmp_path).model_dump()
    assert load_approver_keys(json.dumps([key]))  # a person's key loads
    with pytest.raises(PhasegateError, match="reserved"):
        load_approver_keys(json.dumps([{**key, "name": "phasegate"}]))


def test_a_pattern_on_the_longest_evidence_stays_fast_and_refuses_with_the_reason() -> None:
    # re.search('\\d+ passed') is quadratic on a long run of digits: 256 KiB would hold the
    # session's workflow task for a minute. Past MAX_PATTERN_TEXT the rule fails at once.
    gate = GateDefinition.model_validate(
        {"fields": {"summary": {"type": "string", "required": True, "pattern": r"\d+ passed"}}}
    )
    started = time.perf_counter()
    verdict = evaluate_gate(gate, {"summary": "1" * 256 * 1024})
    assert time.perf_counter() - started < 0.5
    assert not verdict.passed
    assert any("matched against at most" in p.message for p in verdict.problems)
    ok = evaluate_gate(gate, {"summary": "x" * (MAX_PATTERN_TEXT - 20) + " 12 passed"})
    assert ok.passed
