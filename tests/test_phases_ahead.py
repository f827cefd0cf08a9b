"""Phases rendered ahead (``PHASEGATE_PREFETCH_AHEAD``, ``SessionPlan.ahead_bytes``): one
prefetch renders the next phase and the phases after it that fit, so a walk of small
phases is rendered once, in the run's first workflow task, and its advances start no
activity; what does not fit is fetched by the next window, on the task queue."""

from __future__ import annotations

import json

import pytest
from sealed_helpers import (
    EVIDENCE,
    MARK,
    PHASES,
    WORKFLOW,
    completed_results,
    local_activities,
    local_renders,
    raw_history,
    scheduled,
    write_library,
)
from temporalio.api.history.v1 import History
from temporalio.exceptions import ApplicationError

from phasegate import SHIPPED_LIBRARY
from phasegate.activities.definitions import DefinitionActivities
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.limits import AHEAD_BYTES, MAX_AHEAD_BYTES
from phasegate.domain.session.messages import ControlRequest, PhaseView, SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest, RenderPhaseRequest
from phasegate.domain.settings import Settings


async def _walk(pg: PhasegateClient, sid: str, start: int = 0) -> None:
    for phase in range(start, PHASES):
        result = await pg.submit(sid, phase, EVIDENCE)
        assert result.passed, result.problems
        if phase + 1 < PHASES:
            assert result.next_phase is not None and MARK[phase + 1] in result.next_phase.name
    assert (await pg.result(sid)).status == "completed"


async def _walked(env, settings_for, run_worker, tmp_path, ahead: int) -> History:
    """The history of a whole walk of ``sealed_v1`` on a worker rendering ``ahead``."""
    settings = settings_for(write_library(tmp_path), prefetch_ahead_bytes=ahead)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(WORKFLOW, str(tmp_path))
        await _walk(pg, sid)
        return await raw_history(env.client, sid)


async def test_a_walk_is_rendered_once_where_the_deployment_allows(
    env, settings_for, run_worker, tmp_path
):
    history = await _walked(env, settings_for, run_worker, tmp_path, AHEAD_BYTES)
    windows = completed_results(history, "render_phases")
    assert len(windows) == 1 and local_activities(history, "render_phases") == 1
    phases = json.loads(windows[0].data)["phases"]
    assert [p["index"] for p in phases] == list(range(1, PHASES))
    # No activity task at all, and no phase rendered at an advance.
    assert not any(scheduled(history, t) for t in ("render_phases", "render_phase"))
    assert local_renders(history) == 0
    # The trade-off the setting makes: the whole walk is in the open history from the
    # start (so it is off by default where the deployment does not seal).
    assert MARK[PHASES - 1].encode() in windows[0].data


async def test_a_window_that_does_not_fit_continues_on_the_queue(
    env, settings_for, run_worker, tmp_path
):
    history = await _walked(env, settings_for, run_worker, tmp_path, 1)  # one a window
    # The run's first window is local; each advance but the last starts the next one.
    assert local_activities(history, "render_phases") == 1
    assert len(scheduled(history, "render_phases")) == PHASES - 2
    for window in completed_results(history, "render_phases"):
        assert len(json.loads(window.data)["phases"]) == 1  # the first always, even over


async def test_a_rollback_walks_again_from_the_right_phases(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for(write_library(tmp_path), prefetch_ahead_bytes=AHEAD_BYTES)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(WORKFLOW, str(tmp_path))
        for phase in range(3):
            assert (await pg.submit(sid, phase, EVIDENCE)).passed
        await pg.control(sid, ControlRequest(action="rollback", to_phase=1, actor="lead"))
        view = await pg.phase(sid, 1)
        assert isinstance(view, PhaseView) and MARK[1] in view.name
        await _walk(pg, sid, start=1)


async def test_ahead_is_bounded_and_only_the_deployments(tmp_path):
    with pytest.raises(ValueError):
        RenderPhaseRequest.model_validate(
            {"ref": _ref(tmp_path), "index": 1, "ahead_bytes": MAX_AHEAD_BYTES + 1}
        )
    with pytest.raises(ValueError):
        Settings(prefetch_ahead_bytes=-1)
    # A starter's options cannot ask for it: the plan takes the worker's.
    defs = DefinitionActivities(
        [str(SHIPPED_LIBRARY)], str(tmp_path), allow_unsigned_approvals=True
    )
    asked = SessionOptions.model_validate({"ahead_bytes": AHEAD_BYTES, "prefetch_ahead": 1})
    req = LoadSessionRequest(workflow_type="production_code_v2", target=str(tmp_path))
    assert defs.plan(req.model_copy(update={"options": asked})).ahead_bytes == 0


def _ref(tmp_path) -> dict:
    return {"workflow_type": WORKFLOW, "total_phases": PHASES, "static_phase_count": PHASES}


@pytest.mark.parametrize("budget", [1, 4096, AHEAD_BYTES])
def test_a_window_of_a_shipped_workflow_fits_its_budget(tmp_path, budget):
    defs = DefinitionActivities(
        [str(SHIPPED_LIBRARY)],
        str(tmp_path),
        allow_unsigned_approvals=True,
        prefetch_ahead_bytes=budget,
    )
    plan = defs.plan(LoadSessionRequest(workflow_type="production_code_v2", target=str(tmp_path)))
    assert plan.ahead_bytes == budget
    phases = defs.phases_ahead(RenderPhaseRequest(ref=plan.ref, index=1, ahead_bytes=budget))
    assert [p.index for p in phases] == list(range(1, len(phases) + 1))
    sizes = [len(p.model_dump_json()) for p in phases]
    assert len(phases) == 1 or sum(sizes) <= budget
    if len(phases) < plan.ref.total_phases - 1:  # the next phase would not have fitted
        following = defs.phases_ahead(
            RenderPhaseRequest(ref=plan.ref, index=len(phases) + 1, ahead_bytes=0)
        )[0]
        assert sum(sizes) + len(following.model_dump_json()) > budget


def test_the_default_is_ahead_only_where_the_deployment_seals(tmp_path):
    open_worker = DefinitionActivities([str(SHIPPED_LIBRARY)], str(tmp_path))
    sealed_worker = DefinitionActivities(
        [str(SHIPPED_LIBRARY)], str(tmp_path), sealed_prefetch=True
    )
    assert open_worker.ahead_bytes == 0 and sealed_worker.ahead_bytes == AHEAD_BYTES
    env = {"PHASEGATE_PREFETCH_AHEAD": "0"}
    assert Settings.from_env(env, default_library=str(SHIPPED_LIBRARY)).prefetch_ahead_bytes == 0
    for bad in ("128K", "-1", str(MAX_AHEAD_BYTES + 1)):
        with pytest.raises(PhasegateError, match="PHASEGATE_PREFETCH_AHEAD") as err:
            Settings.from_env({"PHASEGATE_PREFETCH_AHEAD": bad}, default_library="lib")
        assert err.value.hint and "0: the next phase only" in err.value.hint


def test_a_phase_that_does_not_render_ends_the_window(tmp_path):
    library = write_library(tmp_path)
    for name in ("phase.md", "task-1-do.md"):  # phase 3 has nothing to serve
        (library / WORKFLOW / "phases" / "3" / name).unlink()
    defs = DefinitionActivities(
        [str(library)],
        str(tmp_path),
        allow_unsigned_approvals=True,
        prefetch_ahead_bytes=AHEAD_BYTES,
    )
    plan = defs.plan(LoadSessionRequest(workflow_type=WORKFLOW, target=str(tmp_path)))
    phases = defs.phases_ahead(RenderPhaseRequest(ref=plan.ref, index=1, ahead_bytes=AHEAD_BYTES))
    assert [p.index for p in phases] == [1, 2]  # phase 3's error waits for its advance
    with pytest.raises(ApplicationError, match="phase"):
        defs.phases_ahead(RenderPhaseRequest(ref=plan.ref, index=3, ahead_bytes=AHEAD_BYTES))


def test_a_window_is_taken_only_in_order():
    """A window (as a rogue poller could answer render_phases) is taken up to its first
    phase out of order: never a later phase in place of the one due."""
    from phasegate.domain.session.messages import PhaseDefinition
    from phasegate.domain.session.sealed import in_order

    def phase(i: int) -> PhaseDefinition:
        return PhaseDefinition(index=i, label=str(i), name=f"p{i}", content="x")

    assert [p.index for p in in_order([phase(3), phase(4), phase(5)], 3)] == [3, 4, 5]
    assert in_order([phase(99), phase(4), phase(5)], 3) == []
    assert [p.index for p in in_order([phase(3), phase(9), phase(5)], 3)] == [3]
    assert in_order([phase(4)], 3) == []


async def test_a_held_phase_is_written_with_the_latest_values(
    env, settings_for, run_worker, tmp_path
):
    """Two advances within PHASE_ATTRIBUTE_SECONDS (the second's upsert deferred to its
    prefetch): the timer writes the phase the session is on when it fires, once."""
    import asyncio
    import time

    from phasegate.domain.session.plan import PHASE_ATTRIBUTE_SECONDS
    from phasegate.temporal import SA_PHASE

    settings = settings_for(write_library(tmp_path), prefetch_ahead_bytes=0)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(WORKFLOW, str(tmp_path))
        began = time.monotonic()
        assert (await pg.submit(sid, 0, EVIDENCE)).passed
        await asyncio.sleep(1)  # phase 1's prefetch back: phase 1 held for the timer
        assert (await pg.submit(sid, 1, EVIDENCE)).passed
        seen = []
        while time.monotonic() - began < PHASE_ATTRIBUTE_SECONDS + 10:
            phase = (await pg.handle(sid).describe()).typed_search_attributes.get(SA_PHASE)
            if not seen or seen[-1] != phase:
                seen.append(phase)
            if phase == 2:
                break
            await asyncio.sleep(0.2)
    assert seen == [0, 2], seen  # never the stale phase 1
