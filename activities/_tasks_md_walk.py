"""The two ways a tasks.md is laid out, each walked over the top-level blocks.

* ``walk_phase_headings``: ``## Phase N: Name`` headings open phases; any other
  heading at the same or a higher level closes the current phase (Summary,
  Notes, Implementation Strategy...); deeper headings are task headings
  (``#### Task 1.1: Name``), gate headings (``#### Validation Gate``) or plain
  subsections whose tasks still belong to the phase.
* ``walk_numbered``: no phase headings at all; each numbered top-level item
  (``1. Set up`` or Kiro's ``- [ ] 1. Set up``) is a phase and its nested items
  are the tasks.
"""

from __future__ import annotations

from collections import Counter

from phasegate.activities._tasks_md_build import (
    PhaseDraft,
    PhaseSink,
    TaskDraft,
    TaskSink,
    ordinal_of,
    split_head,
)
from phasegate.activities._tasks_md_text import (
    Head,
    gate_phase_number,
    is_gate_title,
    is_non_phase_section,
    match_phase,
    parse_head,
    parse_label,
    plain_heading,
)
from phasegate.activities._tasks_md_tree import (
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
    True only when every phase heading is numbered like ``Phase 3.1`` (older
    spec-kit files); otherwise dotted ones are ordinary headings.
    """
    found = [
        (node.level, "." in match[0])
        for node in nodes
        if node.type == "heading" and (match := match_phase(node.content))
    ]
    if not found:
        return None
    dotted = all(is_dotted for _, is_dotted in found)
    levels = Counter(level for level, is_dotted in found if is_dotted == dotted)
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
    """Walks a file whose phases are headings at ``level`` (or shallower)."""

    def __init__(self, level: int, dotted: bool, warnings: list[ParseWarning]):
        self.level = level
        self.dotted = dotted  # "Phase 3.1" headings, numbered 1, 2, ... in file order
        self.warnings = warnings
        self.phases: list[PhaseDraft] = []
        self.sink: PhaseSink | None = None  # None while outside any phase
        self.task_sink: TaskSink | None = None  # under a "#### Task 1.1:" heading
        self.task_level = 0
        self.gate_target: PhaseDraft | None = None  # under a "#### Validation Gate" heading
        self.gate_level = 0
        self.section = ""  # the non-phase section we are in, for warnings

    def run(self, nodes: list[Node]) -> list[PhaseDraft]:
        """Walk the top-level blocks, draining ``nodes``; returns the phases found."""
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
        if found and level <= self.level and ("." in found[0]) == self.dotted:
            self.open_phase(found[0], found[1], node.line)
            return
        if self.gate_target is not None and level > self.gate_level:
            return  # a sub-heading inside a gate block
        self.gate_target = None
        if is_gate_title(text) and self.open_gate(text, level):
            return
        if self.sink is None:
            self.section = plain_heading(text)
            return
        if level <= self.level:
            self.sink = self.task_sink = None
            self.section = plain_heading(text)
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

    def open_phase(self, written: str, name: str, line: int) -> None:
        """Start a new phase; a number used twice is kept but warned about."""
        number = len(self.phases) + 1 if self.dotted else int(written)
        if self.dotted and not self.phases:
            self.warnings.append(
                ParseWarning(
                    line=line,
                    message=(
                        f"phase numbers like {written!r} are not whole numbers; "
                        "the phases were numbered 1, 2, ... in file order"
                    ),
                )
            )
        for other in self.phases:
            if other.number == number:
                self.warnings.append(
                    ParseWarning(
                        line=line,
                        message=f"phase number {number} is used twice (first at line {other.line})",
                    )
                )
                break
        phase = PhaseDraft(number=number, name=name, line=line)
        self.phases.append(phase)
        self.sink = PhaseSink(phase, self.warnings)
        self.task_sink = self.gate_target = None

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


def walk_numbered(nodes: list[Node], title: str, warnings: list[ParseWarning]) -> list[PhaseDraft]:
    """Phases from numbered top-level items of a file without phase headings.

    Lists under Notes/Summary/Overview-like headings are skipped. If no item is
    numbered but there are checkbox items, the whole checklist is one phase.
    """
    phases: list[PhaseDraft] = []
    loose: list[Node] = []  # top-level task items without a number
    lists = _eligible_lists(nodes)
    for lst in lists:
        for item in lst.children:
            head, _ = split_head(item_text(item)[0])
            number = ordinal_of(item, lst.type, head)
            if number is None:
                if head.is_task:
                    loose.append(item)
                continue
            phases.append(_numbered_phase(item, number, head, warnings))
    if phases:
        for item in loose:
            warnings.append(
                ParseWarning(line=item.line, message="unnumbered top-level task ignored")
            )
        return phases
    if not loose:
        return []
    phase = PhaseDraft(number=1, name=title or "Tasks", line=loose[0].line)
    warnings.append(
        ParseWarning(
            line=phase.line,
            message="no phase headings or numbered items; the checklist was read as one phase",
        )
    )
    sink = PhaseSink(phase, warnings)
    for lst in lists:
        sink.collect(lst)
    return [phase]


def _eligible_lists(nodes: list[Node]) -> list[Node]:
    lists: list[Node] = []
    skip_level = 0
    for node in nodes:
        if node.type == "heading":
            if skip_level and node.level > skip_level:
                continue
            skip_level = node.level if is_non_phase_section(node.content) else 0
        elif not skip_level and node.type in LISTS:
            lists.append(node)
    return lists


def _numbered_phase(
    item: Node, number: int, head: Head, warnings: list[ParseWarning]
) -> PhaseDraft:
    """A numbered item as a phase: task sub-items, else plain sub-items, else itself."""
    phase = PhaseDraft(number=number, name=head.name or f"Phase {number}", line=item.line)
    sink = PhaseSink(phase, warnings)
    text, rest = item_text(item)
    subs = [sub for child in rest if child.type in LISTS for sub in child.children]
    sub_heads = [parse_head(first_line(item_text(sub)[0])) for sub in subs]
    if any(h.is_task for h in sub_heads):
        sink.lines(split_head(text)[1])
        for child in rest:
            sink.feed(child)
    elif any(not _is_label(sub) for sub in subs):
        sink.lines(split_head(text)[1])
        for child in rest:
            if child.type not in LISTS:
                sink.feed(child)
                continue
            for sub in child.children:
                if _is_label(sub):
                    _phase_label_item(phase, sub)
                else:
                    sink.task_from_item(sub, inherit=head.status)
    else:
        sink.task_from_item(item)
    return phase


def _is_label(item: Node) -> bool:
    label = parse_label(first_line(item_text(item)[0]))
    return label is not None and label.kind is not None


def _phase_label_item(phase: PhaseDraft, item: Node) -> None:
    """A metadata bullet directly under a numbered phase item (e.g. Kiro's _Requirements_)."""
    text = item_text(item)[0]
    label = parse_label(first_line(text))
    if label is not None and label.kind == "time":
        phase.duration = label.value
    elif label is not None and label.kind == "gate":
        phase.gate.append(label.value)
    else:
        phase.desc.append(text.strip())
