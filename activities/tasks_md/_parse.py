"""Parse a spec's tasks.md into phases and tasks (``domain.spec.ParsedSpec``).

Structure comes from markdown-it-py's token stream, so fenced and indented
code is never read as tasks and every phase and task keeps its line number.
Handled layouts (``tests/fixtures/tasks/`` has one small file per family, and
``tests/fixtures/tasks/real/`` files people wrote):

* phase headings ``## Phase 1: Name`` / ``### Phase 0 - Name`` / ``## PHASE 2: NAME``,
  at mixed levels too; older spec-kit ``## Phase 3.1: Setup`` headings, spec-kit's
  ``## Phase N: Polish`` and ``## Phase: Setup`` are numbered by position; roman
  numerals and 阶段/フェーズ/Fase headings count as well;
* tasks as checkbox items (``- [ ] **Task 1.1**: Name``, spec-kit's
  ``- [ ] T001 [P] [US1] text``, ``- [x] 1.1 text``, ``- [ ]* 2.1 text``) or as
  headings (``#### Task 1.1: Name``, ``### P1-T2: Name``, ``### T003.5: Name [P]``);
* metadata bullets (Estimated Time, Dependencies, Acceptance Criteria,
  ``_Requirements: 1.1_``) and ``**Validation Gate:**`` / ``**Checkpoint**:`` blocks;
* files without phase headings: numbered top-level items are the phases, with
  their nested items or (Kiro) the ``1.1``, ``1.2`` items after them as tasks;
  else sections over checklists (OpenSpec), else one phase;
* YAML front matter is skipped; trailing sections (Notes, Dependencies...) end
  the last phase;
* dependencies written as prose (``depends on T003``, ``after T002``) and in
  spec-kit's dependency sections (``T008 blocks T009``) are read (``_deps``).

The only exception that leaves ``parse_tasks_md`` is ``SpecParseError``.
"""

from __future__ import annotations

import hashlib

from phasegate.activities.tasks_md._deps import dependency_lines, link_prose_dependencies
from phasegate.activities.tasks_md._markdown import blank_front_matter, block_parser
from phasegate.activities.tasks_md._numbered import walk_numbered
from phasegate.activities.tasks_md._text import plain_heading
from phasegate.activities.tasks_md._tree import LISTS, Node, build_tree, drain, item_text
from phasegate.activities.tasks_md._walk import PhaseHeadingWalker, phase_layout
from phasegate.domain.errors import SpecParseError
from phasegate.domain.spec import ParsedSpec, ParseWarning

__all__ = ["EXPECTED_FORMAT_HINT", "generate_tasks_md", "parse_tasks_md"]

EXPECTED_FORMAT_HINT = (
    "write phase headings such as '## Phase 1: Setup' followed by checkbox tasks "
    "('- [ ] 1.1 Create the project' or '- [ ] **Task 1.1**: Name') or task headings "
    "('#### Task 1.1: Name'); without phase headings, use a numbered list "
    "('1. Set up' or '- [ ] 1. Set up') whose nested items are the tasks"
)

# Block structure only; see _markdown for what is off and why.
# Private, but benchmarks time ``_MD.parse`` alone as the tokenising baseline.
_MD = block_parser()


def parse_tasks_md(text: str, *, source: str = "tasks.md") -> ParsedSpec:
    """Parse the text of a tasks.md into phases, tasks and validation gates.

    Args:
        text: The whole file, as read (CRLF line endings are fine).
        source: Path or name of the file, used in errors and ``ParsedSpec.source``.

    Returns:
        The parsed spec: phases numbered as written, ``sha256`` of ``text``
        (UTF-8), and warnings for odd but tolerated input (duplicate task ids,
        phases without tasks, task-like items outside any phase).

    Raises:
        SpecParseError: The file is empty, yields no phases, or could not be
            parsed; it carries a line number and a hint on the expected format.
    """
    try:
        return _parse(text, source)
    except SpecParseError:
        raise
    except Exception as exc:  # anything else is a parser bug; report it as a parse error
        raise SpecParseError(
            f"could not parse tasks.md ({type(exc).__name__}: {exc})",
            source=source,
            line=1,
            hint="this is a phasegate bug; please report it with the file attached",
        ) from exc


def _parse(text: str, source: str) -> ParsedSpec:
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    if not text.strip():
        raise SpecParseError("the file is empty", source=source, line=1, hint=EXPECTED_FORMAT_HINT)
    # YAML front matter is metadata, not markdown: its lines are blanked (line numbers hold).
    nodes = build_tree(_MD.parse(blank_front_matter(text)))  # each stage drains the one before
    title = next(
        (plain_heading(n.content) for n in nodes if n.type == "heading" and n.level == 1), ""
    )
    warnings: list[ParseWarning] = []
    dependency_text = dependency_lines(nodes)  # read before the walkers drain the blocks
    layout = phase_layout(nodes)
    if layout is not None:
        # Drains nodes; a layout means some heading opens a phase, so no _best_line below.
        drafts = PhaseHeadingWalker(*layout, warnings).run(nodes)
    else:
        drafts = walk_numbered(nodes, title, warnings)
    if not drafts:
        raise SpecParseError(
            "no phases found",
            source=source,
            line=_best_line(nodes),
            hint=EXPECTED_FORMAT_HINT,
        )
    link_prose_dependencies(drafts, dependency_text, warnings)
    for phase in drafts:
        if not phase.tasks:
            warnings.append(
                ParseWarning(
                    line=phase.line,
                    message=f"phase {phase.number} ({phase.name!r}) has no tasks",
                )
            )
    warnings.sort(key=lambda w: w.line)
    return ParsedSpec(
        source=source,
        title=title,
        phases=[p.to_model() for p in drain(drafts)],
        warnings=warnings,
        sha256=digest,
    )


def _best_line(nodes: list[Node]) -> int:
    """Where to point when no phase was found: a heading or item mentioning a phase."""
    for node in nodes:
        if node.type == "heading" and "phase" in node.content.lower():
            return node.line
        if node.type in LISTS:
            for item in node.children:
                if "phase" in item_text(item)[0].lower():
                    return item.line
    return 1


def generate_tasks_md(n_tasks: int, tasks_per_phase: int = 20) -> str:
    """Build a realistic spec-kit style tasks.md with ``n_tasks`` tasks (for benchmarks).

    Each phase has a purpose line, an estimated duration, ``tasks_per_phase``
    checkbox tasks (``- [ ] T001 [P] [US1] ...``; every fifth task carries
    nested Dependencies and Acceptance Criteria bullets) and a checkpoint; the
    file ends with the usual non-phase sections.

    Args:
        n_tasks: Total number of tasks (0 gives a file with no phases).
        tasks_per_phase: Tasks per phase; the last phase may have fewer.

    Returns:
        The markdown text; ``parse_tasks_md`` reads it back with
        ``ceil(n_tasks / tasks_per_phase)`` phases numbered from 1.

    Raises:
        ValueError: ``n_tasks`` is negative or ``tasks_per_phase`` is below 1.
    """
    if n_tasks < 0 or tasks_per_phase < 1:
        raise ValueError("n_tasks must be >= 0 and tasks_per_phase >= 1")
    out = [f"# Tasks: Generated feature ({n_tasks} tasks)\n\n**Input**: specs/001-generated/\n"]
    for start in range(0, n_tasks, tasks_per_phase):
        number = start // tasks_per_phase + 1
        story = f"US{number}"
        out.append(
            f"\n## Phase {number}: User Story {number} - Component {number} (Priority: P{number % 3 + 1})\n\n"
            f"**Purpose**: Deliver component {number} end to end.\n\n"
            f"**Estimated Duration**: {number % 4 + 1} days\n\n"
        )
        for k in range(start, min(start + tasks_per_phase, n_tasks)):
            tid = f"T{k + 1:03d}"
            marker = "[P] " if k % 3 else ""
            path = f"src/component_{number}/part_{k + 1}.py"
            out.append(f"- [ ] {tid} {marker}[{story}] Implement part {k + 1} in {path}\n")
            if k % 5 == 4:
                out.append(
                    f"  - **Dependencies**: T{k:03d}\n"
                    f"  - **Acceptance Criteria**:\n"
                    f"    - [ ] tests/component_{number}/test_part_{k + 1}.py passes\n"
                )
        out.append(f"\n**Checkpoint**: Component {number} works on its own\n\n---\n")
    out.append(
        "\n## Dependencies & Execution Order\n\n- Each phase depends on the previous one.\n"
        "\n## Notes\n\n- [P] tasks touch different files.\n"
    )
    return "".join(out)
