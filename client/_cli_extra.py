"""CLI handlers for retrieval (``index``, ``search``) and the MCP server (``mcp``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from phasegate.client._cli_commands import EXIT_OK, echo

if TYPE_CHECKING:
    from phasegate.domain.settings import Settings


def _rag(settings: Settings, extra_dirs: list[str]):
    from pathlib import Path

    from phasegate.activities.rag import RagActivities

    Path(settings.home).mkdir(parents=True, exist_ok=True)
    dirs = [*settings.standards_dirs, *(str(Path(d).resolve()) for d in extra_dirs)]
    return RagActivities(settings.rag_db, settings.library_paths, dirs)


def _reindex(settings: Settings, dirs: list[str]):
    rag = _rag(settings, dirs)
    try:
        return rag.reindex()
    finally:
        rag.close()


def index(args: argparse.Namespace, settings: Settings) -> int:
    """Build or refresh the retrieval index (unchanged files are skipped by content hash)."""
    report = _reindex(settings, args.dirs)
    if args.json:
        echo(report.model_dump_json())
    else:
        echo(
            f"indexed {report.indexed_files} file(s), skipped {report.skipped_files} unchanged, "
            f"removed {report.removed_files}; {report.chunks} chunks in {report.seconds:.2f}s "
            f"({settings.rag_db})"
        )
    return EXIT_OK


def search(args: argparse.Namespace, settings: Settings) -> int:
    """Query the retrieval index the way a phase's context is built."""
    from pathlib import Path

    from phasegate.activities.rag import FtsIndex
    from phasegate.domain.rag import RetrievalQuery

    if args.dirs or not Path(settings.rag_db).is_file():
        _reindex(settings, args.dirs)  # build it first
    fts = FtsIndex(settings.rag_db)  # search what is indexed; no re-index
    try:
        query = RetrievalQuery(
            text=args.query,
            workflow_type=args.workflow,
            max_phase=args.max_phase,
            k=args.k,
            token_budget=args.tokens,
        )
        chunks = fts.search(query)
    finally:
        fts.close()
    if args.json:
        echo(json.dumps([c.model_dump(mode="json") for c in chunks], indent=2))
        return EXIT_OK
    if not chunks:
        echo("no matches (try other words, or `phasegate index` after adding documents)")
    for i, c in enumerate(chunks, start=1):
        where = f"{c.workflow_type} phase {c.phase}" if c.workflow_type else "standards"
        echo(
            f"{i}. {' > '.join(c.heading_path) or c.file}  [{where}, {c.tokens} tokens, score {c.score:.2f}]"
        )
        echo(f"   {c.file}:{c.line}")
        snippet = " ".join(c.text.split())[:200]
        echo(f"   {snippet}")
    return EXIT_OK


def mcp(args: argparse.Namespace, settings: Settings) -> int:
    """Run the MCP server for coding agents (stdio, or streamable HTTP with --http)."""
    from phasegate.client import mcp_server

    args.temporal = True
    return mcp_server.main(["--http", str(args.http)] if args.http else [])


def keys_new(args: argparse.Namespace, settings: Settings) -> int:
    """Create an approver's Ed25519 key pair (private key 0600 in the config dir)."""
    from phasegate.client import keys

    key = keys.new_key(args.name, overwrite=args.force)
    if args.json:
        echo(key.model_dump_json())
        return EXIT_OK
    echo(f"created key {args.name!r} ({_fingerprint(key.public_key)})")
    echo(
        f"private key: {keys.keys_dir(None) / (args.name + '.key')} (mode 0600; keep it from agents)"
    )
    echo(
        "public key (the worker names its approvers: `phasegate dev --approver-key NAME`, or "
        'PHASEGATE_APPROVER_KEYS="$(phasegate keys export NAME)" phasegate worker):'
    )
    echo(key.public_key)
    return EXIT_OK


def keys_list(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.client import keys

    found = keys.list_keys()
    if args.json:
        echo(json.dumps([k.model_dump() for k in found]))
    elif not found:
        echo(f"no keys in {keys.keys_dir(None)} (create one: phasegate keys new NAME)")
    for k in found:
        echo(f"{k.name:20} {_fingerprint(k.public_key)}  {k.public_key}")
    return EXIT_OK


def keys_export(args: argparse.Namespace, settings: Settings) -> int:
    """Print ``{name, public_key}``: an entry for ``approver_keys`` (options or metadata.json)."""
    from phasegate.client import keys

    echo(keys.public_key(args.name).model_dump_json())
    return EXIT_OK


def _fingerprint(public_key: str) -> str:
    from phasegate.domain.signing import fingerprint

    return fingerprint(public_key)
