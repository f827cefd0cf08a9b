"""Walking a tasks.md whose phases are headings, over its top-level blocks.

``## Phase N: Name`` headings open phases (``_numbered`` handles files
without any). Which headings count:

* the usual level is the most common level of phase headings; one level up
  always counts, and so does one written deeper (``### Phase 0:`` then
  ``## PHASE 1:``) unless it sits in a section that is not a phase (a
  ``### Phase 3:`` under ``## Implementation Strategy`` is a plan, not a phase) or
  repeats the number of a phase at the usual level (an overview of the phases);
* ``Phase 3.1`` headings only in the older spec-kit layout where every numbered
  phase is dotted (numbered 1, 2, ... in file order); otherwise they are plain
  headings;
* a phase without a number (spec-kit's ``## Phase N: Polish``, ``## Phase: Setup``)
  is numbered after the phase before it, with a warning.

Any other heading at the phase's level or above closes the phase (Summary, Notes,
Implementation Strategy...); deeper headings are task headings (``#### Task 1.1:``),
gate headings (``#### Validation Gate``) or plain subsections whose tasks still
belong to the phase.
"""

from __future__ import annotations

from collections import Counter

from phasegate.activities.tasks_md._build import PhaseDraft, PhaseSink, TaskDraft, TaskSink
from phasegate.activities.tasks_md._text import (
    gate_phase_number,
    is_gate_title,
    is_non_phase_section,
    match_phase,
    parse_head,
    parse_label,
    phase_number,
    plain_heading,
)
from phasegate.activities.tasks_md._tree import (
    LISTS,
    Node,
    drain,
    first_line,
    item_text,
    list_texts,
)
from phasegate.domain.spec import ParseWarning


def phase_layout(nodes: list[Node]) -> tuple[int, bool] | None:
    """``(level, dotted)`` of the phase headings, or None if there are none.

    ``level`` is the most common heading level of phase headings. ``dotted`` is
    True only when every numbered phase heading is numbered like ``Phase 3.1``
    (older spec-kit files); otherwise dotted ones are ordinary headings.
    """
    found = [
        (node.level, match[0])
        for node in nodes
        if node.type == "heading" and (match := match_phase(node.content))
    ]
    if not found:
        return None
    numbered = any(phase_number(written) is not None for _, written in found)
    dotted = not numbered and any("." in written for _, written in found)
    levels = Counter(level for level, written in found if ("." in written) == dotted)
    if not levels:  # only placeholders ("Phase N") next to dotted ones: use them all
        levels = Counter(level for level, _ in found)
    return max(levels, key=lambda lvl: (levels[lvl], -lvl)), dotted


def warn_outside(node: Node, where: str, warnings: list[ParseWarning]) -> None:
    """Warn about checkbox items in a list that belongs to no phase."""
    for item in node.children:
        text, rest = item_text(item)
        if parse_head(first_line(text)).status is not None:
            warnings.append(
                ParseWarning(line=item.line, message=f"task-like item {where} was ignored")
            )
        for child in rest:
            if child.type in LISTS:
                warn_outside(child, where, warnings)


class PhaseHeadingWalker:
    """Walks a file whose phases are headings, usually at ``level``."""

    def __init__(self, level: int, dotted: bool, warnings: list[ParseWarning]):
        self.level = level
        self.dotted = dotted  # "Phase 3.1" headings, numbered 1, 2, ... in file order
        self.warnings = warnings
        self.phases: list[PhaseDraft] = []
        self.sink: PhaseSink | None = None  # None while outside any phase
        self.phase_level = level  # headings at this level or above close the phase
        self.task_sink: TaskSink | None = None  # under a "#### Task 1.1:" heading
        self.task_level = 0
        self.gate_target: PhaseDraft | None = None  # under a "#### Validation Gate" heading
        self.gate_level = 0
        self.section = ""  # the non-phase section we are in, for warnings
        self.in_section = False  # under a non-phase heading (the title does not count)
        self.warned_unnumbered = False
        self.main_numbers: set[int] = set()  # numbers of the phase headings at `level`

    def run(self, nodes: list[Node]) -> list[PhaseDraft]:
        """Walk the top-level blocks, draining ``nodes``; returns the phases found."""
        self.main_numbers = {
            number
            for node in nodes
            if node.type == "heading"
            and node.level <= self.level
            and (found := match_phase(node.content))
            and (number := phase_number(found[0])) is not None
        }
        for node in drain(nodes):
            if node.type == "heading":
                self.heading(node)
            elif self.gate_target is not None:
                self.gate_block(node)
            elif self.sink is None:
                if node.type in LISTS:
                    where = f"in section {self.section!r}" if self.phases else "before any phase"
                    warn_outside(node, where, self.warnings)
            elif self.task_sink is not None:
                self.task_sink.feed(node)
            else:
                self.sink.feed(node)
        return self.phases

    def heading(self, node: Node) -> None:
        """Open or close a phase, task or gate block."""
        level, text = node.level, node.content
        found = match_phase(text)
        if found and self.is_phase(found[0], level):
            self.open_phase(found[0], found[1], node.line, level)
            return
        if self.gate_target is not None and level > self.gate_level:
            return  # a sub-heading inside a gate block
        self.gate_target = None
        if is_gate_title(text) and self.open_gate(text, level):
            return
        if self.sink is None:
            self.section = plain_heading(text)
            self.in_section = self.in_section or level > 1 or bool(self.phases)
            return
        if level <= max(self.phase_level, self.level):
            self.sink = self.task_sink = None
            self.section = plain_heading(text)
            self.in_section = True
            return
        head = parse_head(text)
        if head.task_id is not None:
            task = self.sink.add_task(TaskDraft.from_head(head, node.line))
            self.task_sink, self.task_level = TaskSink(task, self.sink), level
        elif self.task_sink is not None and level > self.task_level:
            self.task_sink.feed(node)
        else:
            self.task_sink = None
            self.sink.pending = None

    def is_phase(self, written: str, level: int) -> bool:
        """Whether a heading that reads like a phase opens one here (see the module doc)."""
        numbered = phase_number(written) is not None or "." in written
        if numbered and ("." in written) != self.dotted:
            return False
        if level <= self.level:
            return True
        if phase_number(written) in self.main_numbers:
            return False  # "### Phase 1: Core (4 hours)" in an overview of the "## Phase 1:"s
        if self.sink is not None or not self.in_section:
            return True
        return not self.phases and not is_non_phase_section(self.section)

    def open_phase(self, written: str, name: str, line: int, level: int) -> None:
        """Start a new phase; a number used twice is kept but warned about."""
        number = self.number_for(written, line)
        for other in self.phases:
            if other.number == number:
                self.warnings.append(
                    ParseWarning(
                        line=line,
                        message=f"phase number {number} is used twice (first at line {other.line})",
                    )
                )
                break
        phase = PhaseDraft(number=number, name=name, line=line, written=written)
        self.phases.append(phase)
        self.sink = PhaseSink(phase, self.warnings)
        self.phase_level = level
        self.task_sink = self.gate_target = None

    def number_for(self, written: str, line: int) -> int:
        """The phase's number: as written, else by position, with a warning on why."""
        after = self.phases[-1].number + 1 if self.phases else 1
        if "." in written:
            if not self.phases:
                self.warn(
                    line,
                    f"phase numbers like {written!r} are not whole numbers; "
                    "the phases were numbered 1, 2, ... in file order",
                )
            return len(self.phases) + 1
        number = phase_number(written)
        if number is not None:
            return number
        if written:
            self.warn(line, f"phase {written!r} has no number; it was numbered {after}")
        elif not self.warned_unnumbered:
            self.warned_unnumbered = True
            self.warn(line, f"phases without a number were numbered in file order from {after}")
        return after

    def warn(self, line: int, message: str) -> None:
        self.warnings.append(ParseWarning(line=line, message=message))

    def open_gate(self, text: str, level: int) -> bool:
        """Start a gate block for the phase it names, else for the current phase."""
        number = gate_phase_number(text)
        target = next((p for p in self.phases if p.number == number), None)
        if target is None and self.sink is not None and level >= self.level:
            target = self.sink.phase
        if target is None:
            return False
        self.gate_target, self.gate_level, self.task_sink = target, level, None
        return True

    def gate_block(self, node: Node) -> None:
        """Lines of a gate heading's block: list items, or non-intro paragraph lines."""
        assert self.gate_target is not None
        gate = self.gate_target.gate
        if node.type in LISTS:
            gate.extend(list_texts(node))
        elif node.type == "paragraph":
            for line in node.content.split("\n"):
                label = parse_label(line)
                if label is not None and not label.value:
                    continue  # an intro line such as "Phase 1 Complete When:"
                gate.append(label.value if label and label.kind == "gate" else line.strip())
