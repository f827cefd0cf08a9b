"""Where phasegate meets Temporal: the one glue module.

Everything that has to agree between client, worker, workflows, tests and the
replayer is defined here once:

- :data:`DATA_CONVERTER`: the pydantic data converter (every payload is JSON), which
  seals a session's prefetched phase where a seal key ring is configured
  (:func:`data_converter_for`; :mod:`phasegate.sealing`);
- :data:`SA_WORKFLOW`, :data:`SA_PHASE`, :data:`SA_STATUS`: the search
  attribute keys phasegate upserts (:data:`SEARCH_ATTRIBUTE_KEYS` for a server);
- :func:`load_settings` and :func:`connect`: settings from the environment and
  a client built with Temporal's envconfig (``TEMPORAL_ADDRESS``,
  ``TEMPORAL_NAMESPACE``, ``TEMPORAL_API_KEY``, ``TEMPORAL_TLS_*``,
  ``TEMPORAL_PROFILE``); an unreachable server raises
  :class:`~phasegate.domain.errors.TemporalUnreachable` with what to do;
- :func:`application_error` (phasegate error → ``ApplicationError``, inside
  workflows and activities) and :func:`phasegate_error` (any Temporal failure →
  the phasegate error it carries, in clients);
- telemetry: :func:`metrics_runtime` (Prometheus metrics of the Temporal runtime,
  phasegate's own :data:`METRIC_ADVANCES`, :data:`METRIC_REFUSALS`,
  :data:`METRIC_VERIFY_SECONDS` on the same endpoint) and OpenTelemetry tracing that
  :func:`connect` adds when ``PHASEGATE_OTEL=1`` or ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
  set (``pip install 'phasegate[otel]'``).

Workflow code may import this module (it only defines values and pure
functions; nothing here runs at import time).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from phasegate import SHIPPED_LIBRARY
from phasegate.domain.errors import (
    ERROR_TYPES,
    PhasegateError,
    SessionError,
    SessionNotFound,
    TemporalUnreachable,
)
from phasegate.domain.settings import SEARCH_ATTRIBUTES, Settings
from phasegate.sealing import data_converter, load_ring

if TYPE_CHECKING:
    from phasegate.client._origin import ServerOrigin

__all__ = [
    "DATA_CONVERTER",
    "METRIC_ADVANCES",
    "METRIC_REFUSALS",
    "METRIC_VERIFY_SECONDS",
    "SA_PHASE",
    "SA_STATUS",
    "SA_WORKFLOW",
    "SEARCH_ATTRIBUTE_KEYS",
    "application_error",
    "connect",
    "data_converter_for",
    "load_settings",
    "metrics_runtime",
    "phasegate_error",
    "server_origin",
    "shutdown_tracing",
    "tracing_interceptors",
    "unreachable",
    "worker_hint",
]

DATA_CONVERTER: DataConverter = data_converter(None)
"""Used by every client, worker, test environment and replayer without a seal key ring:
the pydantic converter (``temporalio.contrib.pydantic``), which never writes a sealed
prefetch's phase in clear and cannot read a sealed one."""

SA_WORKFLOW = SearchAttributeKey.for_keyword("PhasegateWorkflow")
SA_PHASE = SearchAttributeKey.for_int("PhasegatePhase")
SA_STATUS = SearchAttributeKey.for_keyword("PhasegateStatus")
SEARCH_ATTRIBUTE_KEYS: tuple[SearchAttributeKey[Any], ...] = (SA_WORKFLOW, SA_PHASE, SA_STATUS)
assert {k.name: k.indexed_value_type.name.title() for k in SEARCH_ATTRIBUTE_KEYS} == {
    name: kind.title() for name, kind in SEARCH_ATTRIBUTES.items()
}, "search attribute keys and domain.settings.SEARCH_ATTRIBUTES disagree"

METRIC_ADVANCES = "phasegate_advances"
"""Counter (``_total`` in Prometheus): phases completed, label ``via`` (checkpoint or
approval). Counted in the workflow, never again on replay."""
METRIC_REFUSALS = "phasegate_refusals"
"""Counter: messages a session refused before they touched history, label ``code``
(the phasegate error code, e.g. ``payload_too_large``, ``approval_refused``)."""
METRIC_VERIFY_SECONDS = "phasegate_verify_seconds"
"""Histogram: run time of one verify activity, label ``outcome`` (passed, failed, error)."""
VERIFY_SECONDS_BUCKETS = (0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0)

# Something answered but would not talk: TLS (a client certificate) or authentication.
_TLS_MARKS = ("certificate", "handshake", "tls", "ssl", "alert", "after connection")
# Temporal's words for a session whose workflow task is failing or not yet scheduled.
_BUSY_MARKS = ("workflow task in failed state", "workflow task is not scheduled")
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
    """Settings from the environment (``os.environ`` by default); see ``Settings``.

    The Temporal address comes from, first to last: ``TEMPORAL_ADDRESS`` (``--address``),
    the address of the Temporal profile (``TEMPORAL_PROFILE`` / config file), the running
    ``phasegate dev`` or ``phasegate server`` recorded in the nearest ``.phasegate/dev.json``
    up to the project root (``$PHASEGATE_HOME/dev.json`` when that is set), then
    ``localhost:7233`` (``client._origin`` says exactly). A dev file whose process is gone
    or whose port is closed is ignored with a note on stderr. How the address was found is
    kept (:func:`server_origin`) for errors and hints; the Web UI is the one of that
    server (``PHASEGATE_UI_URL`` wins), or unknown (``ui_url`` None).
    """
    from phasegate.client._origin import find_server, remember

    env = os.environ if env is None else env
    settings = Settings.from_env(env, default_library=SHIPPED_LIBRARY, pathsep=os.pathsep)
    origin = find_server(env)
    remember(origin)
    update: dict[str, Any] = {"temporal_address": origin.address}
    if not env.get("PHASEGATE_UI_URL"):
        update["ui_url"] = origin.ui_url
        port = (origin.ui_url or "").rstrip("/").rpartition(":")[2]
        if port.isdigit():  # where the server's UI is, whatever PHASEGATE_UI_PORT asked for
            update["ui_port"] = int(port)
    return settings.model_copy(update=update)


def server_origin(settings: Settings) -> ServerOrigin | None:
    """How this process found the server ``settings`` name (None: settings built by hand)."""
    from phasegate.client._origin import origin_of

    return origin_of(settings.temporal_address)


def unreachable(settings: Settings, detail: str = "") -> TemporalUnreachable:
    """The one "Temporal unreachable" error every interface raises; it says where the
    address came from unless that is obvious (typed, or set explicitly)."""
    host = settings.temporal_address
    low = detail.lower()
    if any(m in low for m in _TLS_MARKS):
        return TemporalUnreachable(
            f"Temporal at {host} did not accept the connection: {detail.splitlines()[0]}",
            hint="a server that requires TLS with a client certificate needs TEMPORAL_TLS_CLIENT_"
            "CERT_PATH, TEMPORAL_TLS_CLIENT_KEY_PATH and TEMPORAL_TLS_SERVER_CA_CERT_PATH "
            "(docs/sealed-deployment.md); Temporal Cloud needs TEMPORAL_API_KEY",
        )
    known = not detail or any(m in low for m in _UNREACHABLE_MARKS)
    origin = server_origin(settings)
    told = origin is not None and origin.source in ("dev.json", "default")
    return TemporalUnreachable(
        f"cannot reach Temporal at {host}"
        + (f" ({origin.how})" if told and origin is not None else "")
        + ("" if known else f": {detail}"),
        hint=origin.start_hint()
        if origin is not None
        else "start one with `phasegate server`, or point TEMPORAL_ADDRESS (or --address) "
        "at your cluster",
    )


def worker_hint(settings: Settings) -> str:
    """How to get a worker on the settings' task queue, naming the command the person runs
    (``phasegate dev`` when its dev.json found the server)."""
    origin = server_origin(settings)
    if origin is None:
        queue = settings.task_queue
        return f"check that a worker is running (`phasegate worker`) on task queue {queue!r}"
    return origin.worker_hint(settings.task_queue)


async def connect(settings: Settings | None = None, **client_options: Any) -> Client:
    """A Temporal client for phasegate: envconfig, the pydantic converter, the settings'
    address and namespace (flags and ``TEMPORAL_ADDRESS`` win over a profile), and
    :func:`tracing_interceptors`. ``runtime=metrics_runtime(port)`` serves metrics;
    workers built on the client share its runtime and interceptors.

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
    client_options["interceptors"] = [
        *client_options.get("interceptors", ()),
        *tracing_interceptors(),
    ]
    converter = data_converter_for(settings)
    try:
        return await Client.connect(**config, data_converter=converter, **client_options)
    except RuntimeError as exc:  # temporalio: "Failed client connect: ..."
        raise unreachable(settings, str(exc)) from None


def data_converter_for(settings: Settings) -> DataConverter:
    """:data:`DATA_CONVERTER`, or one holding the settings' seal key ring
    (``PHASEGATE_SEAL_KEYS``): it seals prefetched phases and opens sealed payloads.

    Raises:
        PhasegateError: the ring file cannot be read or is not a ring.
    """
    if not settings.seal_keys_file:
        return DATA_CONVERTER
    return data_converter(load_ring(settings.seal_keys_file))


def application_error(exc: PhasegateError, *, non_retryable: bool = True) -> ApplicationError:
    """A phasegate error as the ``ApplicationError`` clients see (type = error code,
    details = ``{code, message, where, hint}``).

    Benign: a phasegate error is an expected refusal with its message (a spec not found,
    a gate that refuses, a bad profile), not a fault, so the worker logs no traceback
    for it; the message reaches whoever asked. Faults are other exceptions."""
    return ApplicationError(
        str(exc),
        exc.details(),
        type=exc.code,
        non_retryable=non_retryable,
        category=ApplicationErrorCategory.BENIGN,
    )


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
        from phasegate.client._origin import in_the_users_words

        return in_the_users_words(err)  # the worker's library; `phasegate dev` if it runs
    if isinstance(exc, RPCError):
        if exc.status == RPCStatusCode.NOT_FOUND:
            return SessionNotFound(str(exc.message), hint="check the id with `phasegate list`")
        if exc.status == RPCStatusCode.UNAVAILABLE:
            return unreachable(settings or load_settings(), exc.message)
        if exc.status == RPCStatusCode.DEADLINE_EXCEEDED:
            ready = worker_hint(settings or load_settings())
            return SessionError(
                "Temporal did not answer in time",
                hint=f"{ready}; under heavy load, try again in a moment",
            )
    text = str(exc) or type(exc).__name__
    if any(mark in text.lower() for mark in _BUSY_MARKS):
        return SessionError(
            "the session cannot take this now: its worker has not processed its last message "
            "yet (or failed to)",
            hint="try again in a few seconds; if it persists, the worker's log says why "
            "(`phasegate status SESSION` still answers once it recovers)",
        )
    return PhasegateError(text)


# ---------------------------------------------------------------- telemetry

_RUNTIMES: dict[str, Any] = {}


def metrics_runtime(port: int, *, host: str = "0.0.0.0") -> Any:
    """A Temporal ``Runtime`` serving Prometheus metrics at ``http://host:port/metrics``:
    the SDK's (``temporal_*``: task latencies, slots, polls, failures) and phasegate's
    (:data:`METRIC_ADVANCES` …), counters with ``_total``, durations in seconds. One per
    address per process; pass it to :func:`connect` as ``runtime=``.

    Raises:
        PhasegateError: the address is taken or malformed.
    """
    from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

    address = f"{host}:{port}"
    if address not in _RUNTIMES:
        config = PrometheusConfig(
            bind_address=address,
            counters_total_suffix=True,
            durations_as_seconds=True,
            histogram_bucket_overrides={METRIC_VERIFY_SECONDS: VERIFY_SECONDS_BUCKETS},
        )
        try:
            _RUNTIMES[address] = Runtime(telemetry=TelemetryConfig(metrics=config))
        except ValueError as exc:  # "Failed starting Prometheus exporter: Address in use"
            raise PhasegateError(
                f"cannot serve metrics on {address}: {exc}",
                where="phasegate worker --metrics-port / PHASEGATE_METRICS_PORT",
                hint="choose a free port (or leave it unset for no metrics)",
            ) from None
    return _RUNTIMES[address]


_TRACER_PROVIDER: Any = None


def tracing_interceptors(env: Mapping[str, str] | None = None) -> list[Any]:
    """``[TracingInterceptor()]`` (temporalio.contrib.opentelemetry) when tracing is on,
    else ``[]``. On: ``PHASEGATE_OTEL=1``, or ``OTEL_EXPORTER_OTLP_ENDPOINT`` set and
    OpenTelemetry installed (``PHASEGATE_OTEL=0`` turns it off). Spans go to the global
    tracer provider; when none is configured and the OTLP exporter is installed, one
    exporting to ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set up (service ``phasegate``).

    Raises:
        PhasegateError: ``PHASEGATE_OTEL=1`` but OpenTelemetry is not installed.
    """
    env = os.environ if env is None else env
    flag = env.get("PHASEGATE_OTEL", "").strip().lower()
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if flag in ("0", "false", "no", "off") or not (flag or endpoint):
        return []
    try:
        from opentelemetry import trace
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError:
        if not flag:
            return []  # an endpoint meant for another program; phasegate stays quiet
        raise PhasegateError(
            "PHASEGATE_OTEL is set but OpenTelemetry is not installed",
            where="PHASEGATE_OTEL",
            hint="pip install 'phasegate[otel]', or unset PHASEGATE_OTEL",
        ) from None
    if endpoint:
        _configure_otlp(trace)
    return [TracingInterceptor()]


def _configure_otlp(trace: Any) -> None:
    """Install an OTLP-exporting tracer provider unless the program already has one."""
    global _TRACER_PROVIDER
    if _TRACER_PROVIDER is not None:
        return
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return  # no exporter: spans go to whatever provider the program set
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return  # configured by the program (or opentelemetry-instrument)
    provider = TracerProvider(resource=Resource.create({"service.name": "phasegate"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _TRACER_PROVIDER = provider


def shutdown_tracing() -> None:
    """Flush the spans of the provider :func:`tracing_interceptors` set up, if any
    (before ``os._exit``, which skips the exporter's own exit hook)."""
    global _TRACER_PROVIDER
    provider, _TRACER_PROVIDER = _TRACER_PROVIDER, None
    if provider is not None:
        provider.shutdown()
