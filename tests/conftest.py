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
