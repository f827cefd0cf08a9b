"""GraphState, the step graph's state machine, without a server: every decision a run
makes (edges, fallbacks, caps, refusals, question relay with signed answers, repeats,
continue-as-new)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from phasegate.domain.errors import SessionError, SessionNotActive, StepSequenceViolation
from phasegate.domain.graph.messages import (
    GraphAnswer,
    GraphSetup,
    Question,
    StartGraph,
    StepReport,
)
from phasegate.domain.graph.model import Graph
from phasegate.domain.graph.state import (
    STEPS_BEFORE_CONTINUE,
    ContinueAsNew,
    Finish,
    GraphState,
    HandlerOutcome,
    RenderStep,
    RunHandler,
    WaitAnswer,
    WaitReport,
)
from phasegate.domain.graph.views import mermaid
from phasegate.domain.signing import ApproverKey, canonical_message

NOW = datetime(2026, 1, 1, tzinfo=UTC)
RUN = "graph-run-1"

CRITIQUE: dict[str, Any] = {
    "name": "critique",
    "entry": "draft",
    "params": {"depth": {"type": "int", "default": 2, "min": 1, "max": 5}},
    "state": {"confidence": {"type": "float", "min": 0, "max": 1}, "notes": {"type": "str"}},
    "steps": [
        {
            "id": "draft",
            "title": "Draft",
            "outcomes": ["quick", "full"],
            "next": {"quick": "answer", "full": "research"},
        },
        {
            "id": "research",
            "title": "Research",
            "next": {"ok": "answer", "iterate": "research", "_default": "answer"},
            "max_iterations": 2,
            "ask": True,
        },
        {"id": "answer", "title": "Answer", "next": {"ok": None, "fail": "draft"}},
    ],
}


def start(spec: dict[str, Any] = CRITIQUE, **kw: Any) -> StartGraph:
    graph = Graph.model_validate(spec)
    return StartGraph(graph=graph, sha256=graph.sha256(), **kw)


def new_state(spec: dict[str, Any] = CRITIQUE, setup: GraphSetup | None = None) -> GraphState:
    return GraphState.begin(start(spec), setup or GraphSetup(), RUN, NOW)


def report(run: GraphState, outcome: str, **kw: Any) -> Any:
    msg = StepReport(step_id=kw.pop("step_id", run.current), outcome=outcome, **kw)
    problem = run.check_report(msg)
    if problem is not None:
        raise problem
    return run.apply_report(msg, NOW)


def test_a_run_renders_waits_and_follows_outcome_edges_to_the_end() -> None:
    state = new_state()
    assert isinstance(state.advance(NOW), RenderStep)
    state.apply_rendered("draft", 1, "Draft it")
    assert state.advance(NOW) == WaitReport("draft")
    assert report(state, "quick").next_step == "answer"
    state.apply_rendered("answer", 1, "Answer it")
    result = report(state, "ok")
    assert result.status == "completed" and result.next_step is None
    assert isinstance(state.advance(NOW), Finish) and state.outcome == "ok"
    assert [(p.step, p.outcome, p.to) for p in state.path] == [
        ("draft", "quick", "answer"),
        ("answer", "ok", None),
    ]


def test_default_edge_catches_what_has_no_edge_of_its_own() -> None:
    state = new_state()
    report(state, "full")
    assert report(state, "skip").next_step == "answer"  # research: skip -> _default


def test_an_outcome_with_no_edge_and_no_default_fails_the_run_saying_so() -> None:
    state = new_state()
    report(state, "quick")
    report(state, "skip")  # answer has ok and fail edges only
    assert state.status == "failed"
    assert "ended 'skip'" in state.failure and "no edge" in state.failure


def test_iterate_stops_at_its_cap() -> None:
    state = new_state()
    report(state, "full")
    report(state, "iterate")
    report(state, "iterate")
    assert state.status == "running" and state.visit() == 3
    report(state, "iterate")
    assert state.status == "failed" and "iterated more than its cap of 2" in state.failure


def test_visit_cap_fails_a_loop_that_never_ends() -> None:
    spec = {
        "name": "loop",
        "entry": "a",
        "steps": [
            {"id": "a", "title": "A", "next": {"ok": "b", "fail": None}, "max_visits": 3},
            {"id": "b", "title": "B", "next": {"ok": "a"}},
        ],
    }
    state = new_state(spec)
    for _ in range(10):
        if state.finished:
            break
        report(state, "ok")
    assert state.status == "failed" and "more than its cap of 3 visits" in state.failure


def test_reports_for_another_step_a_stale_visit_or_an_unknown_outcome_are_refused() -> None:
    state = new_state()
    with pytest.raises(StepSequenceViolation, match="on step 'draft', not 'answer'"):
        report(state, "ok", step_id="answer")
    with pytest.raises(SessionError, match="no outcome 'ok'") as err:
        report(state, "ok")  # draft declares quick and full only
    assert err.value.hint == "report one of: quick, full"
    report(state, "full")
    report(state, "iterate")  # research, visit 2 now
    with pytest.raises(StepSequenceViolation, match="stale"):
        report(state, "ok", visit=1)
    assert state.path_total == 2  # refusals recorded nothing


def test_step_state_must_be_declared_and_fit_its_type_and_range() -> None:
    state = new_state()
    with pytest.raises(SessionError, match="no state field 'mood'"):
        report(state, "full", state={"mood": "good"})
    with pytest.raises(SessionError, match="above the maximum 1"):
        report(state, "full", state={"confidence": 3})
    with pytest.raises(SessionError, match="expected str"):
        report(state, "full", state={"notes": 7})
    report(state, "full", state={"confidence": 0.4})
    assert state.values == {"confidence": 0.4}


def test_a_repeated_report_id_is_answered_with_its_first_result() -> None:
    state = new_state()
    first = report(state, "full", report_id="r-1")
    # The run moved on; the same id (a retry by the agent) changes nothing.
    again = state.apply_report(StepReport(step_id="draft", outcome="quick", report_id="r-1"), NOW)
    assert again == first and state.current == "research" and state.path_total == 1
    assert state.check_report(StepReport(step_id="draft", outcome="quick", report_id="r-1")) is None


def test_evidence_that_fails_the_steps_gate_keeps_the_run_on_the_step() -> None:
    spec = {
        "name": "gated",
        "entry": "a",
        "steps": [
            {
                "id": "a",
                "title": "A",
                "gate": {"fields": {"tests_passed": {"type": "integer", "min": 1}}},
            }
        ],
    }
    state = new_state(spec)
    refused = report(state, "ok", evidence={"tests_passed": 0})
    assert not refused.accepted and refused.problems and state.current == "a"
    assert report(state, "ok", evidence={"tests_passed": 3}).status == "completed"


# ---- question relay ------------------------------------------------------------------

QUESTIONS = [Question(id="scope", text="How deep?", options=["quick", "thorough"])]


class Person:
    def __init__(self, name: str) -> None:
        self.name = name
        self.private = Ed25519PrivateKey.generate()
        raw = self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self.key = ApproverKey(name=name, public_key=base64.b64encode(raw).decode())

    def answer(self, state: GraphState, answers: dict[str, str], nonce: str) -> GraphAnswer:
        unsigned = GraphAnswer(
            step_id=state.current or "", round=state.question_round, answers=answers
        )
        message = canonical_message(
            session_id=RUN,
            phase=unsigned.round,
            decision="approve",
            nonce=nonce,
            approver=self.name,
            comment=unsigned.comment(),
            binding=state.answer_binding(),
        )
        signature = base64.b64encode(self.private.sign(message)).decode()
        return unsigned.model_copy(
            update={"approver": self.name, "nonce": nonce, "signature": signature}
        )


def asking(setup: GraphSetup | None = None) -> GraphState:
    state = new_state(setup=setup)
    report(state, "full")
    report(state, "needs_input", questions=QUESTIONS)
    return state


def test_needs_input_waits_for_a_person_and_runs_the_step_again_with_the_answers() -> None:
    state = asking()
    assert state.status == "awaiting_input" and state.advance(NOW) == WaitAnswer("research", 1)
    with pytest.raises(SessionNotActive, match="waits for a person"):
        report(state, "ok")
    ans = GraphAnswer(step_id="research", round=1, answers={"scope": "quick"}, approver="lead")
    assert state.check_answer(ans, RUN) is None
    state.apply_answer(ans, NOW)
    assert state.status == "running" and state.answers == {"scope": "quick"}
    assert state.visit() == 2 and isinstance(state.advance(NOW), RenderStep)
    report(state, "ok")
    assert state.answers == {}  # the answers were that visit's


def test_off_menu_partial_or_stale_answers_are_refused() -> None:
    state = asking()
    bad = GraphAnswer(step_id="research", round=1, answers={"scope": "maybe"}, approver="lead")
    assert "not an option" in str(state.check_answer(bad, RUN))
    partial = GraphAnswer(step_id="research", round=1, answers={}, approver="lead")
    assert "answer every question" in str(state.check_answer(partial, RUN))
    stale = GraphAnswer(step_id="research", round=2, answers={"scope": "quick"}, approver="x")
    assert isinstance(state.check_answer(stale, RUN), StepSequenceViolation)


def test_questions_need_an_asking_step_and_two_or_three_options() -> None:
    state = new_state()
    with pytest.raises(SessionError, match="may not ask"):
        report(state, "needs_input", questions=QUESTIONS)
    report(state, "full")
    one = [Question(id="q", text="?", options=["only"])]
    with pytest.raises(SessionError, match="2 or 3 options"):
        report(state, "needs_input", questions=one)
    with pytest.raises(SessionError, match="1 to 3 questions"):
        report(state, "needs_input")


def test_where_the_deployment_has_keys_only_a_signed_answer_is_taken_once() -> None:
    lead = Person("lead")
    state = asking(GraphSetup(approver_keys=[lead.key], unsigned_answers=False))
    unsigned = GraphAnswer(step_id="research", round=1, answers={"scope": "quick"}, approver="lead")
    assert "signed" in str(state.check_answer(unsigned, RUN))
    # The agent names the lead but signs nothing it could: a forged signature.
    forged = unsigned.model_copy(update={"nonce": "n" * 22, "signature": "A" * 88})
    assert state.check_answer(forged, RUN) is not None
    signed = lead.answer(state, {"scope": "thorough"}, "nonce-aaaaaaaaaaaaaaaa")
    assert state.check_answer(signed, RUN) is None
    # The signature binds the answers: another answer under it is refused.
    swapped = signed.model_copy(update={"answers": {"scope": "quick"}})
    assert state.check_answer(swapped, RUN) is not None
    state.apply_answer(signed, NOW)
    report(state, "needs_input", questions=QUESTIONS)  # asks again: round 2
    replay = signed.model_copy(update={"round": 2})
    assert state.check_answer(replay, RUN) is not None  # signed for round 1, nonce spent


# ---- handlers, carry, continue-as-new, drawing -------------------------------------


def test_a_handler_result_ends_the_step_and_a_bad_one_fails_the_run() -> None:
    spec = {
        "name": "fn",
        "entry": "a",
        "steps": [
            {"id": "a", "title": "A", "handler": "pkg.mod:work", "next": {"ok": "b"}},
            {"id": "b", "title": "B", "handler": "pkg.mod:work", "outcomes": ["done"]},
        ],
    }
    state = new_state(spec)
    state.apply_rendered("a", 1, "x")
    assert isinstance(state.advance(NOW), RunHandler)
    state.apply_handler("a", 1, HandlerOutcome(outcome="ok"), NOW)
    assert state.current == "b"
    state.apply_handler("b", 1, HandlerOutcome(outcome="ok"), NOW)  # b declares only "done"
    assert state.status == "failed" and "has no outcome 'ok'" in state.failure


def test_a_handler_failure_takes_the_fail_edge_or_fails_the_run() -> None:
    state = new_state()
    report(state, "quick")
    state.apply_handler_failure("answer", 1, "boom", NOW)  # answer: fail -> draft
    assert state.current == "draft" and state.path[-1].summary == "boom"


def test_carry_keeps_everything_and_long_loops_continue_as_new() -> None:
    spec = {
        "name": "spin",
        "entry": "a",
        "steps": [{"id": "a", "title": "A", "next": {"ok": "a", "fail": None}, "max_visits": 1000}],
    }
    state = new_state(spec)
    for _ in range(STEPS_BEFORE_CONTINUE):
        state.rendered = "x"
        report(state, "ok")
    assert isinstance(state.advance(NOW), ContinueAsNew)
    again = GraphState.from_carry(state.carry())
    assert again.runs == 2 and again.visits == state.visits and again.steps_this_run == 0
    assert not isinstance(again.advance(NOW), ContinueAsNew)


def test_start_problems_name_a_changed_graph_and_bad_params() -> None:
    graph = Graph.model_validate(CRITIQUE)
    assert GraphState.digest_problem(graph, graph.sha256()) is None
    assert "does not match its sha256" in str(GraphState.digest_problem(graph, "0" * 64))
    moved = graph.model_copy(update={"source": "elsewhere.yaml"})
    assert moved.sha256() == graph.sha256()  # where it was read from is not what it says
    problems = GraphState.start_problems(start(params={"depth": 9, "colour": "red"}))
    assert any("above the maximum 5" in p for p in problems)
    assert any("unknown parameter 'colour'" in p for p in problems)
    assert new_state().params == {"depth": 2}


def test_mermaid_draws_every_edge_and_marks_the_run() -> None:
    drawing = mermaid(Graph.model_validate(CRITIQUE), current="answer", taken={"draft"})
    assert drawing.count("-->") == 1 + 2 + 3 + 2  # start, draft, research, answer
    assert "-- otherwise -->" in drawing and "class s2 current" in drawing
    assert "class s0 taken" in drawing


def test_the_run_never_shows_a_step_it_is_not_on() -> None:
    state = new_state()
    view = state.step_view()
    assert view is not None and view.step_id == "draft" and view.outcomes == ["quick", "full"]
    assert "research" not in view.model_dump_json()  # no edge targets, no other steps


def test_a_review_loop_blocks_on_fewer_findings_as_it_iterates() -> None:
    spec = {
        "name": "dispatch",
        "entry": "build",
        "steps": [
            {"id": "build", "title": "Build", "next": {"ok": "review"}, "max_visits": 10},
            {
                "id": "review",
                "title": "Review",
                "review": {},
                "next": {"ok": None, "iterate": "build"},
                "max_iterations": 10,
            },
        ],
    }
    could = [{"severity": "could", "text": "rename x"}]
    should = [{"severity": "should", "text": "add a test"}]
    state = new_state(spec)
    outcomes = []
    for findings in (could, could, should, should, should):  # visits 1..5 of the review
        report(state, "ok")  # build
        report(state, "ok", findings=findings)
        outcomes.append(state.path[-1].outcome)
        if state.finished:
            break
    # 1-2: every finding blocks; 3-4: MUST and SHOULD; 5+: only MUST.
    assert outcomes == ["iterate", "iterate", "iterate", "iterate", "ok"]
    assert state.status == "completed"
