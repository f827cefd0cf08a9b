"""Where phasegate meets Temporal: the one glue module.

Everything that has to agree between client, worker, workflows, tests and the
replayer is defined here once:

- :data:`DATA_CONVERTER`: the pydantic data converter (every payload is JSON);
- :data:`SA_WORKFLOW`, :data:`SA_PHASE`, :data:`SA_STATUS`: the search
  attribute keys phasegate upserts (:data:`SEARCH_ATTRIBUTE_KEYS` for a server);
- :func:`load_settings` and :func:`connect`: settings from the environment and
  a client built with Temporal's envconfig (``TEMPORAL_ADDRESS``,
  ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``,
  ``TEMPORAL_PROFILE``); an unreachable server raises
  :class:`~phasegate.domain.errors.TemporalUnreachable` with what to do;
- :func:`application_error` (phasegate error → ``ApplicationError``, inside
  workflows and activities) and :func:`phasegate_error` (any Temporal failure →
  the phasegate error it carries, in clients).

Workflow code may import this module (it only defines values and pure
functions; nothing here runs at import time).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError

from phasegate import SHIPPED_LIBRARY
from phasegate.domain.errors import (
    ERROR_TYPES,
    PhasegateError,
    SessionError,
    SessionNotFound,
    TemporalUnreachable,
)
from phasegate.domain.settings import SEARCH_ATTRIBUTES, Settings

__all__ = [
    "DATA_CONVERTER",
    "SA_PHASE",
    "SA_STATUS",
    "SA_WORKFLOW",
    "SEARCH_ATTRIBUTE_KEYS",
    "application_error",
    "connect",
    "load_settings",
    "phasegate_error",
    "unreachable",
]

DATA_CONVERTER: DataConverter = pydantic_data_converter
"""Used by every client, worker, test environment and replayer."""

SA_WORKFLOW = SearchAttributeKey.for_keyword("PhasegateWorkflow")
SA_PHASE = SearchAttributeKey.for_int("PhasegatePhase")
SA_STATUS = SearchAttributeKey.for_keyword("PhasegateStatus")
SEARCH_ATTRIBUTE_KEYS: tuple[SearchAttributeKey[Any], ...] = (SA_WORKFLOW, SA_PHASE, SA_STATUS)
assert {k.name: k.indexed_value_type.name.title() for k in SEARCH_ATTRIBUTE_KEYS} == {
    name: kind.title() for name, kind in SEARCH_ATTRIBUTES.items()
}, "search attribute keys and domain.settings.SEARCH_ATTRIBUTES disagree"

_UNREACHABLE_MARKS = (
    "connecterror",
    "connection refused",
    "tcp connect",
    "dns error",
    "timed out",
    "deadline",
    "unavailable",
    "transport error",
)


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Settings from the environment (``os.environ`` by default); see ``Settings``."""
    return Settings.from_env(
        os.environ if env is None else env, default_library=SHIPPED_LIBRARY, pathsep=os.pathsep
    )


def unreachable(settings: Settings, detail: str = "") -> TemporalUnreachable:
    """The one "Temporal unreachable" error every interface raises."""
    host = settings.temporal_address
    known = not detail or any(m in detail.lower() for m in _UNREACHABLE_MARKS)
    return TemporalUnreachable(
        f"cannot reach Temporal at {host}" + ("" if known else f": {detail}"),
        hint="start one with `phasegate server`, or point TEMPORAL_ADDRESS (or --address) "
        "at your cluster",
    )


async def connect(settings: Settings | None = None, **client_options: Any) -> Client:
    """A Temporal client for phasegate: envconfig, the pydantic converter, the settings'
    address and namespace (flags and ``TEMPORAL_ADDRESS`` win over a profile).

    Raises:
        TemporalUnreachable: nothing answers at the address.
        PhasegateError: the Temporal client configuration (profile, TLS files) is broken.
    """
    from temporalio.envconfig import ClientConfig

    settings = settings or load_settings()
    try:
        config = ClientConfig.load_client_connect_config()
    except (RuntimeError, ValueError, OSError) as exc:
        raise PhasegateError(
            f"cannot read the Temporal client configuration: {exc}",
            where="TEMPORAL_PROFILE / TEMPORAL_CONFIG_FILE",
            hint="fix or unset the profile, or set TEMPORAL_ADDRESS alone",
        ) from None
    config["target_host"] = settings.temporal_address
    config["namespace"] = settings.namespace
    try:
        return await Client.connect(**config, data_converter=DATA_CONVERTER, **client_options)
    except RuntimeError as exc:  # temporalio: "Failed client connect: ..."
        raise unreachable(settings, str(exc)) from None


def application_error(exc: PhasegateError, *, non_retryable: bool = True) -> ApplicationError:
    """A phasegate error as the ``ApplicationError`` clients see (type = error code,
    details = ``{code, message, where, hint}``)."""
    return ApplicationError(str(exc), exc.details(), type=exc.code, non_retryable=non_retryable)


def phasegate_error(exc: BaseException, settings: Settings | None = None) -> PhasegateError:
    """The phasegate error a Temporal client failure carries (update, query, start, RPC)."""
    from temporalio.service import RPCError, RPCStatusCode

    if isinstance(exc, PhasegateError):
        return exc
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ApplicationError):
        cause = cause.__cause__ or getattr(cause, "cause", None)
    if isinstance(cause, ApplicationError):
        details = cause.details[0] if cause.details else None
        cls = ERROR_TYPES.get(cause.type or "", PhasegateError)
        if isinstance(details, dict) and details.get("message"):
            err = cls(details["message"], where=details.get("where"), hint=details.get("hint"))
        else:
            err = cls(cause.message)
        if cls is PhasegateError:
            err.code = cause.type or "phasegate_error"  # keep the workflow's code
        return err
    if isinstance(exc, RPCError):
        if exc.status == RPCStatusCode.NOT_FOUND:
            return SessionNotFound(str(exc.message), hint="check the id with `phasegate list`")
        if exc.status == RPCStatusCode.UNAVAILABLE:
            return unreachable(settings or load_settings(), exc.message)
        if exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
            return SessionError(
                "Temporal did not answer in time",
                hint="check that a worker is running (`phasegate worker`); under heavy load, "
                "try again in a moment",
            )
    return PhasegateError(str(exc) or type(exc).__name__)
