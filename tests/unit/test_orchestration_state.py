"""OrchestrationState without a server: steps, gates, review loop, replans, carry."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegate.domain.orchestration.agents import (
    AnalysisResult,
    DeveloperResult,
    Issue,
    PlannerDecision,
    PlanOutput,
    PlanStep,
    Profile,
    ReviewResult,
    StepUsage,
)
from phasegate.domain.orchestration.messages import OrchestrationSetup, OutputRecord
from phasegate.domain.orchestration.state import (
    Finish,
    NeedPlan,
    OrchestrationState,
    Replan,
    RunStep,
    Wait,
)
from phasegate.domain.orchestration.views import MAX_CARRY_BYTES, compact, details_markdown

NOW = datetime(2026, 11, 24, tzinfo=UTC)
ISSUE = Issue(id="7", title="Add an export command", body="Users want CSV export.")


def make(profile: Profile | None = None, *, carried=None, keys=(), unsigned=True):
    return OrchestrationState(
        orchestration_id="orch-1",
        run_id="run-1",
        issue=ISSUE,
        profile=profile or Profile(working_dir="/tmp"),
        setup=OrchestrationSetup(
            models={"planner": "rules"},
            working_dir="/tmp",
            approver_keys=list(keys),
            unsigned_approvals=unsigned,
        ),
        carried=carried,
        now=NOW,
    )


def plan(*agents: str) -> PlannerDecision:
    return PlannerDecision(reasoning="test", steps=[PlanStep(agent=a) for a in agents])


def output_for(agent: str, **over):
    if agent == "analyst":
        return AnalysisResult(findings=["f"], scope=over.get("scope", "simple"), confidence=0.9)
    if agent == "architect":
        return PlanOutput(goal="Add export", plan_markdown="## Phase 1: X", confidence=0.9)
    if agent == "reviewer":
        return ReviewResult(approved=over.get("approved", True), confidence=0.9)
    return DeveloperResult(session_id="s", completed=True)


def run_next(state: OrchestrationState, **over) -> RunStep:
    action = state.advance(NOW)
    assert isinstance(action, RunStep), action
    state.start_step(action.step, action.key, NOW)
    state.record_output(
        action.step, action.key, output_for(action.step.agent, **over), StepUsage(requests=1), NOW
    )
    return action


def test_a_plan_runs_in_order_and_completes_with_keyed_outputs():
    state = make()
    assert isinstance(state.advance(NOW), NeedPlan)
    state.set_plan(plan("analyst", "developer", "reviewer"), NOW, model="rules")
    keys = [run_next(state).key for _ in range(3)]
    assert keys == ["analyst_0", "developer_0", "reviewer_0"]
    assert state.advance(NOW) == Finish(True)
    assert set(state.outputs) == {"planner_0", "analyst_0", "developer_0", "reviewer_0"}
    assert [h.seq for h in state.history] == list(range(len(state.history)))


def test_recording_the_same_output_twice_changes_nothing():
    state = make()
    state.set_plan(plan("developer"), NOW, model="rules")
    action = state.advance(NOW)
    assert state.record_output(action.step, action.key, output_for("developer"), StepUsage(), NOW)
    before = (len(state.history), state.usage)
    assert not state.record_output(
        action.step, action.key, output_for("developer"), StepUsage(requests=9), NOW
    )
    assert (len(state.history), state.usage) == before


def test_complex_analysis_without_architect_replans_by_continue_as_new():
    state = make()
    state.set_plan(plan("analyst", "developer", "reviewer"), NOW, model="rules")
    run_next(state, scope="complex")
    action = state.advance(NOW)
    assert isinstance(action, Replan)
    assert action.carry.replanned_count == 1
    assert "complex" in action.carry.replan_reason
    assert [o.key for o in action.carry.outputs] == ["planner_0", "analyst_0"]
    nxt = make(carried=action.carry)
    assert nxt.replanned_count == 1 and "analyst_0" in nxt.outputs
    assert nxt.history[-1].kind == "replan"
    assert nxt.next_key("analyst") == "analyst_1"


def test_max_replans_exhausted_fails_with_the_reason():
    state = make(Profile(working_dir="/tmp", max_replans=0))
    state.set_plan(plan("developer"), NOW, model="rules")
    action = state.advance(NOW)
    state.record_failure(action.step, "the session refused", NOW)
    finish = state.advance(NOW)
    assert isinstance(finish, Finish) and not finish.completed
    assert "the session refused" in finish.reason and "max_replans" in finish.reason


def test_review_rejection_sends_work_back_until_the_cap():
    state = make(Profile(working_dir="/tmp", max_review_passes=2))
    state.set_plan(plan("developer", "reviewer"), NOW, model="rules")
    run_next(state)
    run_next(state, approved=False)
    assert [s.agent for s in state.steps] == ["developer", "reviewer", "developer", "reviewer"]
    assert run_next(state).key == "developer_1"
    run_next(state, approved=False)
    finish = state.advance(NOW)
    assert isinstance(finish, Finish) and not finish.completed
    assert "rejected the change 2 times" in finish.reason


def test_approval_required_waits_and_a_rejection_fails():
    state = make(Profile(working_dir="/tmp", approval_required=["developer"]))
    state.set_plan(plan("developer"), NOW, model="rules")
    wait = state.advance(NOW)
    assert isinstance(wait, Wait) and wait.awaiting.gate == 1
    assert "not the open one" in str(
        state.check_decision(
            gate=2, approver="a", decision="approve", comment="", nonce=None, signature=None
        )
    )
    state.apply_decision(approver="lead", decision="reject", comment="no", nonce=None, now=NOW)
    finish = state.advance(NOW)
    assert isinstance(finish, Finish) and "lead rejected gate 1" in finish.reason


def test_trivial_scope_skips_approval_when_auto_approve_trivial():
    state = make(
        Profile(working_dir="/tmp", approval_required=["developer"], auto_approve_trivial=True)
    )
    state.set_plan(plan("analyst", "developer"), NOW, model="rules")
    run_next(state, scope="trivial")
    assert isinstance(state.advance(NOW), RunStep)


def test_low_confidence_escalates_to_a_person():
    state = make(Profile(working_dir="/tmp", escalation_threshold=0.95))
    state.set_plan(plan("analyst", "developer"), NOW, model="rules")
    run_next(state)
    wait = state.advance(NOW)
    assert isinstance(wait, Wait) and wait.awaiting.kind == "escalation"
    state.apply_decision(approver="lead", decision="approve", comment="", nonce=None, now=NOW)
    assert isinstance(state.advance(NOW), RunStep)


def test_signed_gate_refuses_unsigned_and_forged_decisions(tmp_path):
    from phasegate.client.keys import new_key, sign_decision

    key = new_key("lead", directory=tmp_path)
    state = make(
        Profile(working_dir="/tmp", approval_required=["developer"]), keys=[key], unsigned=False
    )
    state.set_plan(plan("developer"), NOW, model="rules")
    gate = state.advance(NOW).awaiting.gate
    refused = state.check_decision(
        gate=gate, approver="lead", decision="approve", comment="", nonce=None, signature=None
    )
    assert refused is not None and refused.code == "approval_refused"
    assert "not signed" in refused.message
    nonce, sig = sign_decision(
        "lead", session_id="orch-1", phase=gate, decision="approve", directory=tmp_path,
        binding=state.approval_binding(),
    )  # fmt: skip
    assert state.check_decision(
        gate=gate, approver="lead", decision="approve", comment="", nonce=nonce, signature=sig
    ) is None  # fmt: skip
    # The same signature cannot approve with another comment or another gate.
    assert "does not match" in str(
        state.check_decision(
            gate=gate, approver="lead", decision="approve", comment="x", nonce=nonce, signature=sig
        )
    )
    other, _ = sign_decision(
        "lead", session_id="orch-2", phase=gate, decision="approve", directory=tmp_path,
        binding=state.approval_binding(),
    )  # fmt: skip
    assert other != nonce


def test_a_person_can_request_a_replan_which_withdraws_the_gate():
    state = make(Profile(working_dir="/tmp", approval_required=["developer"]))
    state.set_plan(plan("developer"), NOW, model="rules")
    assert isinstance(state.advance(NOW), Wait)
    assert state.check_replan(actor="lead", reason="wrong plan", nonce=None, signature=None) is None
    state.apply_replan("wrong plan", "lead", NOW)
    action = state.advance(NOW)
    assert isinstance(action, Replan) and "lead asked: wrong plan" in action.carry.replan_reason


def test_carry_stays_under_the_limit_keeping_keys_and_digests():
    state = make()
    state.set_plan(plan("analyst"), NOW, model="rules")
    for i in range(200):
        state.outputs[f"architect_{i}"] = OutputRecord(
            key=f"architect_{i}", agent="architect", step=0,
            output={"plan_markdown": "x" * 15_000}, sha256=f"{i}", at=NOW,
        )  # fmt: skip
    carry = compact(state.carry("test"))
    assert len(carry.model_dump_json()) <= MAX_CARRY_BYTES
    assert len(carry.outputs) == 201 and carry.outputs[-1].output  # latest kept whole
    assert all(o.sha256 for o in carry.outputs)


def test_details_markdown_marks_the_current_step():
    state = make()
    state.set_plan(plan("analyst", "developer"), NOW, model="rules")
    run_next(state)
    text = details_markdown(state)
    assert "▶ 1 developer" in text and "✓ 0 analyst   [done]" in text


outcomes = st.lists(
    st.sampled_from(["ok", "fail", "reject", "complex", "lowconf", "replan_req"]), max_size=30
)


@settings(max_examples=150, deadline=None)
@given(outcomes, st.integers(0, 3), st.integers(1, 3))
def test_any_run_ends_or_waits_within_its_budgets(events, max_replans, max_reviews):
    """Whatever the agents answer, steps never run twice, history is append-only and
    the number of replans never exceeds max_replans."""
    profile = Profile(
        working_dir="/tmp", max_replans=max_replans, max_review_passes=max_reviews,
        escalation_threshold=0.5,
    )  # fmt: skip
    state = make(profile)
    replans = 0
    events = list(events)
    for _ in range(200):
        action = state.advance(NOW)
        if isinstance(action, Finish):
            break
        if isinstance(action, NeedPlan):
            state.set_plan(plan("analyst", "developer", "reviewer"), NOW, model="rules")
        elif isinstance(action, Wait):
            state.apply_decision(approver="p", decision="approve", comment="", nonce=None, now=NOW)
        elif isinstance(action, Replan):
            replans += 1
            assert replans <= max_replans
            state = make(profile, carried=action.carry)
        else:
            event = events.pop(0) if events else "ok"
            assert action.key not in state.outputs
            state.start_step(action.step, action.key, NOW)
            if event == "fail":
                state.record_failure(action.step, "boom", NOW)
                continue
            agent = action.step.agent
            out = output_for(agent, approved=event != "reject",
                             scope="complex" if event == "complex" else "simple")  # fmt: skip
            if event == "lowconf" and hasattr(out, "confidence"):
                out.confidence = 0.1
            if event == "replan_req" and hasattr(out, "replan_request"):
                out.replan_request = "please"
            seqs = [h.seq for h in state.history]
            state.record_output(action.step, action.key, out, StepUsage(), NOW)
            assert [h.seq for h in state.history][: len(seqs)] == seqs
    else:
        pytest.fail("the run neither finished nor waited within 200 actions")


def test_a_configuration_failure_ends_the_run_without_spending_replans():
    state = make()
    state.set_plan(plan("developer"), NOW, model="rules")
    action = state.advance(NOW)
    state.record_failure(action.step, "workflow 'x' not found", NOW, code="workflow_not_found")
    finish = state.advance(NOW)
    assert isinstance(finish, Finish) and "cannot run on this worker" in finish.reason
    assert state.replanned_count == 0 and state.pending_replan is None
