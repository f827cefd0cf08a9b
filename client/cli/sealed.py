"""``phasegate history SESSION`` and ``phasegate codec-server``: what an operator reads
of a session's history, sealed prefetches included where this shell holds the seal key
ring (``PHASEGATE_SEAL_KEYS``), and the codec server that shows them in the Web UI.

Without the ring a sealed payload is named, never shown, with what to do instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._common import EXIT_OK, JSON, SESSION, Ctx, echo, remote
from phasegate.client.cli._render import terminal_safe

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from temporalio.api.common.v1 import Payload

    from phasegate.domain.settings import Settings
    from phasegate.sealing import KeyRing

__all__ = ["register"]

_PREVIEW = 160
_NO_RING = (
    "this shell has no seal key ring: set PHASEGATE_SEAL_KEYS to the ring file (operators), "
    "or read it in the Web UI through `phasegate codec-server`"
)


def register(sub: Any) -> None:
    """Add ``history`` and ``codec-server`` to ``sub``."""
    s = sub.add_parser(
        "history",
        parents=[SESSION, JSON],
        help="a session's history events, sealed payloads opened with PHASEGATE_SEAL_KEYS",
    )
    s.add_argument("--run", metavar="RUN_ID", help="this run (default: the latest)")
    s.set_defaults(func=history)
    s = sub.add_parser(
        "codec-server",
        help="serve Temporal's remote codec protocol: sealed payloads in the Web UI",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    s.add_argument("--port", type=int, default=8081, help="port (default 8081; 0: any free)")
    s.add_argument(
        "--ui-origin",
        action="append",
        default=[],
        metavar="URL",
        help="a Web UI origin browsers may call it from (repeatable; default: the server's UI)",
    )
    s.add_argument("--token-file", metavar="FILE", help="read the endpoint's secret path from FILE")
    s.set_defaults(func=codec_server)


def _ring(settings: Settings) -> KeyRing | None:
    from phasegate.sealing import load_ring

    return load_ring(settings.seal_keys_file) if settings.seal_keys_file else None


@remote
async def history(ctx: Ctx) -> int:
    """Each event of the session's run: its type, and its payloads as JSON."""
    ring = _ring(ctx.settings)
    pg = await ctx.client()
    handle = pg.temporal.get_workflow_handle(ctx.args.session_id, run_id=ctx.args.run)
    events = []
    async for event in handle.fetch_history_events():
        shown = [_shown(ring, p) for p in _payloads(event)]
        events.append((event.event_id, _event_type(event.event_type), shown))
    if ctx.args.json:
        listing = [{"event_id": i, "event_type": t, "payloads": p} for i, t, p in events]
        echo(json.dumps(listing))
        return EXIT_OK
    sealed = 0
    for event_id, kind, shown in events:
        parts = []
        for value in shown:
            if isinstance(value, dict) and "sealed_with" in value:
                sealed += 1
                parts.append(_sealed_text(value))
            else:
                text = json.dumps(value)
                parts.append(text if len(text) <= _PREVIEW else text[:_PREVIEW] + "…")
        echo(terminal_safe(f"{event_id:5}  {kind}  {'  '.join(parts)}".rstrip()))
    if sealed and ring is None:
        echo(f"{sealed} sealed payload(s) not shown: {_NO_RING}")
    return EXIT_OK


def _sealed_text(value: dict[str, Any]) -> str:
    if "not_shown" in value:
        why = value["not_shown"] if "no seal key ring" not in value["not_shown"] else _NO_RING
        return f"[sealed with key {value['sealed_with']}: not shown; {why}]"
    phase = value.get("phase") or {}
    what = f"phase {value.get('index')} {phase.get('name', '')!r}" if phase else value["problem"]
    text = json.dumps(phase)
    preview = text if len(text) <= _PREVIEW else text[:_PREVIEW] + "…"
    return f"[sealed with key {value['sealed_with']}, opened: {what}] {preview}"


def _shown(ring: KeyRing | None, payload: Payload) -> Any:
    """A payload as JSON: a sealed one as ``sealing.reveal`` shows it; else its value."""
    from phasegate.sealing import is_sealed, reveal

    if is_sealed(payload):
        payload = reveal(ring, payload)
    try:
        return json.loads(payload.data) if payload.data else None
    except ValueError:
        encoding = payload.metadata.get("encoding", b"?").decode("utf-8", "replace")
        return f"<{len(payload.data)} bytes, {encoding}>"


def _payloads(message: Message) -> Iterator[Payload]:
    """Every ``Payload`` inside a proto message, in field order."""
    from temporalio.api.common.v1 import Payload

    if isinstance(message, Payload):
        yield message
        return
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            items = [v for v in value.values() if hasattr(v, "ListFields")]
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        for item in items:
            yield from _payloads(item)


def _event_type(value: int) -> str:
    from temporalio.api.enums.v1 import EventType

    name = EventType.Name(value)  # type: ignore[arg-type]
    return "".join(w.title() for w in name.removeprefix("EVENT_TYPE_").split("_"))


def codec_server(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the codec endpoint until Ctrl-C."""
    from pathlib import Path

    from phasegate.client.codec_server import CodecServer
    from phasegate.domain.errors import PhasegateError

    ring = _ring(settings)
    if ring is None:
        raise PhasegateError(
            "no seal key ring to open sealed payloads with",
            where="PHASEGATE_SEAL_KEYS",
            hint="PHASEGATE_SEAL_KEYS=RING phasegate codec-server (the workers' ring file)",
        )
    token = None
    if args.token_file:
        try:
            token = Path(args.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise PhasegateError(
                f"cannot read the token file: {exc.strerror or exc}",
                where=f"--token-file {args.token_file}",
                hint="a file holding one line: the endpoint's secret path segment",
            ) from None
    origins = args.ui_origin or [o for o in [settings.ui_url] if o]
    try:
        codec = CodecServer(ring, host=args.host, port=args.port, token=token, origins=origins)
    except OSError as exc:
        raise PhasegateError(
            f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}",
            where="--host/--port",
            hint="choose a free port (--port 0 picks one)",
        ) from None
    echo(f"phasegate codec-server: {codec.endpoint} (keys {', '.join(ring.kids)})")
    echo(
        "Web UI: set it as the codec endpoint (UI settings, or the server's "
        f"--ui-codec-endpoint); CLI: temporal workflow show -w ID --codec-endpoint "
        f"{codec.endpoint}; browsers allowed from {', '.join(origins) or 'no origin'}. "
        "Anyone who reaches this URL reads every sealed phase: keep it from agents."
    )
    try:
        codec.serve_forever()
    except KeyboardInterrupt:
        pass
    return EXIT_OK
