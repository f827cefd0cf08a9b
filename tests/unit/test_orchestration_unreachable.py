"""Issue 19, without a server: failures no plan can fix — a planner or a step whose
model's server refused the connection or does not resolve ends the run at once — how
such a failure is told from one a retry may fix, and the start-up check of each
configured provider's server."""

from __future__ import annotations

import itertools
import socket
from datetime import UTC, datetime

import pytest

from phasegate.activities.model_providers import ModelProviders, refused
from phasegate.domain.orchestration.agents import (
    MODEL_UNREACHABLE,
    Issue,
    PlannerDecision,
    PlanStep,
    Profile,
)
from phasegate.domain.orchestration.messages import OrchestrationSetup
from phasegate.domain.orchestration.state import Finish, OrchestrationState, Replan, RunStep
from phasegate.domain.settings import ProviderConfig

NOW = datetime(2026, 11, 24, tzinfo=UTC)


def make() -> OrchestrationState:
    return OrchestrationState(
        orchestration_id="orch-1",
        run_id="run-1",
        issue=Issue(id="8", title="Export writes an empty file"),
        profile=Profile(working_dir="/tmp"),
        setup=OrchestrationSetup(models={"planner": "rules"}, working_dir="/tmp"),
        carried=None,
        now=NOW,
    )


def test_a_planner_that_cannot_run_here_fails_the_run_at_once():
    state = make()
    state.refuse_plan(["the planner (ollama:m) failed: refused"], NOW, code=MODEL_UNREACHABLE)
    action = state.advance(NOW)
    assert isinstance(action, Finish) and not action.completed
    assert "the planner cannot run on this worker" in action.reason
    assert state.pending_replan is None
    other = make()
    other.refuse_plan(["the goal is vague"], NOW)  # a plan a new plan may fix: replan
    assert isinstance(other.advance(NOW), Replan)


def test_a_step_whose_server_is_unreachable_fails_the_run_without_a_replan():
    state = make()
    state.set_plan(
        PlannerDecision(reasoning="r", steps=[PlanStep(agent="analyst"), PlanStep(agent="developer"),
                                               PlanStep(agent="reviewer")]),
        NOW,
        model="rules",
    )  # fmt: skip
    action = state.advance(NOW)
    assert isinstance(action, RunStep)
    state.record_failure(action.step, "the ollama provider at http://x refused", NOW,
                         code=MODEL_UNREACHABLE)  # fmt: skip
    assert isinstance(state.advance(NOW), Finish)
    assert [h.kind for h in state.history][-2:] == ["step_failed", "failed"]


def _chain(*errors: BaseException) -> BaseException:
    for outer, inner in itertools.pairwise(errors):
        outer.__cause__ = inner
    return errors[0]


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (_chain(RuntimeError("Connection error."), OSError("all"), ConnectionRefusedError(111, "x")),
         "refused the connection"),
        (_chain(RuntimeError("Connection error."), socket.gaierror(-2, "Name or service not known")),
         "host name does not resolve: Name or service not known"),
        (_chain(RuntimeError("Connection error."), TimeoutError("timed out")), None),
        (_chain(RuntimeError("Connection error."), ConnectionResetError(104, "reset")), None),
    ],
)  # fmt: skip
def test_refused_and_unresolvable_are_final_timeouts_and_resets_are_not(error, says):
    found = refused(error)
    assert found is None if says is None else (found is not None and says in found)


def test_the_start_up_check_connects_to_each_configured_server(monkeypatch):
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                     "ALL_PROXY"):  # fmt: skip
        monkeypatch.delenv(variable, raising=False)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(1)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
    try:
        up = f"http://127.0.0.1:{listening.getsockname()[1]}/v1"
        down = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
        providers = ModelProviders({"up": ProviderConfig(base_url=up)})
        assert providers.server("up:m") == ("up", up)
        assert providers.server("openai:gpt-4o") is None and providers.server("demo") is None
        assert ModelProviders.unreachable(up) is None
        assert ModelProviders.unreachable(down) == "connection refused: nothing listens there"
        unresolved = ModelProviders.unreachable("http://no-such-host.invalid:11434/v1")
        assert unresolved is not None and "no-such-host.invalid does not resolve" in unresolved
        monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
        assert ModelProviders.unreachable(down) is None  # the proxy answers for it
    finally:
        listening.close()
        closed.close()
