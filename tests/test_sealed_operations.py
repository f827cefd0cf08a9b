"""Operating sealed prefetch: key rotation keeps sessions running and replayable, a ring
that lost a key a session needs stops that session with a clear error until the key is
back (nothing lost), operators read sealed history with ``phasegate history`` (and
without the ring are told how), and the codec server opens sealed payloads for the Web
UI and ``temporal --codec-endpoint``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from google.protobuf import json_format
from sealed_helpers import (
    EVIDENCE,
    MARK,
    WORKFLOW,
    completed_results,
    kid_of,
    local_renders,
    raw_history,
    wait_prefetches,
    write_library,
)
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.client.codec_server import CodecServer
from phasegate.domain.errors import PhasegateError, SessionError
from phasegate.sealing import KeyRing, data_converter, load_ring, parse_ring
from phasegate.temporal import DATA_CONVERTER
from phasegate.workflows.gated_session import GatedSession

PREFETCH = "prefetch_sealed_phase"


def _replayer(ring: KeyRing) -> Replayer:
    return Replayer(workflows=[GatedSession], data_converter=data_converter(ring))


def _write(path: Path, ring: KeyRing) -> None:
    path.write_text(ring.to_json())
    path.chmod(0o600)


async def _task_failure(client, sid: str) -> str:
    """The text of the session's first failed workflow task (waits for it)."""
    for _ in range(200):
        history = await raw_history(client, sid)
        failed = [
            e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
        ]
        if failed:
            return str(failed[0].workflow_task_failed_event_attributes.failure)
        await asyncio.sleep(0.1)
    raise AssertionError("no workflow task failed")


async def test_rotation_keeps_sessions_running_and_replayable(
    env, settings_for, run_worker, tmp_path
):
    ring = tmp_path / "seal-ring.json"
    a = keys.new_seal_ring(ring).sealing.kid
    # One phase a prefetch (PHASEGATE_PREFETCH_AHEAD=0), so each advance seals one anew.
    settings = settings_for(
        write_library(tmp_path), seal_keys_file=str(ring), prefetch_ahead_bytes=0
    )
    pg = PhasegateClient(env.client, settings.task_queue)
    async with run_worker(settings):
        sid = await pg.start(WORKFLOW, str(tmp_path))
        await wait_prefetches(env.client, sid, 1)
        assert (await pg.submit(sid, 0, EVIDENCE)).passed
        await wait_prefetches(env.client, sid, 2)  # phase 2, sealed with A, not yet taken
    rotated = keys.rotate_seal_ring(ring)
    b = rotated.sealing.kid
    assert rotated.kids == [b, a] and oct(ring.stat().st_mode & 0o777) == "0o600"
    # A new worker with [B, A]: it replays the session (A's payloads) and seals with B.
    async with run_worker(settings):
        result = await pg.submit(sid, 1, EVIDENCE)
        assert result.passed and result.next_phase and MARK[2] in result.next_phase.name
        history = await wait_prefetches(env.client, sid, 3)
    assert [kid_of(p) for p in completed_results(history, PREFETCH)] == [a, a, b]
    assert local_renders(history) == 0  # each advance took its sealed prefetch
    recorded = WorkflowHistory(sid, list(history.events))
    await _replayer(load_ring(ring)).replay_workflow(recorded)

    # A ring that lost A: the session cannot be replayed, and says why.
    _write(ring, KeyRing([k for k in rotated.keys if k.kid == b]))
    with pytest.raises(Exception) as err:
        await _replayer(load_ring(ring)).replay_workflow(recorded)
    chain = []
    cause: BaseException | None = err.value
    while cause is not None:
        chain.append(str(cause))
        cause = cause.__cause__
    assert any(a in text and "PHASEGATE_SEAL_KEYS" in text for text in chain), chain
    async with run_worker(settings):
        with pytest.raises(PhasegateError):  # refused, not hung
            await pg.submit(sid, 2, EVIDENCE)
        failure = await _task_failure(env.client, sid)
    assert f"sealed with seal key \\'{a}\\'" in failure and "holds " + b in failure
    assert "resumes by itself once a worker holding the key runs it" in failure
    # The key is back: the same submission goes through; nothing was lost.
    _write(ring, rotated)
    async with run_worker(settings):
        result = await _submit_once_recovered(pg, sid, 2)
    assert result.passed and result.current_phase == 3


async def _submit_once_recovered(pg: PhasegateClient, sid: str, phase: int):
    """Submit as an agent does: again while the session says it cannot take it yet (its
    failed workflow task is retried with a backoff)."""
    for _ in range(60):
        try:
            return await pg.submit(sid, phase, EVIDENCE, submission_id=f"{sid}-{phase}")
        except SessionError as exc:
            assert "cannot take this now" in str(exc)
            await asyncio.sleep(1)
    raise AssertionError("the session did not recover")


async def _cli(env, home: Path, *args: str, ring: Path | None) -> tuple[int, str, str]:
    """``phasegate --address SERVER ARGS...`` as an operator runs it (the ring or not)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PHASEGATE_")}
    environment["PHASEGATE_HOME"] = str(home)
    if ring is not None:
        environment["PHASEGATE_SEAL_KEYS"] = str(ring)
    address = env.client.service_client.config.target_host
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "phasegate.client.cli",
        "--address",
        address,
        *args,
        env=environment,
        cwd=home,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_operators_read_sealed_history_with_the_ring(env, settings_for, run_worker, tmp_path):
    ring = tmp_path / "seal-ring.json"
    kid = keys.new_seal_ring(ring).sealing.kid
    settings = settings_for(write_library(tmp_path), seal_keys_file=str(ring))
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(WORKFLOW, str(tmp_path))
        await wait_prefetches(env.client, sid, 1)
        code, out, err = await _cli(env, tmp_path, "history", sid, ring=ring)
        assert code == 0, err
        assert f"[sealed with key {kid}, opened: phase 1 'Step {MARK[1]}']" in out
        code, out, err = await _cli(env, tmp_path, "history", sid, "--json", ring=ring)
        assert code == 0, err
        shown = [p for e in json.loads(out) for p in e["payloads"] if isinstance(p, dict)]
        opened = [p for p in shown if p.get("sealed_with") == kid]
        assert opened and MARK[1] in opened[0]["phase"]["content"]
        # Without the ring: named, not shown, and what to do.
        code, out, err = await _cli(env, tmp_path, "history", sid, ring=None)
    assert code == 0 and "Traceback" not in err
    assert MARK[1] not in out
    assert f"[sealed with key {kid}: not shown; this shell has no seal key ring" in out
    assert "1 sealed payload(s) not shown" in out and "PHASEGATE_SEAL_KEYS" in out


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


async def test_codec_server_round_trip(env, settings_for, run_worker, tmp_path):
    ring_path = tmp_path / "seal-ring.json"
    ring = keys.new_seal_ring(ring_path)
    settings = settings_for(write_library(tmp_path), seal_keys_file=str(ring_path))
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(WORKFLOW, str(tmp_path))
        history = await wait_prefetches(env.client, sid, 1)
    [sealed] = completed_results(history, PREFETCH)
    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"x": 1}')
    body = json_format.MessageToJson(Payloads(payloads=[sealed, plain])).encode()
    ui = "http://localhost:8233"
    with CodecServer(ring, origins=[ui]) as codec:
        status, answer = await asyncio.to_thread(
            _post, f"{codec.endpoint}/decode", body, {"Content-Type": "application/json"}
        )
        assert status == 200
        decoded = json_format.Parse(answer, Payloads()).payloads
        assert decoded[1] == plain  # not sealed: unchanged
        opened = json.loads(decoded[0].data)
        assert decoded[0].metadata["encoding"] == b"json/plain"
        assert opened["sealed_with"] == ring.sealing.kid and opened["workflow_id"] == sid
        assert MARK[1] in opened["phase"]["content"]
        status, answer = await asyncio.to_thread(_post, f"{codec.endpoint}/encode", body)
        assert status == 200 and json_format.Parse(answer, Payloads()).payloads[0] == sealed
        # The token is the lock: any other path is not found.
        wrong = codec.endpoint.rsplit("/", 1)[0] + "/not-the-token"
        status, _ = await asyncio.to_thread(_post, f"{wrong}/decode", body)
        assert status == 404
        status, _ = await asyncio.to_thread(_post, f"{codec.endpoint}/decode", b"not json")
        assert status == 400
        # The Web UI's preflight: allowed from its origin only.
        preflight = urllib.request.Request(
            f"{codec.endpoint}/decode",
            method="OPTIONS",
            headers={
                "Origin": ui,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        with await asyncio.to_thread(urllib.request.urlopen, preflight, timeout=10) as answer:
            assert answer.status == 204
            assert answer.headers["Access-Control-Allow-Origin"] == ui
            assert "x-namespace" in answer.headers["Access-Control-Allow-Headers"]
        other = urllib.request.Request(
            f"{codec.endpoint}/decode", method="OPTIONS", headers={"Origin": "http://evil"}
        )
        with await asyncio.to_thread(urllib.request.urlopen, other, timeout=10) as answer:
            assert answer.headers.get("Access-Control-Allow-Origin") is None
    # Without the ring the codec server shows the note, never the phase.
    with CodecServer(None) as codec:
        status, answer = await asyncio.to_thread(_post, f"{codec.endpoint}/decode", body)
    note = json.loads(json_format.Parse(answer, Payloads()).payloads[0].data)
    assert status == 200 and "not_shown" in note and MARK[1] not in answer.decode()


async def test_dev_ui_codec_needs_a_ring(env, tmp_path):
    """``phasegate dev --ui-codec`` without a ring: refused before any server starts."""
    code, _, err = await _cli(env, tmp_path, "dev", "--ui-codec", "--port", "0", ring=None)
    assert code == 1 and "Traceback" not in err
    assert "--ui-codec needs the Web UI and a seal key ring" in err
    assert "PHASEGATE_SEAL_KEYS=RING phasegate dev --ui-codec" in err
    assert not (tmp_path / "dev.json").exists()


SEALED_HISTORIES = Path(__file__).parent / "histories" / "sealed"


@pytest.mark.parametrize(
    "path",
    [p for p in sorted(SEALED_HISTORIES.glob("*.json")) if p.name != "ring.json"],
    ids=lambda p: p.stem,
)
async def test_recorded_sealed_histories_replay_with_the_ring(path: Path):
    """Histories with sealed prefetches (taken, replaced by a rollback's, carried over a
    continue-as-new) replay with the ring that sealed them, and without it fail saying
    which key is missing (record_sealed.py records them)."""
    ring = parse_ring((SEALED_HISTORIES / "ring.json").read_text(), "tests ring")
    workflow_id = path.stem.split("--", 1)[1]
    history = WorkflowHistory.from_json(workflow_id, path.read_text())
    results = [  # activity results, and local activities' (a run's first prefetch)
        *(e.activity_task_completed_event_attributes.result for e in history.events),
        *(e.marker_recorded_event_attributes.details.get("result") for e in history.events),
    ]
    assert any(
        p.metadata.get("encoding") == b"binary/phasegate-sealed"
        for r in results
        if r is not None
        for p in r.payloads
    )
    await _replayer(ring).replay_workflow(history)
    keyless = Replayer(workflows=[GatedSession], data_converter=DATA_CONVERTER)
    with pytest.raises(Exception) as err:
        await keyless.replay_workflow(history)
    assert "no seal key ring" in str(err.value.__cause__ or err.value)
