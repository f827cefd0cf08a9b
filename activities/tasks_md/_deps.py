"""Dependencies written in prose: in a task's own text, and in a dependency section.

Metadata bullets (``**Dependencies**: T001``) are read by ``_build``. People also
write them as prose, and spec-kit's tasks.md keeps them in a trailing section:

- in a task: ``T004 Wire the CLI (depends on T003)``, ``after T002``,
  ``Depends on: T001, T002``, ``requires T001``, ``blocked by T001``;
- in a section titled Dependencies / Execution Order (any level; its code blocks
  are skipped): ``T008 blocks T009, T015``, ``T010 depends on T008``,
  ``Tests (T004-T007) before implementation (T008-T014)``, ``T001 → T002 → T003``,
  ``After T011-T012 land, T014 can run ...``, ``T016 and T017 can proceed ... once
  ... from T015 is defined``.

Only ids of tasks that exist are linked (ranges expand to the existing ids between
their ends); dotted ids (``1.2``) count in prose only after "task" or a strong verb
("depends on", "requires"), so "after 2.5 seconds" is not a dependency. A statement
in a dependency section naming an id that is not a task gets a warning with its line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from phasegate.activities.tasks_md._build import PhaseDraft, TaskDraft
from phasegate.activities.tasks_md._text import plain_heading
from phasegate.activities.tasks_md._tree import CODE, LISTS, Node, item_text
from phasegate.domain.spec import ParseWarning

__all__ = ["dependency_lines", "link_prose_dependencies"]

_MAX_RANGE = 500
_SECTION = re.compile(r"\b(?:dependenc\w*|execution\s+order|task\s+order)\b", re.IGNORECASE)
_T_ID = r"(?:T-?\d{1,6}(?:\.\d{1,4})*[a-z]?|P\d+-T\d+)"
_DOTTED = r"\d+(?:\.\d+)+"
_ID = rf"(?:{_T_ID}|{_DOTTED})"
_RANGE_SEP = r"\s*(?:[-–—]|\.\.|to|through)\s*"
_IDS = rf"(?:task\s+)?{_ID}(?:{_RANGE_SEP}{_ID})?(?:\s*(?:,|/|&|and|,\s*and)\s*(?:task\s+)?{_ID}(?:{_RANGE_SEP}{_ID})?)*"
_STRONG = r"depends?\s+on|depend\s+upon|requires?|blocked\s+by|dependenc(?:y|ies)|prerequisites?"
_INLINE = re.compile(rf"\b(?P<verb>{_STRONG}|after)\s*:?\s*(?P<ids>{_IDS})", re.IGNORECASE)
_BLOCKS = re.compile(rf"(?P<a>{_IDS})[^.;]*?\bblocks?\s+(?P<b>{_IDS})", re.IGNORECASE)
_NEEDS = re.compile(
    rf"(?P<a>{_IDS})\)?[^.;]*?\b(?:{_STRONG}|after|needs?)\s*:?\s*(?P<b>{_IDS})", re.IGNORECASE
)
_BEFORE = re.compile(rf"(?P<a>{_IDS})\)?[^.;]*?\bbefore\b[^.;(]*\(?(?P<b>{_IDS})", re.IGNORECASE)
_AFTER_LEAD = re.compile(rf"\bafter\s+(?P<b>{_IDS})\b[^,.;]*,\s*(?P<a>{_IDS})", re.IGNORECASE)
_ONCE = re.compile(rf"(?P<a>{_IDS})\)?[^.;]*?\bonce\b[^.;]*?\b(?P<b>{_IDS})", re.IGNORECASE)
_ARROW = re.compile(rf"{_T_ID}(?:\s*(?:→|->|⟶|=>)\s*{_T_ID})+")
_ONE = re.compile(rf"(?P<lo>{_ID})(?:{_RANGE_SEP}(?P<hi>{_ID}))?", re.IGNORECASE)
_NUM = re.compile(r"^(?P<pre>T-?|P\d+-T)(?P<n>\d+)$")


def dependency_lines(nodes: list[Node]) -> list[tuple[int, str]]:
    """The text lines of the dependency sections among the top-level blocks.

    Call before the walkers drain ``nodes``. A section runs from its heading to the
    next heading of the same or a higher level; code blocks are left out.
    """
    out: list[tuple[int, str]] = []
    level: int | None = None
    for node in nodes:
        if node.type == "heading":
            if level is not None and node.level <= level:
                level = None
            if level is None and _SECTION.search(plain_heading(node.content)):
                level = node.level
            continue
        if level is not None:
            out.extend(_lines(node))
    return out


def _lines(node: Node) -> Iterable[tuple[int, str]]:
    if node.type in CODE:
        return
    if node.type in LISTS:
        for item in node.children:
            text, rest = item_text(item)
            yield from ((item.line + i, ln) for i, ln in enumerate(text.split("\n")))
            for child in rest:
                yield from _lines(child)
    elif node.type == "paragraph":
        yield from ((node.line + i, ln) for i, ln in enumerate(node.content.split("\n")))
    else:
        for child in node.children:
            yield from _lines(child)


def link_prose_dependencies(
    phases: list[PhaseDraft], lines: list[tuple[int, str]], warnings: list[ParseWarning]
) -> None:
    """Add the dependencies prose names to the tasks of ``phases`` (in place)."""
    tasks = {t.id: t for p in phases for t in p.tasks if t.id is not None}
    if not tasks:
        return
    ids = Ids(tasks)
    for task in tasks.values():
        text = "\n".join([task.name, *task.desc])
        for m in _INLINE.finditer(text):
            strong = m["verb"].lower() != "after"
            _add(task, ids.expand(m["ids"], dotted=strong), tasks)
    for line, text in lines:
        for first, then, missing in _statements(text, ids):
            for later in then:
                _add(tasks[later], first, tasks)
            if missing:
                names = ", ".join(sorted(missing)[:5])
                warnings.append(
                    ParseWarning(line=line, message=f"the dependency names {names}: no such task")
                )


def _statements(text: str, ids: Ids) -> Iterable[tuple[list[str], list[str], set[str]]]:
    """(earlier ids, ids that depend on them, ids named that are not tasks) per statement."""
    for m in _BLOCKS.finditer(text):
        yield ids.expand(m["a"]), ids.expand(m["b"]), ids.missing(m["a"], m["b"])
    for m in _NEEDS.finditer(text):
        if not re.search(r"\bblocks?\b", m.group(0), re.IGNORECASE):
            yield ids.expand(m["b"]), ids.expand(m["a"]), ids.missing(m["a"], m["b"])
    for m in _BEFORE.finditer(text):
        yield ids.expand(m["a"]), ids.expand(m["b"]), ids.missing(m["a"], m["b"])
    for m in _AFTER_LEAD.finditer(text):  # "After T011-T012 land, T014 can run ..."
        yield ids.expand(m["b"], dotted=False), ids.expand(m["a"]), ids.missing(m["a"], m["b"])
    for m in _ONCE.finditer(text):  # "T016 and T017 can proceed ... once ... T015 ..."
        yield ids.expand(m["b"]), ids.expand(m["a"]), ids.missing(m["a"], m["b"])
    for m in _ARROW.finditer(text):
        chain = re.findall(_T_ID, m.group(0))
        for a, b in pairwise(chain):
            yield ids.expand(a), ids.expand(b), ids.missing(a, b)


def _add(task: TaskDraft, deps: list[str], tasks: dict[str, TaskDraft]) -> None:
    for dep in deps:
        if dep != task.id and dep in tasks and dep not in task.dependencies:
            task.dependencies.append(dep)


class Ids:
    """The spec's task ids, and what a written id list (ranges too) names among them."""

    def __init__(self, tasks: dict[str, TaskDraft]) -> None:
        self.known = set(tasks)
        self.upper = {i.upper(): i for i in tasks}

    def expand(self, text: str, *, dotted: bool = True) -> list[str]:
        """The existing ids ``text`` names; dotted ids only when ``dotted`` or after "task"."""
        out: list[str] = []
        for m in _ONE.finditer(text):
            lo, hi = m["lo"], m["hi"]
            before = text[max(0, m.start() - 5) : m.start()].lower()
            if lo[0].isdigit() and not dotted and "task" not in before:
                continue
            out += self._range(lo, hi) if hi else [self.upper.get(lo.upper(), "")]
        return [i for i in dict.fromkeys(out) if i]

    def missing(self, *texts: str) -> set[str]:
        """Ids written in ``texts`` (range ends included) that are not tasks."""
        found = {w for t in texts for m in _ONE.finditer(t) for w in (m["lo"], m["hi"]) if w}
        return {w for w in found if w.upper() not in self.upper}

    def _range(self, lo: str, hi: str) -> list[str]:
        a, b = _NUM.match(lo.upper()), _NUM.match(hi.upper())
        if a is None or b is None or a["pre"] != b["pre"]:
            return [self.upper.get(lo.upper(), ""), self.upper.get(hi.upper(), "")]
        start, end = int(a["n"]), int(b["n"])
        if end < start or end - start > _MAX_RANGE:
            return [self.upper.get(lo.upper(), ""), self.upper.get(hi.upper(), "")]
        width = len(a["n"])
        return [self.upper.get(f"{a['pre']}{n:0{width}d}", "") for n in range(start, end + 1)]
