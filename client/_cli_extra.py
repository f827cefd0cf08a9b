"""CLI handlers for retrieval (``index``, ``search``) and the MCP server (``mcp``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from client._cli_commands import EXIT_OK, echo

if TYPE_CHECKING:
    from domain.settings import Settings


def _rag(settings: Settings, extra_dirs: list[str]):  # noqa: ANN202 - RagActivities
    from pathlib import Path

    from activities.rag import RagActivities

    Path(settings.home).mkdir(parents=True, exist_ok=True)
    dirs = [*settings.standards_dirs, *(str(Path(d).resolve()) for d in extra_dirs)]
    return RagActivities(settings.rag_db, settings.library_paths, dirs)


def _reindex(settings: Settings, dirs: list[str]):  # noqa: ANN202 - IndexReport
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
    from domain.rag import RetrievalQuery

    from pathlib import Path

    from activities.rag import FtsIndex

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
        echo(f"{i}. {' > '.join(c.heading_path) or c.file}  [{where}, {c.tokens} tokens, score {c.score:.2f}]")
        echo(f"   {c.file}:{c.line}")
        snippet = " ".join(c.text.split())[:200]
        echo(f"   {snippet}")
    return EXIT_OK


def mcp(args: argparse.Namespace, settings: Settings) -> int:
    """Run the MCP server for coding agents (stdio, or streamable HTTP with --http)."""
    from client import mcp_server

    args.temporal = True
    return mcp_server.main(["--http", str(args.http)] if args.http else [])
