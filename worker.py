"""The one phasegate worker: registers every workflow and activity.

Run it with ``phasegate worker`` (or ``python -m phasegate.worker``). It connects to
``TEMPORAL_ADDRESS`` (default localhost:7233) with the standard Temporal
client settings and stops cleanly on SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from temporalio.client import Client
from temporalio.worker import Worker

from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.notify import notify_webhook
from phasegate.activities.rag import RagActivities
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.errors import PhasegateError
from phasegate.domain.rag import RetrievalQuery, RetrievedChunk
from phasegate.domain.settings import Settings
from phasegate.domain.signing import ApproverKey
from phasegate.temporal import connect, load_settings
from phasegate.workflows import GatedSession

__all__ = ["WORKFLOWS", "build_worker", "main", "run_worker"]

WORKFLOWS: Sequence[type] = (GatedSession,)


class _LazyRetriever:
    """The RAG activities' index used directly by the render activity (same process)."""

    def __init__(self, rag: RagActivities) -> None:
        self._rag = rag

    def search(self, q: RetrievalQuery) -> list[RetrievedChunk]:
        return self._rag.retrieve_context(q)


def load_approver_keys(
    value: str | None, variable: str = "PHASEGATE_APPROVER_KEYS"
) -> list[ApproverKey]:
    """Signed approvers (or operators) named by the deployment.

    ``value`` is JSON (a list of ``{name, public_key}`` or one such object, as
    ``phasegate keys export NAME`` prints) or the path of a file holding either.
    """
    if not value:
        return []
    text, where = value, variable
    if not value.lstrip().startswith(("[", "{")):
        where = f"{variable}={value}"
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PhasegateError(
                f"cannot read the key file: {exc.strerror or exc}",
                where=where,
                hint=f"set {variable} to a JSON list of {{name, public_key}}, one exported "
                "object (phasegate keys export NAME), or the path of a file holding either",
            ) from None
    try:
        data = json.loads(text)
        items = [data] if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise TypeError(f"expected a list or an object, got {type(data).__name__}")
        return [ApproverKey.model_validate(item) for item in items]
    except (ValueError, TypeError) as exc:
        raise PhasegateError(
            f"cannot load keys: {str(exc).splitlines()[0]}",
            where=where,
            hint="a JSON list of {name, public_key} or one such object "
            "(phasegate keys export NAME prints one)",
        ) from None


def build_worker(
    client: Client,
    settings: Settings,
    *,
    executor: concurrent.futures.Executor,
) -> Worker:
    """A worker for ``settings.task_queue`` with every phasegate workflow and activity."""
    rag = RagActivities(settings.rag_db, settings.library_paths, settings.standards_dirs)
    definitions = DefinitionActivities(
        settings.library_paths,
        settings.home,
        retriever=_LazyRetriever(rag),
        context_tokens=settings.context_tokens,
        context_k=settings.context_k,
        approver_keys=load_approver_keys(settings.approver_keys_file),
        allow_unsigned_approvals=settings.allow_unsigned_approvals,
        operator_keys=load_approver_keys(settings.operator_keys_file, "PHASEGATE_OPERATOR_KEYS"),
        allow_unsigned_controls=settings.unsigned_controls,
    )
    verify = VerifyActivities()
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=list(WORKFLOWS),
        activities=[
            definitions.load_session,
            definitions.render_phase,
            verify.run_verify_checks,
            rag.retrieve_context,
            notify_webhook,
        ],
        activity_executor=executor,
    )


async def run_worker(settings: Settings | None = None) -> None:
    """Connect, run until SIGINT/SIGTERM, then drain and shut down."""
    settings = settings or load_settings()
    client = await connect(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as executor:
        worker = build_worker(client, settings, executor=executor)
        async with worker:
            logging.getLogger("phasegate").info(
                "worker on %s, task queue %r, library %s",
                settings.temporal_address,
                settings.task_queue,
                ", ".join(settings.library_paths),
            )
            print(
                f"phasegate worker: task queue {settings.task_queue!r} on "
                f"{settings.temporal_address} (Ctrl-C to stop)",
                flush=True,
            )
            await stop.wait()
        print("phasegate worker: stopped", flush=True)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run_worker())
    # The worker has drained and shut down. Skip interpreter finalisation, which the
    # Temporal core's native threads can abort ("PyGILState_Release ... must be current",
    # temporalio/sdk-python#300); nothing is left to clean up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
