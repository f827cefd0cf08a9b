"""Issue 19, without a server: the developer sessions an orchestration knows (open,
completed, failed, replaced by a replan), what it shows of them, and the prompt of the
open one."""

from __future__ import annotations

from datetime import UTC, datetime

from phasegate.domain.orchestration.agents import (
    DeveloperProfile,
    DeveloperResult,
    Issue,
    PlannerDecision,
    PlanStep,
    Profile,
    StepUsage,
)
from phasegate.domain.orchestration.messages import OrchestrationCarry, OrchestrationSetup
from phasegate.domain.orchestration.state import OrchestrationState, Replan, RunStep
from phasegate.domain.orchestration.views import plan_lines

NOW = datetime(2026, 11, 24, tzinfo=UTC)
ISSUE = Issue(id="7", title="Fix the typo")
MCP = Profile(working_dir="/tmp", developer=DeveloperProfile(mode="mcp"))


def make(profile: Profile = MCP, carried: OrchestrationCarry | None = None) -> OrchestrationState:
    return OrchestrationState(
        orchestration_id="orch-1",
        run_id="run-1",
        issue=ISSUE,
        profile=profile,
        setup=OrchestrationSetup(models={"planner": "rules"}, working_dir="/tmp"),
        carried=carried,
        now=NOW,
    )


def developing(state: OrchestrationState, session: str = "orch-1-dev-0-1") -> RunStep:
    """Plan developer → reviewer and open the developer's session."""
    state.set_plan(
        PlannerDecision(
            reasoning="r", steps=[PlanStep(agent="developer"), PlanStep(agent="reviewer")]
        ),
        NOW,
        model="rules",
    )
    action = state.advance(NOW)
    assert isinstance(action, RunStep)
    state.start_step(action.step, action.key, NOW)
    state.open_session(action.step, session, "/w/tasks.md", "the prompt")
    return action


def test_the_open_session_has_its_spec_and_prompt_until_its_step_ends():
    state = make()
    action = developing(state)
    view = state.view()
    assert [(s.session_id, s.mode, s.spec_path, s.status) for s in view.developer_sessions] == [
        ("orch-1-dev-0-1", "mcp", "/w/tasks.md", "open")
    ]
    assert view.child_sessions == ["orch-1-dev-0-1"]
    assert state.sessions.prompt().prompt == "the prompt"
    lines = plan_lines(view)
    assert "developer session orch-1-dev-0-1 (mcp, open): spec /w/tasks.md" in lines
    assert any("phasegate orchestrate prompt orch-1" in line for line in lines)
    result = DeveloperResult(session_id="orch-1-dev-0-1", completed=True)
    state.record_output(action.step, action.key, result, StepUsage(), NOW)
    assert state.view().developer_sessions[0].status == "completed"
    assert state.sessions.prompt().session_id == ""  # none open: no prompt to give


def test_a_replan_replaces_the_open_session_and_the_next_run_shows_it_replaced():
    state = make()
    developing(state)
    state.apply_replan("rethink it", "lead", NOW)
    state.record_failure(state.steps[0], "superseded by a replan", NOW)
    assert state.view().developer_sessions[0].status == "failed"
    action = state.advance(NOW)
    assert isinstance(action, Replan)
    nxt = make(carried=action.carry)
    developing(nxt, "orch-1-dev-1-1")
    shown = [(s.session_id, s.status) for s in nxt.view().developer_sessions]
    assert shown == [("orch-1-dev-0-1", "replaced"), ("orch-1-dev-1-1", "open")]
    assert "developer session orch-1-dev-0-1 (mcp, replaced)" in plan_lines(nxt.view())
    assert nxt.sessions.prompt().session_id == "orch-1-dev-1-1"


def test_a_carry_that_names_only_session_ids_shows_them_replaced():
    carry = OrchestrationCarry(
        first_run_id="run-0", replanned_count=1, replan_reason="r", child_sessions=["a", "b"]
    )
    state = make(carried=carry)
    assert [(s.session_id, s.status) for s in state.view().developer_sessions] == [
        ("a", "replaced"),
        ("b", "replaced"),
    ]
    assert "developer session a (replaced)" in plan_lines(state.view())
