"""The tasks.md parser: a spec's phases, tasks and validation gates.

:func:`read_spec` is the one way phasegate reads a spec from disk (a session's start,
its snapshot rebuilt on another worker, ``phasegate spec parse``, a coding agent
reading its session's spec): a tasks.md or its folder, held to the session's folders
when a target is given, read within bounds, parsed, hashed. :func:`parse_tasks_md`
parses text already in hand (a tasks.md phasegate writes itself).

Private modules by concern: ``_input`` (where a spec may come from, the bounded read),
``_parse`` (the entry to the parser), ``_markdown`` (the markdown-it block parser),
``_tree`` (tokens to a node tree), ``_walk`` (files with phase headings),
``_numbered`` (files without them), ``_build`` (phase and task drafts), ``_text``
(reading one line: phase headings, task heads, labels).
"""

from __future__ import annotations

from phasegate.activities.tasks_md._input import SPEC_LIMIT, read_spec, spec_roots
from phasegate.activities.tasks_md._parse import (
    EXPECTED_FORMAT_HINT,
    generate_tasks_md,
    parse_tasks_md,
)

__all__ = [
    "EXPECTED_FORMAT_HINT",
    "SPEC_LIMIT",
    "generate_tasks_md",
    "parse_tasks_md",
    "read_spec",
    "spec_roots",
]
