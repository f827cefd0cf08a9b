"""A hypothesis state machine over ``SessionState``: random sequences of submissions,
approval decisions, controls, approval deadlines and continue-as-new carries, with the
session's invariants checked after every step. No server: the workflow's activities are
replaced by their outcomes (see ``session_helpers``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from session_helpers import (
    BAD,
    GOOD,
    NOW,
    PHASES,
    SESSION_ID,
    Signer,
    new_state,
    requires_approval,
    submit,
)

from phasegate.domain.errors import PhasegateError
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.session.messages import (
    ApprovalDecision,
    CheckpointResult,
    CheckpointSubmission,
    ControlRequest,
    SessionOptions,
)
from phasegate.domain.session.state import DEADLINE_ACTOR, SessionState

N = len(PHASES)
MAX_EVIDENCE = 512
OVERSIZE = {"summary": "x" * MAX_EVIDENCE, "count": 1}
APPROVERS = ["lead", "ops", "mallory", ""]
# abandon ends an example's session: rare, so most examples get far
CONTROLS = ["pause", "resume", "resume", "retry_phase", "rollback", "rollback", "rollback"] * 4 + [
    "abandon"
]
SIGNERS = {name: Signer(name) for name in ("lead", "ops")}
PROBE_SUBMISSIONS = [
    CheckpointSubmission(phase=p, evidence=e) for p in range(-1, N + 1) for e in (GOOD[0], OVERSIZE)
]
PROBE_CONTROLS = [
    ControlRequest(action=a, to_phase=t, reason=r, actor="ops")  # type: ignore[arg-type]
    for a in ("pause", "resume", "retry_phase", "abandon", "rollback")
    for t in (None, 0, 1, 3)
    for r in ("", "why")
]


def _error(err: PhasegateError | None) -> tuple[type, dict[str, Any]] | None:
    return None if err is None else (type(err), err.details())


class SessionMachine(RuleBasedStateMachine):
    """One session per example; the model keeps only what the invariants need."""

    @initialize(
        policy=st.sampled_from(["unsigned", "unsigned", "signed", "signed", "closed"]),
        override=st.sampled_from([None, None, ["ops"], ["ops", "agent"], ["agent"], []]),
        start_at=st.integers(0, N - 1),
    )
    def start(self, policy: str, override: list[str] | None, start_at: int) -> None:
        # closed: signed approvals only, and no keys named, so no decision is ever accepted
        self.signed = policy == "signed"
        self.unsigned_ok = policy == "unsigned"
        self.override = override
        self.state = new_state(
            options=SessionOptions(max_evidence_bytes=MAX_EVIDENCE, approvers=override),
            approver_keys=[s.key for s in SIGNERS.values()] if self.signed else [],
            unsigned_approvals=self.unsigned_ok,
        )
        self.now = NOW
        self.fresh = 0
        self.answers: dict[str, CheckpointResult] = {}  # submission id -> first answer
        self.advanced_by: set[str] = set()  # submission ids whose first answer advanced
        self.deadlines: list[tuple[int, Any]] = []  # every deadline a timer was armed for
        self.walk(start_at)  # depth for short examples: the happy path, through the same calls
        self.last_index = self.state.current.index

    # ---- steps -----------------------------------------------------------

    @rule(
        offset=st.sampled_from([0] * 6 + [-1, 1, 2]),
        kind=st.sampled_from(["good"] * 4 + ["bad", "bad", "oversize"]),
        sid=st.one_of(st.none(), st.just("fresh"), st.sampled_from(["s0", "s1", "s2", "s3"])),
        via=st.sampled_from(["update", "signal"]),
        verify_ok=st.booleans(),
        wait=st.integers(0, 3600),
    )
    def submission(
        self, offset: int, kind: str, sid: str | None, via: Any, verify_ok: bool, wait: int
    ) -> None:
        state = self.state
        self.tick(wait)
        phase = state.current.index + offset
        evidence = (
            {"good": GOOD, "bad": BAD}[kind].get(phase, {}) if kind != "oversize" else OVERSIZE
        )
        if sid == "fresh":
            sid = f"f{self.fresh}"
            self.fresh += 1
        original = self.answers.get(sid) if sid else None
        before = self.snapshot()
        try:
            result = submit(state, phase, evidence, sid=sid, now=self.now, via=via,
                            verify_ok=verify_ok)  # fmt: skip
        except PhasegateError as err:
            assert original is None, "a repeated submission was refused"
            assert state.model_dump() == self.before_step, "a refused submission changed state"
            event(f"submission refused: {err.code}")
            return
        if original is not None:  # the original answer again, and nothing recorded
            assert state.model_dump() == self.before_step, "a repeat changed state"
            keep = {"next_phase"}
            assert result.model_dump(exclude=keep) == original.model_dump(exclude=keep)
            if result.next_phase is not None:
                assert original.next_phase is not None
                assert result.next_phase.phase == original.next_phase.phase
            event("submission repeated")
            return
        if sid:
            self.answers[sid] = result
        advanced = len(state.phases.completed) > before[1]
        if advanced:
            event(f"advanced to {state.current.index} ({state.status})")
            assert sid not in self.advanced_by, "a submission id advanced twice"
            if sid:
                self.advanced_by.add(sid)
            assert result.passed and not requires_approval(before[0])
            assert len(state.phases.completed) == before[1] + 1
            last = state.status == "completed"
            assert state.current.index == before[0] + (0 if last else 1)
            assert result.current_phase == state.current.index and result.completed == last
            shown = result.next_phase
            assert (shown is None) if last else (shown and shown.phase == state.current.index)
        else:
            assert state.current.index == before[0] and result.next_phase is None
        verify_blocks = bool(PHASES[before[0]].gate.verify) and not verify_ok
        expected_pass = kind == "good" and offset == 0 and not verify_blocks
        assert result.passed == expected_pass, (kind, offset, verify_ok, result.problems)
        if result.passed:
            assert advanced != result.awaiting_approval
        if result.awaiting_approval:
            assert state.status == "awaiting_approval" and state.phases.pending is not None
        self.remember_deadline()

    @rule(
        approver=st.sampled_from(["lead", "ops"] * 3 + APPROVERS),
        approve=st.sampled_from([True, True, False]),
        offset=st.sampled_from([0] * 5 + [-1]),
        sign=st.sampled_from(["good"] * 4 + ["none", "forged"]),
        nonce=st.integers(0, 30).map(lambda i: f"nonce-{i:012d}"),
        wait=st.integers(0, 3600),
    )
    def decision(
        self, approver: str, approve: bool, offset: int, sign: str, nonce: str, wait: int
    ) -> None:
        state = self.state
        self.tick(wait)
        choice = "approve" if approve else "reject"
        phase = state.current.index + offset
        signed: dict[str, str] = {}
        if sign != "none":  # "good": the approver's own key; "forged": someone else's
            own = sign == "good" and approver in SIGNERS
            signer = SIGNERS[approver] if own else SIGNERS["ops" if approver == "lead" else "lead"]
            signed = signer.sign(phase, choice, nonce, comment="c")
        d = ApprovalDecision(phase=phase, approver=approver, decision=choice, comment="c", **signed)
        expected = self.expect_decision(d, sign)
        problem = state.check_decision(d, SESSION_ID)
        assert (problem is None) == expected, (d, problem, self.signed, self.unsigned_ok)
        event(f"decision {'accepted' if problem is None else 'refused'} (signed={self.signed})")
        if problem is not None:
            return
        before = self.snapshot()
        following = None
        if choice == "approve" and not state.is_last_phase():
            following = PHASES[state.current.index + 1]
        advanced = state.apply_decision(d, following, self.now)
        assert advanced == approve
        event(f"approved {before[0]}" if approve else f"rejected {before[0]}")
        if approve:
            assert state.current.index == before[0] + 1 or state.status == "completed"
            assert state.phases.artifacts[before[0]].approved_by == approver
        else:
            assert state.current.index == before[0] and state.status == "active"
            assert state.phases.pending is None and state.feedback == "c"

    @rule(
        action=st.sampled_from(CONTROLS),
        to_phase=st.one_of(st.none(), st.integers(-1, N)),
        reason=st.sampled_from(["", "because"]),
    )
    def control(self, action: Any, to_phase: int | None, reason: str) -> None:
        state = self.state
        self.tick(60)
        req = ControlRequest(action=action, to_phase=to_phase, reason=reason, actor="ops")
        if state.check_control(req) is not None:
            return
        event(f"control {action}")
        before = self.snapshot()
        state.apply_control(req, self.now)
        if action == "rollback":
            assert to_phase is not None and to_phase < before[0]
            assert state.current.index == to_phase and state.status == "active"
            # Answers about undone phases are forgotten: those ids are new submissions again.
            self.answers = {k: r for k, r in self.answers.items() if r.current_phase < to_phase}
            self.advanced_by &= set(self.answers)
        else:
            assert state.current.index == before[0]
        self.remember_deadline()

    @precondition(lambda self: bool(self.deadlines))
    @rule(pick=st.integers(0, 10), late=st.integers(0, 120), delivered=st.booleans())
    def deadline_passes(self, pick: int, late: int, delivered: bool) -> None:
        """A timer fires: the current deadline, or a stale one from earlier."""
        state = self.state
        phase, due = self.deadlines[pick % len(self.deadlines)]
        self.now = max(self.now, due + timedelta(seconds=late))
        live = state.approval_deadline() == (phase, due)
        before, dump = self.snapshot(), state.model_dump()
        expiry = state.apply_deadline(phase, due, self.now, SESSION_ID)
        if not live:
            assert expiry is None and state.model_dump() == dump
            event("deadline stale")
            return
        event(f"deadline {expiry.action if expiry else None}")
        assert expiry is not None and state.current.index == before[0]
        if expiry.action == "reject":
            assert state.status == "active" and state.phases.pending is None
            assert state.book.records[-1].approver == DEADLINE_ACTOR
        else:
            assert state.status == "approval_overdue" and state.phases.pending is not None
            assert state.audit[-1].action == "escalate"
            assert state.approval_deadline() is None
            if expiry.notify is not None:  # the webhook activity's outcome
                error = None if delivered else "HTTP 503"
                state.apply_notification(phase, expiry.notify.url, self.now, error)
                assert state.audit[-1].action == "notify"

    @rule()
    def carry(self) -> None:
        """Continue-as-new: the revived state equals the original and answers the same."""
        state = self.state
        revived = SessionState.model_validate(state.carry())
        assert revived == state
        for probe in PROBE_SUBMISSIONS:
            assert _error(revived.check_submission(probe)) == _error(state.check_submission(probe))
        for probe in PROBE_CONTROLS:
            assert _error(revived.check_control(probe)) == _error(state.check_control(probe))
        for approver in APPROVERS:
            probe = ApprovalDecision(
                phase=state.current.index, approver=approver, decision="approve"
            )
            assert _error(revived.check_decision(probe, SESSION_ID)) == _error(
                state.check_decision(probe, SESSION_ID)
            )
        for index in range(-1, N + 1):
            assert revived.phase_view(index) == state.phase_view(index)
        for sid in state.answers.by_submission:
            assert revived.repeat(sid) == state.repeat(sid)
        assert revived.status_view() == state.status_view()
        assert revived.approval_deadline() == state.approval_deadline()
        assert revived.verify_timeout() == state.verify_timeout()
        assert revived.summary() == state.summary()
        self.state = revived

    # ---- invariants ------------------------------------------------------

    @invariant()
    def phases_never_skip(self) -> None:
        index = self.state.current.index
        assert index in (self.last_index, self.last_index + 1) or index < self.last_index
        self.last_index = index

    @invariant()
    def completed_phases_are_a_prefix(self) -> None:
        state = self.state
        done = [c.phase for c in state.phases.completed]
        k = len(done)
        assert done == list(range(k))
        assert sorted(state.phases.past) == done and sorted(state.phases.artifacts) == done
        if state.status == "completed":
            assert k == N and state.current.index == N - 1
        else:
            assert k == state.current.index

    @invariant()
    def no_advance_without_a_passing_evaluation_and_approval(self) -> None:
        state = self.state
        for index, artifact in state.phases.artifacts.items():
            assert evaluate_gate(PHASES[index].gate, artifact.evidence).passed
            assert all(r["passed"] for r in artifact.outputs["verify"])
            if requires_approval(index):
                assert artifact.approved_by is not None
                assert artifact.approved_by != DEADLINE_ACTOR
                approved = [
                    a for a in state.book.records if a.phase == index and a.decision == "approve"
                ]
                assert approved and approved[-1].approver == artifact.approved_by
            else:
                assert artifact.approved_by is None

    @invariant()
    def waiting_is_consistent(self) -> None:
        state = self.state
        if state.finished:  # abandon keeps whatever was pending, as a record
            return
        waiting = state.awaiting_approval or (
            state.status == "paused"
            and state.paused_from in ("awaiting_approval", "approval_overdue")
        )
        assert (state.phases.pending is not None) == waiting
        if state.book.due_at is not None:
            assert waiting
        if state.status == "paused":
            assert state.paused_from is not None
        else:
            assert state.paused_from is None

    @invariant()
    def repeats_answer_without_pointing_ahead(self) -> None:
        state = self.state
        assert set(state.answers.by_submission) == set(self.answers)
        for result in state.answers.by_submission.values():
            assert result.current_phase <= state.current.index
            assert result.next_phase is None or result.next_phase.content == ""

    # ---- helpers ---------------------------------------------------------

    def walk(self, index: int) -> None:
        """Good evidence and an allowed, (signed if need be) approval up to phase ``index``."""
        state = self.state
        while state.current.index < index and not state.finished:
            phase = state.current.index
            result = submit(state, phase, GOOD[phase], sid=f"walk{phase}", now=self.now)
            assert result.passed
            self.answers[f"walk{phase}"] = result
            if not result.awaiting_approval:
                self.advanced_by.add(f"walk{phase}")
                continue
            approver = (state.allowed_approvers() or ["lead"])[0]
            signed = SIGNERS[approver].sign(phase, "approve", f"walk-nonce-{phase:08d}", "ok")
            d = ApprovalDecision(phase=phase, approver=approver, decision="approve", comment="ok")
            d = d.model_copy(update=signed if self.signed else {})
            if state.check_decision(d, SESSION_ID) is not None:
                # closed, or the session's approvers name none of the gate's: nobody can
                assert (not self.signed and not self.unsigned_ok) or not self.may_approve()
                return
            assert state.apply_decision(d, PHASES[phase + 1], self.now)

    def may_approve(self) -> list[str]:
        """Who may decide the current phase: the gate's names, only narrowed by the
        session's (never widened); ``["*"]``-like any-name when both name nobody."""
        gate = self.state.current.approvers or self.state.current.gate.approval.approvers
        if self.override is None:
            return list(gate) or list(SIGNERS) + ["anyone", "mallory"]
        return [a for a in gate if a in self.override] if gate else list(self.override)

    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self.before_step = self.state.model_dump()

    def snapshot(self) -> tuple[int, int, str]:
        state = self.state
        return state.current.index, len(state.phases.completed), state.status

    def remember_deadline(self) -> None:
        key = self.state.approval_deadline()
        if key is not None and key not in self.deadlines:
            self.deadlines.append(key)

    def expect_decision(self, d: ApprovalDecision, sign: str) -> bool:
        """An independent statement of who may decide what."""
        state = self.state
        if not state.awaiting_approval or d.phase != state.current.index:
            return False
        if not d.approver.strip():
            return False
        if not self.may_approve() or d.approver not in self.may_approve():
            return False
        if not self.signed:
            return self.unsigned_ok
        authentic = sign == "good" and d.approver in SIGNERS
        return authentic and d.nonce not in state.book.used_nonces


SessionMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSessionMachine = SessionMachine.TestCase
