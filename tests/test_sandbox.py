"""phasegate's workflows in the Temporal SDK's sandbox (``PHASEGATE_WORKFLOW_SANDBOX=1``).

Workers run workflow code directly by default (``phasegate.worker.workflow_runner``):
the sandbox costs ~30% of every workflow task and re-imports the workflow modules for
every instance. The determinism it guards is guarded here instead: end-to-end tests from
other modules run again on a sandboxed worker, the fixture below turning it on for every
worker they start, and the recorded histories replay with the SDK's default (sandboxed)
``Replayer`` in test_durability, test_step_graph and unit/test_orchestration_replay.
Workflow code that reads a clock, draws a random number or does I/O fails here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from test_orchestration import (
    test_trivial_fix_runs_developer_then_reviewer_with_the_rules_planner as test_orchestration_in_sandbox,
)
from test_step_graph import graphs  # noqa: F401 - the fixture the graph tests take
from test_step_graph import (
    test_a_step_dispatches_a_gated_session_and_takes_its_end as test_graph_session_in_sandbox,
)
from test_step_graph import (
    test_function_handlers_branch_and_loop_until_done as test_graph_handlers_in_sandbox,
)
from test_task_state import (
    test_dependencies_acceptance_and_the_phase_gate as test_task_state_in_sandbox,
)
from test_testing import (
    test_scripted_agent_walks_every_shipped_workflow as test_shipped_workflows_in_sandbox,
)

from phasegate.domain.settings import Settings
from phasegate.testing import make_settings
from phasegate.worker import workflow_runner

__all__ = [
    "test_graph_handlers_in_sandbox",
    "test_graph_session_in_sandbox",
    "test_orchestration_in_sandbox",
    "test_shipped_workflows_in_sandbox",
    "test_task_state_in_sandbox",
]


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """conftest's ``settings_for`` with the sandbox on: every worker the tests start."""

    def make(*libraries: str | Path, **overrides: Any) -> Settings:
        return make_settings(
            tmp_path / "home",
            *libraries,
            **{"allow_unsigned_approvals": True, **overrides, "workflow_sandbox": True},
        )

    return make


def test_the_sandbox_is_a_setting_and_off_by_default(settings_for) -> None:
    assert isinstance(workflow_runner(settings_for()), SandboxedWorkflowRunner)
    assert isinstance(workflow_runner(Settings()), UnsandboxedWorkflowRunner)
    on = Settings.from_env({"PHASEGATE_WORKFLOW_SANDBOX": "1"}, default_library="lib")
    assert on.workflow_sandbox is True
    assert Settings.from_env({}, default_library="lib").workflow_sandbox is False
