"""``phasegate worker --metrics-port`` serves the Temporal runtime's metrics and
phasegate's own counters on one Prometheus endpoint; with an OTLP endpoint configured
both workers send their spans there."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from ports import free_port
from topology_helpers import CliWorker, OtlpCollector, write_library

from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError, PhaseSequenceViolation
from phasegate.domain.settings import verify_task_queue
from phasegate.temporal import metrics_runtime, tracing_interceptors
from phasegate.worker import MAIN_ACTIVITY_THREADS

QUICK = {"name": "quick", "kind": "command", "argv": ["true"], "timeout_seconds": 30}


def scrape(port: int) -> list[tuple[str, dict[str, str], float]]:
    """``(name, labels, value)`` of every sample on ``127.0.0.1:port/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, value = line.rsplit(" ", 1)
        name, _, rest = head.partition("{")
        labels = {
            k: v.strip('"') for k, v in (p.split("=", 1) for p in rest.rstrip("}").split(",") if p)
        }
        samples.append((name, labels, float(value)))
    return samples


def total(samples: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(
        v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in labels.items())
    )


async def test_worker_serves_metrics_and_traces(env, tmp_path):
    lib = write_library(tmp_path / "lib", "observed_v1", 3, {1: [QUICK]})
    ws = tmp_path / "ws"
    ws.mkdir()
    address = env.client.service_client.config.target_host
    queue = f"obs-{tmp_path.name[-12:]}"
    port = free_port()
    pg = PhasegateClient(env.client, queue)
    with OtlpCollector() as collector:
        proc_env = {
            "PHASEGATE_LIBRARY": str(lib),
            "PHASEGATE_HOME": str(tmp_path / "home"),
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
        }
        args = ("--metrics-port", str(port), "--metrics-host", "127.0.0.1")
        worker = CliWorker(address, queue, *args, "--verify-concurrency", "3", env=proc_env)
        try:
            assert f"metrics on http://127.0.0.1:{port}/metrics" in worker.output
            sid = await pg.start("observed_v1", str(ws))
            await pg.wait_started(sid)
            assert (await pg.submit(sid, 0, {"done": True})).passed
            with pytest.raises(PhaseSequenceViolation):
                await pg.submit(sid, 2, {"done": True})  # refused by the validator
            assert (await pg.submit(sid, 1, {"done": True})).passed  # runs the check
            samples = scrape(port)
        finally:
            code = worker.stop()
        assert code == 0, worker.output
        spans = set(collector.spans())

    verify_queue = verify_task_queue(queue)
    assert total(samples, "phasegate_advances_total", task_queue=queue, via="checkpoint") == 2
    assert (
        total(
            samples, "phasegate_refusals_total", task_queue=queue, code="phase_sequence_violation"
        )
        == 1
    )
    assert total(samples, "phasegate_refusals_total", task_queue=queue) == 1
    assert (
        total(samples, "phasegate_verify_seconds_count", task_queue=verify_queue, outcome="passed")
        == 1
    )
    # The SDK's own metrics, on the same endpoint: activity slots per queue (one per thread).
    slots = {
        ls["task_queue"]: v
        for n, ls, v in samples
        if n == "temporal_worker_task_slots_available" and ls.get("worker_type") == "ActivityWorker"
    }
    assert slots == {queue: MAIN_ACTIVITY_THREADS, verify_queue: 3}
    assert (
        total(
            samples,
            "temporal_activity_execution_latency_count",
            task_queue=verify_queue,
            activity_type="run_verify_checks",
        )
        == 1
    )
    assert ("phasegate", "RunActivity:load_session") in spans  # the main worker's
    assert ("phasegate", "RunActivity:run_verify_checks") in spans  # the verify worker's


def test_metrics_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PhasegateError, match="cannot serve metrics") as err:
            metrics_runtime(port, host="127.0.0.1")
    assert "--metrics-port" in (err.value.where or "")


def test_tracing_is_on_only_when_asked():
    from temporalio.contrib.opentelemetry import TracingInterceptor

    assert tracing_interceptors({}) == []
    off = {"PHASEGATE_OTEL": "0", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert tracing_interceptors(off) == []
    (on,) = tracing_interceptors({"PHASEGATE_OTEL": "1"})
    assert isinstance(on, TracingInterceptor)
