"""Helpers of the worker-topology, observability and blob-limit tests: a small library
with optional verify checks, ``phasegate worker`` as a real process, pending activities,
and an OTLP/HTTP trace collector on loopback."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Self

from temporalio.api.workflow.v1 import PendingActivityInfo
from temporalio.client import Client

PHASEGATE = str(Path(sys.executable).parent / "phasegate")


def write_library(
    root: Path, workflow_type: str, phases: int, verify: dict[int, list[dict[str, Any]]]
) -> Path:
    """``root/workflow_type``: ``phases`` phases whose gate needs ``{"done": true}``;
    ``verify[n]`` adds those checks to phase n's gate. Returns ``root``."""
    wdir = root / workflow_type
    meta = {
        "workflow_type": workflow_type,
        "name": f"Test {workflow_type}",
        "phases": [
            {
                "phase_number": i,
                "phase_name": f"Step {i}",
                "tasks": [{"task_number": 1, "name": "Do it", "file": "task-1-do.md"}],
            }
            for i in range(phases)
        ],
    }
    wdir.mkdir(parents=True)
    (wdir / "metadata.json").write_text(json.dumps(meta))
    for i in range(phases):
        pdir = wdir / "phases" / str(i)
        pdir.mkdir(parents=True)
        (pdir / "phase.md").write_text(f"# Phase {i}: Step {i}\n\nDo step {i}.\n")
        (pdir / "task-1-do.md").write_text("# Task 1: [TASK_NAME]\n\nDo the work.\n")
        gate = "checkpoint: {strict: true}\nevidence_schema:\n"
        gate += "  done: {type: boolean, required: true}\n"
        if i in verify:
            gate += f"verify: {json.dumps(verify[i])}\n"  # JSON is YAML
        (pdir / "gate-definition.yaml").write_text(gate)
    return root


async def pending_activities(client: Client, session_id: str) -> list[PendingActivityInfo]:
    desc = await client.get_workflow_handle(session_id).describe()
    return list(desc.raw_description.pending_activities)


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    """Poll ``check`` every 50 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout:.0f}s")
        await asyncio.sleep(0.05)


class CliWorker:
    """``phasegate worker ARGS`` in its own process, ready once it names its queues."""

    def __init__(self, address: str, task_queue: str, *args: str, env: dict[str, str]) -> None:
        cmd = [PHASEGATE, "--address", address, "--task-queue", task_queue, "worker", *args]
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self._ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(60):
            self.stop()
            raise AssertionError("phasegate worker did not start:\n" + self.output)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if line.startswith("phasegate worker: task queue"):
                self._ready.set()
        self._ready.set()  # exited: let the waiter see the output

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self) -> int:
        """SIGTERM, then the exit code (the worker drains and exits 0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


class OtlpCollector:
    """An OTLP/HTTP trace receiver on 127.0.0.1 (``with OtlpCollector() as c: c.url``)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path == "/v1/traces":
                    owner.bodies.append(self.rfile.read(length))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def spans(self) -> list[tuple[str, str]]:
        """``(service.name, span name)`` of every span received."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        found = []
        for body in self.bodies:
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                for scope in rs.scope_spans:
                    found += [(attrs.get("service.name", ""), s.name) for s in scope.spans]
        return found
