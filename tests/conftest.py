"""Shared fixtures: one real Temporal dev server per test session, a fresh worker
(on its own task queue) per test, uuid session ids.

Unit tests of ``domain/`` and the parser use none of these and need no server.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

# The watchdog that ends a test process wedged past pytest-timeout's reach (hang_guard.py).
from hang_guard import (  # noqa: F401
    pytest_configure,
    pytest_exception_interact,
    pytest_runtest_protocol,
)
from temporalio.testing import WorkflowEnvironment

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.settings import Settings
from phasegate.domain.signing import ApproverKey
from phasegate.testing import dev_server, make_settings, running_worker
from phasegate.worker import PhasegateWorkers

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

# Fixture projects hold tests of their own (run inside sessions, as a session's test
# command), never by this suite. Ignored here rather than by a conftest.py among them: a
# second top-level ``conftest`` module would shadow this one for ``from conftest import
# FIXTURES`` (which one a process imports last depends on collection order, e.g. under
# pytest-xdist).
collect_ignore = ["fixtures"]

# Seconds of test time per file (measured on the 2-core machine, `make test`, files of
# 8 s or more). Under pytest-xdist these files start first, shared out between the
# workers, so no worker is left with a 40 s test when the other has run out of work.
KNOWN_COST = {
    "test_mcp_docs.py": 74,
    "test_orchestration_gates.py": 66,
    "test_faults.py": 53,
    "test_cli.py": 44,
    "test_cli_first_hour.py": 43,
    "test_orchestration_durability.py": 42,
    "test_which_server.py": 40,
    "test_orchestration_hostile.py": 37,
    "test_step_graph.py": 37,
    "test_sealed_operations.py": 33,
    "test_orchestration_routes.py": 33,
    "test_wheel.py": 32,
    "test_real_agents_developer.py": 28,
    "test_hang_guard.py": 20,
    "test_dev_mode.py": 28,
    "test_agent_models.py": 25,
    "test_durability.py": 25,
    "test_worker_topology.py": 24,
    "test_blob_limit.py": 22,
    "test_verify_containment.py": 22,
    "test_shipped_graphs.py": 21,
    "test_developer_step.py": 19,
    "test_foreign_workflows.py": 19,
    "test_task_scale.py": 18,
    "test_mcp.py": 18,
    "test_task_files_activity.py": 17,
    "test_readme.py": 15,
    "test_observability.py": 13,
    "unit/test_layering.py": 13,
    "test_signed_approvals.py": 12,
    "test_forged_state.py": 11,
    "test_sandbox.py": 11,
    "test_worker_instances.py": 11,
    "test_docker_image.py": 11,
    "test_deadlines.py": 11,
    "test_cli_orchestrate.py": 10,
    "test_verify.py": 10,
    "test_orchestration_start_checks.py": 10,
    "test_real_agents_mcp.py": 9,
    "test_verify_session.py": 9,
    "test_dynamic_gate_files.py": 9,
    "test_praxis_library.py": 8,
    "test_rag.py": 8,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``make test``): the costly files first, one share per worker.

    ``--dist worksteal`` hands worker k the k-th of N equal slices of this order, then
    moves tests from a busy worker's tail to an idle one. So each slice here starts with
    its share of the costly files (longest first, each to the slice with the least so
    far: whole files, so module fixtures are set up once) and is topped up with the rest
    in their usual order. Every process orders the same items the same way."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    if workers < 2 or len(items) < workers:
        return
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::")[0].removeprefix("tests/"), []).append(item)
    costly = sorted((f for f in by_file if f in KNOWN_COST), key=lambda f: -KNOWN_COST[f])
    shares: list[list[pytest.Item]] = [[] for _ in range(workers)]
    loads = [0.0] * workers
    for name in costly:
        k = loads.index(min(loads))
        shares[k].extend(by_file[name])
        loads[k] += KNOWN_COST[name]
    rest = [item for name, group in by_file.items() if name not in KNOWN_COST for item in group]
    # The slice sizes worksteal cuts: len(pending) // workers-left, in turn.
    left, ordered = len(items), []
    for k in range(workers):
        size = left // (workers - k)
        top_up = max(0, size - len(shares[k]))
        ordered.extend(shares[k] + rest[:top_up])
        rest = rest[top_up:]
        left -= size
    ordered.extend(rest)
    assert len(ordered) == len(items)
    items[:] = ordered


@pytest_asyncio.fixture(scope="session")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    """A real dev server shared by the whole test session."""
    async with dev_server() as environment:
        yield environment


@pytest.fixture(scope="session")
def executor() -> concurrent.futures.ThreadPoolExecutor:
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        yield pool  # type: ignore[misc]


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[..., Settings]:
    """Settings for a test: its own task queue and home; extra library folders first."""

    def make(*libraries: str | Path, **overrides: Any) -> Settings:
        # Most tests exercise gates, not signatures; test_signed_approvals turns it off.
        return make_settings(
            tmp_path / "home", *libraries, **{"allow_unsigned_approvals": True, **overrides}
        )

    return make


@pytest.fixture
def run_worker(
    env: WorkflowEnvironment, executor: concurrent.futures.ThreadPoolExecutor
) -> Callable[[Settings], contextlib.AbstractAsyncContextManager[PhasegateWorkers]]:
    """``async with run_worker(settings) as worker:`` — a worker for one test."""

    @contextlib.asynccontextmanager
    async def make(settings: Settings) -> AsyncIterator[PhasegateWorkers]:
        async with running_worker(env.client, settings, executor=executor) as worker:
            yield worker

    return make


@pytest_asyncio.fixture
async def session_env(
    env: WorkflowEnvironment,
    settings_for: Callable[..., Settings],
    run_worker: Callable[[Settings], contextlib.AbstractAsyncContextManager[PhasegateWorkers]],
) -> AsyncIterator[tuple[PhasegateClient, Settings]]:
    """A client plus a running worker over the shipped library and tests/fixtures/library."""
    settings = settings_for(FIXTURES / "library")
    async with run_worker(settings):
        yield PhasegateClient(env.client, settings.task_queue), settings


@pytest.fixture
def alice(tmp_path: Path) -> ApproverKey:
    """Approver alice's Ed25519 key pair, stored under the test's tmp_path."""
    return keys.new_key("alice", directory=tmp_path)


@pytest.fixture
def bob(tmp_path: Path) -> ApproverKey:
    return keys.new_key("bob", directory=tmp_path)
