"""What the typed clients (``client.api``, ``client.orchestrations``) share: how they
connect, how they read Temporal's answers (a query no worker answered in time, an
update refused while a run hands over to its continue-as-new successor, no answer),
and how they sign a decision before sending it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any, Self

from temporalio.client import (
    Client,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from phasegate.domain.errors import PhasegateError, SessionError
from phasegate.domain.settings import Settings

__all__ = ["BaseClient", "sign_as", "timed_out", "transient"]

_UPDATE_RETRIES = 8


class BaseClient:
    """A connected Temporal client and the task queue the phasegate worker listens on.

    Args:
        client: A connected Temporal client using the pydantic data converter.
        task_queue: Where the phasegate worker listens.
    """

    def __init__(self, client: Client, task_queue: str = "phasegate") -> None:
        self.temporal = client
        self.task_queue = task_queue

    @classmethod
    async def connect(cls, settings: Settings | None = None) -> Self:
        """Connect as ``settings`` say (default: the environment's, ``load_settings``)."""
        from phasegate.temporal import connect, load_settings

        settings = settings or load_settings()
        return cls(await connect(settings), settings.task_queue)

    def _error(self, workflow_id: str, exc: BaseException) -> PhasegateError:
        """A Temporal failure in the CLI's terms (each client says it its own way)."""
        raise NotImplementedError

    async def _retrying_update(
        self, workflow_id: str, update: Any, arg: Any, *, what: str, starting: str
    ) -> Any:
        """Run an update under one id (never applied twice), retrying what a run answers
        while it starts or hands over to its continue-as-new successor: a superseded
        workflow task, and the typed refusal whose message holds ``starting``."""
        update_id = str(uuid.uuid4())
        for attempt in range(_UPDATE_RETRIES + 1):
            try:
                return await self.temporal.get_workflow_handle(workflow_id).execute_update(
                    update, arg, id=update_id
                )
            except RPCError as exc:
                if attempt < _UPDATE_RETRIES and transient(exc):
                    await asyncio.sleep(0.05 * (attempt + 1))
                    continue
                raise self._error(workflow_id, exc) from None
            except WorkflowUpdateFailedError as exc:
                err = self._error(workflow_id, exc)
                if attempt < _UPDATE_RETRIES and starting in err.message:
                    await asyncio.sleep(0.2)
                    continue
                raise err from None
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                raise self._no_answer(what) from None
        raise AssertionError("unreachable")

    def _no_answer(self, what: str, tries: int = 1) -> SessionError:
        """``what`` (``session ID``, ``orchestration ID``) did not answer in time: a busy
        or absent worker, or one whose workflow task fails."""
        return SessionError(
            f"{what} did not answer in time" + (f" ({tries} tries)" if tries > 1 else ""),
            hint=f"{self.worker_hint()}; under heavy load, try again in a moment; if it "
            "keeps failing, the worker's log says why its workflow task fails",
        )

    def worker_hint(self) -> str:
        """How to get a worker on this client's task queue, in the words of the command
        that runs the server (``phasegate dev`` when its dev.json found it)."""
        from phasegate.client._origin import origin_of

        config = getattr(getattr(self.temporal, "service_client", None), "config", None)
        origin = origin_of(str(getattr(config, "target_host", "")))
        if origin is None:
            return (
                "check that a worker is running (`phasegate dev`, or `phasegate worker` beside "
                f"your server) on task queue {self.task_queue!r}"
            )
        return origin.worker_hint(self.task_queue)


def timed_out(exc: BaseException) -> bool:
    """A query no worker answered within the server's query timeout."""
    if isinstance(exc, RPCError) and exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
        return True
    text = str(exc).lower()
    return "timeout expired" in text or "timed out" in text


def transient(exc: RPCError) -> bool:
    """The server's answer when the workflow task that would accept an update failed or was
    superseded (e.g. by continue-as-new); the next workflow task accepts it."""
    return "workflow task failure" in str(exc.message) or exc.status in (
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.ABORTED,
    )


def sign_as(
    as_key: str | None,
    name: str | None,
    *,
    ask: str,
    key_dir: str | Path | None,
    **fields: Any,
) -> tuple[str, str | None, str | None]:
    """Who decides, and the nonce and signature of ``as_key`` over ``fields`` (the
    arguments of ``client.keys.sign_decision``); unsigned (None, None) without a key.

    Raises:
        PhasegateError: Neither a key nor a name says who decides (``ask`` says what).
    """
    if as_key is None:
        if not name:
            raise PhasegateError(ask, hint="pass --as NAME")
        return name, None, None
    from phasegate.client import keys

    directory = Path(key_dir) if key_dir is not None else None
    nonce, signature = keys.sign_decision(as_key, directory=directory, **fields)
    return as_key, nonce, signature
