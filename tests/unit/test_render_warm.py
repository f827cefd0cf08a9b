"""The render activity warms the next phase only where that phase will be rendered at its
advance (a local activity: prefetch off); a prefetch, and a session start whose first
prefetch follows at once, leave the worker's CPU to the advances in flight."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from phasegate.activities.definitions import DefinitionActivities
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest, RenderPhaseRequest

FIXTURE_LIBRARY = Path(__file__).resolve().parents[1] / "fixtures" / "library"


class Recording(DefinitionActivities):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.warmed: list[int] = []

    def _warm(self, ref, index: int) -> None:  # type: ignore[override]
        self.warmed.append(index)


def environment(*, local: bool) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=local)
    return env


@pytest.mark.parametrize(("local", "warmed"), [(True, [2]), (False, [])])
def test_render_warms_only_at_the_advance(tmp_path: Path, local: bool, warmed: list[int]) -> None:
    acts = Recording([str(FIXTURE_LIBRARY)], str(tmp_path / "home"), allow_unsigned_approvals=True)
    plan = acts.plan(LoadSessionRequest(workflow_type="mini_v1", target=str(tmp_path)))
    phase = environment(local=local).run(
        acts.render_phase, RenderPhaseRequest(ref=plan.ref, index=1)
    )
    assert phase.index == 1 and acts.warmed == warmed


@pytest.mark.parametrize(
    ("worker", "session", "warmed"),
    [(True, True, []), (True, False, [1]), (False, True, [1])],
)
def test_start_warms_phase_1_only_without_prefetch(
    tmp_path: Path, worker: bool, session: bool, warmed: list[int]
) -> None:
    acts = Recording(
        [str(FIXTURE_LIBRARY)],
        str(tmp_path / "home"),
        prefetch=worker,
        allow_unsigned_approvals=True,
    )
    req = LoadSessionRequest(
        workflow_type="mini_v1", target=str(tmp_path), options=SessionOptions(prefetch=session)
    )
    environment(local=False).run(acts.load_session, req)
    assert acts.warmed == warmed
