"""``phasegate spec parse | library list | library check | index | search``: the
workflow library, specs and the retrieval index, read on this machine (no server)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._common import EXIT_ERROR, EXIT_OK, JSON, Parser, echo
from phasegate.client.cli._render import render_check, render_library, render_spec, to_json

if TYPE_CHECKING:
    from phasegate.domain.settings import Settings

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``spec``, ``library``, ``index`` and ``search`` to ``sub``."""
    spec = sub.add_parser("spec", help="tasks.md tools (no server needed)")
    spec_sub = spec.add_subparsers(
        dest="spec_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = spec_sub.add_parser("parse", parents=[JSON], help="show the phases parsed from tasks.md")
    s.add_argument("path", metavar="PATH", help="tasks.md or its directory")
    s.set_defaults(func=spec_parse)

    lib = sub.add_parser("library", help="workflow library tools (no server needed)")
    lib_sub = lib.add_subparsers(
        dest="library_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    lib_sub.add_parser("list", parents=[JSON], help="workflows on the library path").set_defaults(
        func=library_list
    )
    s = lib_sub.add_parser("check", parents=[JSON], help="load every workflow in DIR")
    s.add_argument("dir", metavar="DIR", help="a library folder (holding <type>/metadata.json)")
    s.set_defaults(func=library_check)

    s = sub.add_parser("index", parents=[JSON], help="build the retrieval index (incremental)")
    s.add_argument("dirs", nargs="*", metavar="DIR", help="standards folders to include")
    s.set_defaults(func=index)
    s = sub.add_parser("search", parents=[JSON], help="query the retrieval index")
    s.add_argument("query", metavar="QUERY")
    s.add_argument("--workflow", help="as a session of this workflow type would see it")
    s.add_argument("--max-phase", type=int, help="hide that workflow's phases after N")
    s.add_argument("-k", type=int, default=5, help="most results (default 5)")
    s.add_argument("--tokens", type=int, default=2000, help="token budget (default 2000)")
    s.add_argument("--dir", dest="dirs", action="append", default=[], help="extra standards folder")
    s.set_defaults(func=search)


# ---------------------------------------------------------------- spec and library


def spec_parse(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities.tasks_md import read_spec

    # The one way a spec is read: the bounded reader sessions use (a regular UTF-8 file,
    # at most 1 MiB), so what this prints is what a session would load.
    spec = read_spec(Path(args.path).expanduser())
    echo(to_json(spec) if args.json else render_spec(spec))
    return EXIT_OK


def library_list(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.activities.library import list_workflows

    workflows = list_workflows(settings.library_paths)
    if args.json:
        echo(
            to_json(
                [
                    {
                        "workflow_type": w.metadata.workflow_type,
                        "name": w.metadata.name,
                        "description": w.metadata.description,
                        "phases": len(w.metadata.static_phases),
                        "dynamic": w.metadata.dynamic_phases,
                        "path": str(w.path),
                    }
                    for w in workflows
                ]
            )
        )
    else:
        echo(render_library(workflows))
    return EXIT_OK


def library_check(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from phasegate.activities.library_check import check_library

    report = check_library(args.dir)
    if args.json:
        echo(to_json(asdict(report)))
    else:
        echo(render_check(args.dir, report))
        if not report.workflows and (Path(args.dir) / "metadata.json").is_file():
            parent = Path(args.dir).resolve().parent
            echo(
                f"hint: {args.dir} is one workflow; check its library: "
                f"phasegate library check {parent}"
            )
    return EXIT_ERROR if report.errors else EXIT_OK


# ---------------------------------------------------------------- retrieval


def _rag(settings: Settings, extra_dirs: list[str]):
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
