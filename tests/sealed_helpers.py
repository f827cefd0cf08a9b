"""A workflow whose every phase carries a marker no other phase has, and what a level-2
agent can read of a session: the history through the raw gRPC service, every payload
decoded as far as Temporal's stock converters go, the description and the queries.
Written apart from phasegate's own readers (``phasegate history``), so the attack does
not trust the code it attacks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload, WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import History, HistoryEvent
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter

PHASES = 4
WORKFLOW = "sealed_v1"
# Unique per phase; a phase's name and text both carry it.
MARK = [f"QX{i}-{'ABCDEFGH'[i] * 3}-MARK" for i in range(PHASES)]
EVIDENCE = {"done": True, "notes": "all of it, checked"}
SEALED = b"binary/phasegate-sealed"


def write_library(root: Path) -> Path:
    """``sealed_v1``: PHASES phases, each with its marker, a gate and a task."""
    wdir = root / "lib" / WORKFLOW
    meta = {
        "workflow_type": WORKFLOW,
        "name": "Sealed prefetch test workflow",
        "phases": [
            {
                "phase_number": i,
                "phase_name": f"Step {MARK[i]}",
                "tasks": [{"task_number": 1, "name": "Do it", "file": "task-1-do.md"}],
            }
            for i in range(PHASES)
        ],
    }
    wdir.mkdir(parents=True)
    (wdir / "metadata.json").write_text(json.dumps(meta))
    for i in range(PHASES):
        pdir = wdir / "phases" / str(i)
        pdir.mkdir(parents=True)
        (pdir / "phase.md").write_text(f"# Phase {i}\n\nThe work of {MARK[i]}: do it.\n")
        (pdir / "task-1-do.md").write_text(f"# Task 1: [TASK_NAME]\n\nTask of {MARK[i]}.\n")
        (pdir / "gate-definition.yaml").write_text(
            "evidence_schema:\n"
            "  done: {type: boolean, required: true}\n"
            "  notes: {type: string, required: true, min_length: 5}\n"
        )
    return root / "lib"


def payloads(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` anywhere inside a proto message."""
    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = [v for v in value.values() if isinstance(v, Message)]
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            yield from payloads(item)


async def raw_history(client: Client, workflow_id: str, run_id: str = "") -> History:
    """One run's history as the gRPC service hands it to any client."""
    events: list[HistoryEvent] = []
    token = b""
    while True:
        page = await client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
                next_page_token=token,
            )
        )
        events.extend(page.history.events)
        token = page.next_page_token
        if not token:
            return History(events=events)


async def all_runs(client: Client, workflow_id: str, first_run: str) -> list[History]:
    """Each run of the session, following continue-as-new from ``first_run``."""
    runs: list[History] = []
    run_id = first_run
    while run_id:
        history = await raw_history(client, workflow_id, run_id)
        runs.append(history)
        last = history.events[-1]
        continued = last.HasField("workflow_execution_continued_as_new_event_attributes")
        attrs = last.workflow_execution_continued_as_new_event_attributes
        run_id = attrs.new_execution_run_id if continued else ""
    return runs


def _decoded(payload: Payload) -> list[str]:
    """What the stock converters and plain byte reading make of a payload."""
    seen = [payload.data.decode("utf-8", "replace"), payload.data.decode("latin-1")]
    for converter in (DataConverter.default, pydantic_data_converter):
        try:
            seen.append(repr(converter.payload_converter.from_payloads([payload])))
        except Exception as exc:  # noqa: BLE001 - an unreadable payload reveals only this
            seen.append(repr(exc))
    return seen


async def agent_reads(client: Client, workflow_id: str, first_run: str) -> tuple[str, int]:
    """All the text a Temporal client without the seal key can get about the session,
    and how many sealed payloads it met."""
    texts: list[str] = []
    sealed = 0
    for history in await all_runs(client, workflow_id, first_run):
        texts.append(history.SerializeToString().decode("latin-1"))
        for payload in payloads(history):
            sealed += payload.metadata.get("encoding") == SEALED
            texts.extend(_decoded(payload))
    description = await client.get_workflow_handle(workflow_id).describe()
    texts.append(description.raw_description.SerializeToString().decode("latin-1"))
    for payload in payloads(description.raw_description):
        texts.extend(_decoded(payload))
    return "\n".join(texts), sealed


def scheduled(history: History, activity_type: str) -> list[HistoryEvent]:
    return [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == activity_type
    ]


def completed_results(history: History, activity_type: str) -> list[Payload]:
    """The result payloads of the completed activities of ``activity_type``, on the task
    queue or local (a run's first prefetch is a local activity of the session's worker)."""
    ids = {e.event_id for e in scheduled(history, activity_type)}
    found: list[Payload] = []
    for e in history.events:
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            done = e.activity_task_completed_event_attributes
            if done.scheduled_event_id in ids:
                found.extend(done.result.payloads)
        elif e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            marker = e.marker_recorded_event_attributes
            data = marker.details["data"].payloads if "data" in marker.details else []
            if marker.marker_name == "core_local_activity" and any(
                json.loads(d.data).get("activity_type") == activity_type for d in data
            ):
                found.extend(
                    marker.details["result"].payloads if "result" in marker.details else []
                )
    return found


def local_activities(history: History, activity_type: str) -> int:
    """Local activity markers of ``activity_type``."""
    count = 0
    for e in history.events:
        marker = e.marker_recorded_event_attributes
        if e.event_type != EventType.EVENT_TYPE_MARKER_RECORDED or "data" not in marker.details:
            continue
        data = marker.details["data"].payloads
        count += any(json.loads(d.data).get("activity_type") == activity_type for d in data)
    return count


def local_renders(history: History) -> int:
    """Local activity markers of ``render_phase`` (a phase rendered at its advance)."""
    return local_activities(history, "render_phase")


async def wait_prefetches(
    client: Client, workflow_id: str, count: int, activity: str = "prefetch_sealed_phase"
) -> History:
    """Wait until ``count`` prefetches of the latest run have completed."""
    for _ in range(200):
        history = await raw_history(client, workflow_id)
        if len(completed_results(history, activity)) >= count:
            return history
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow_id}: fewer than {count} {activity} completed")


def kid_of(payload: Payload) -> str:
    return payload.metadata["phasegate-seal-kid"].decode()


def text_of(value: Any) -> str:
    return value.model_dump_json() if hasattr(value, "model_dump_json") else json.dumps(value)
