"""Drafts and sinks: what the tasks.md walkers fill in, block by block.

A ``PhaseSink`` receives the blocks of one phase (paragraphs, lists, code) and
turns checkbox items into tasks, ``**Validation Gate:**`` blocks into gate items
and the text before the first task into the phase description. A ``TaskSink``
receives the blocks under one task (nested bullets, continuation paragraphs,
or everything under a ``#### Task 1.1:`` heading) and reads its metadata.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from phasegate.activities.tasks_md._text import (
    Head,
    Label,
    parse_head,
    parse_label,
    split_values,
    status_word,
)
from phasegate.activities.tasks_md._tree import (
    CODE,
    LISTS,
    Node,
    block_text,
    first_line,
    item_markdown,
    item_text,
    list_texts,
    one_line,
)
from phasegate.domain.spec import ParseWarning, SpecPhase, SpecTask, TaskStatus

# Labels whose values may follow as a list when the label line itself is empty.
_LIST_LABELS = ("deps", "reqs", "criteria", "desc", "gate")


def _paragraphs(parts: list[str]) -> str:
    return "\n\n".join([p for p in parts if p]).strip() if parts else ""  # most tasks have none


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values)) if len(values) > 1 else values


@dataclass(slots=True)
class TaskDraft:
    """A task being assembled; ``id`` None until the phase assigns ``<phase>.<k>``."""

    id: str | None
    name: str
    line: int
    status: TaskStatus = "todo"
    optional: bool = False
    parallel: bool = False
    stories: list[str] = field(default_factory=list)
    estimated_time: str = ""
    dependencies: list[str] = field(default_factory=list)
    criteria: list[str] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    desc: list[str] = field(default_factory=list)

    @classmethod
    def from_head(cls, head: Head, line: int, inherit: TaskStatus | None = None) -> TaskDraft:
        return cls(
            id=head.task_id,
            name=head.name or (f"Task {head.task_id}" if head.task_id else ""),
            line=line,
            status=head.status or inherit or "todo",
            optional=head.optional,
            parallel=head.parallel,
            stories=list(head.stories),
        )

    def to_model(self) -> SpecTask:
        return SpecTask(
            id=self.id or "",
            name=self.name or f"Task {self.id}",
            description=_paragraphs(self.desc),
            status=self.status,
            optional=self.optional,
            parallel=self.parallel,
            stories=_unique(self.stories),
            estimated_time=self.estimated_time,
            dependencies=_unique(self.dependencies),
            acceptance_criteria=_unique(self.criteria),
            requirements=_unique(self.requirements),
            line=self.line,
        )


@dataclass(slots=True)
class PhaseDraft:
    """A phase being assembled, numbered as written."""

    number: int
    name: str
    line: int
    written: str = ""  # the number as written ("7", "3.1", "N", ""): SpecPhase.written_number
    desc: list[str] = field(default_factory=list)
    duration: str = ""
    tasks: list[TaskDraft] = field(default_factory=list)
    gate: list[str] = field(default_factory=list)
    by_id: dict[str, TaskDraft] = field(default_factory=dict)

    def to_model(self) -> SpecPhase:
        self._assign_ids()
        return SpecPhase(
            number=self.number,
            written_number=self.written,
            name=self.name,
            description=_paragraphs(self.desc),
            estimated_duration=self.duration,
            tasks=[t.to_model() for t in self.tasks],
            validation_gate=[g for g in self.gate if g],
            line=self.line,
        )

    def _assign_ids(self) -> None:
        """Tasks written without an id get ``<phase>.<k>`` (k = position), unless taken."""
        spare = len(self.tasks)
        for k, task in enumerate(self.tasks, start=1):
            if task.id is not None:
                continue
            task.id = f"{self.number}.{k}"
            while task.id in self.by_id:  # written ids win: "- [ ] 1. Group" over its "1.1"
                spare += 1
                task.id = f"{self.number}.{spare}"
            self.by_id[task.id] = task


class PhaseSink:
    """Receives the blocks of one phase, in order."""

    def __init__(self, phase: PhaseDraft, warnings: list[ParseWarning]):
        self.phase = phase
        self.warnings = warnings
        self.pending: str | None = None  # a label line waiting for the next list

    def feed(self, node: Node) -> None:
        """Take one block that belongs to the phase (not a heading)."""
        pending, self.pending = self.pending, None
        if node.type == "paragraph":
            self.pending = self.lines(node.content.split("\n"))
        elif node.type in LISTS:
            if pending == "gate":
                self.phase.gate.extend(list_texts(node))
            else:
                self.collect(node)
        elif node.type in (*CODE, "blockquote") and not self.phase.tasks:
            self.phase.desc.append(block_text(node))

    def lines(self, lines: list[str]) -> str | None:
        """Phase-level text lines: duration and gate labels, else description."""
        pending: str | None = None
        kept: list[str] = []
        for line in lines:
            label = parse_label(line)
            kind = label.kind if label else None
            pending = None
            if label is not None and kind == "gate":
                self.phase.gate.append(label.value)
                pending = "gate"
            elif label is not None and kind == "time":
                self.phase.duration = label.value
            elif line.strip():
                kept.append(line.strip())
        if kept and not self.phase.tasks:
            self.phase.desc.append("\n".join(kept))
        return pending

    def collect(self, node: Node, describe: bool = True) -> None:
        """A list in the phase: task items become tasks, others description or gate.

        Args:
            node: The list block.
            describe: Keep non-task items as description (off for nested lists,
                whose text the parent item already carries).
        """
        kept: list[str] = []
        for item in node.children:
            text, rest = item_text(item)
            head, more = split_head(text)
            if head.is_task:
                self.task_from_item(item, split=(head, more))
                continue
            label = parse_label(first_line(text))
            if label is not None and label.kind == "gate":
                self.phase.gate.append(label.value)
                self.phase.gate.extend(t for c in rest if c.type in LISTS for t in list_texts(c))
            elif label is not None and label.kind == "time":
                self.phase.duration = label.value
            else:
                for child in rest:
                    if child.type in LISTS:
                        self.collect(child, describe=False)
                if describe and not self.phase.tasks:
                    kept.extend(item_markdown(item))
        if kept:
            self.phase.desc.append("\n".join(kept))

    def task_from_item(
        self,
        item: Node,
        inherit: TaskStatus | None = None,
        split: tuple[Head, list[str]] | None = None,
    ) -> TaskDraft:
        """Make a task of a list item; nested blocks become its metadata and description.

        Args:
            item: The ``list_item`` block.
            inherit: Status for an item without a checkbox (its parent's).
            split: ``split_head`` of the item's text, if the caller already has it.
        """
        text, rest = item_text(item)
        head, more = split or split_head(text)
        task = self.add_task(TaskDraft.from_head(head, item.line, inherit))
        if more or rest:  # most items are one line with nothing under them
            sink = TaskSink(task, self)
            sink.pending = sink.lines(more)
            for child in rest:
                sink.feed(child)
        return task

    def add_task(self, task: TaskDraft) -> TaskDraft:
        """Append a task; a written id seen before in the phase merges into the first."""
        if task.id is None:  # numbered when the phase is finished, see PhaseDraft
            self.phase.tasks.append(task)
            return task
        first = self.phase.by_id.get(task.id)
        if first is None:
            self.phase.by_id[task.id] = task
            self.phase.tasks.append(task)
            return task
        self.warnings.append(
            ParseWarning(
                line=task.line,
                message=(
                    f"duplicate task id {task.id!r} in phase {self.phase.number} (first at line "
                    f"{first.line}); its details were merged into the first"
                ),
            )
        )
        first.parallel = first.parallel or task.parallel
        first.optional = first.optional or task.optional
        first.stories.extend(task.stories)
        return first


def _is_meta(label: Label | None) -> bool:
    return label is not None and label.kind is not None


class TaskSink:
    """Receives the blocks under one task and reads its metadata."""

    def __init__(self, task: TaskDraft, phase: PhaseSink):
        self.task = task
        self.phase = phase
        self.pending: str | None = None

    def feed(self, node: Node) -> None:
        """Take one block under the task (nested list, paragraph, code, sub-heading)."""
        pending, self.pending = self.pending, None
        if node.type == "paragraph":
            self.pending = self.lines(node.content.split("\n"))
        elif node.type in LISTS:
            if pending is not None:
                self.fill(pending, list_texts(node))
                return
            kept: list[str] = []
            for item in node.children:
                kept.extend(self.item(item))
            self.pending = None
            if kept:
                self.task.desc.append("\n".join(kept))
        elif node.type in (*CODE, "blockquote", "heading"):
            self.task.desc.append(block_text(node))

    def lines(self, lines: list[str]) -> str | None:
        """Text lines under the task: metadata labels, else description."""
        pending: str | None = None
        kept: list[str] = []
        for line in lines:
            label = parse_label(line)
            if label is None or label.kind is None:
                if line.strip():
                    kept.append(line.strip())
                pending = None
            else:
                pending = self.apply(label)
        if kept:
            self.task.desc.append("\n".join(kept))
        return pending

    def apply(self, label: Label) -> str | None:
        """Store one metadata value; returns the label kind if a list should follow."""
        kind, value = label.kind, label.value
        if kind == "time":
            self.task.estimated_time = value
        elif kind == "status":
            self.task.status = status_word(value) or self.task.status
        elif kind is not None and value:
            self.fill(kind, [value])
        return kind if kind in _LIST_LABELS and not value else None

    def fill(self, kind: str, values: list[str]) -> None:
        """Add values to the field a label named."""
        if kind == "deps":
            self.task.dependencies.extend(v for value in values for v in split_values(value))
        elif kind == "reqs":
            self.task.requirements.extend(v for value in values for v in split_values(value))
        elif kind == "criteria":
            self.task.criteria.extend(values)
        elif kind == "gate":
            self.phase.phase.gate.extend(values)
        else:
            self.task.desc.extend(values)

    def item(self, item: Node) -> list[str]:
        """A nested bullet: a sub-task with its own id, metadata, or description lines.

        Returns:
            The description lines the item contributes (empty for metadata).
        """
        text, rest = item_text(item)
        lines = text.split("\n")
        label = parse_label(lines[0])
        if label is None or label.kind is None:
            head = parse_head(lines[0])
            if head.is_task and head.task_id is not None:
                self.phase.task_from_item(item)  # explicit ids nest flat: Kiro "- [ ] 2.1"
                return []
            return item_markdown(item)
        pending = self.apply(label)
        if len(lines) > 1:
            pending = self.lines(lines[1:]) or pending
        self.pending = pending
        for child in rest:
            self.feed(child)
        self.pending = None
        return []


def ordinal_of(item: Node, list_type: str, head: Head) -> int | None:
    """The number of a top-level item: ``3.`` marker of an ordered list, or ``- [ ] 3.``."""
    if list_type == "ordered_list" and item.info.isdigit():
        return int(item.info)
    return head.ordinal


def split_head(text: str) -> tuple[Head, list[str]]:
    """Head of an item's text (the name may wrap) and the metadata lines after it."""
    if "\n" not in text:
        return parse_head(text), []
    lines = text.split("\n")
    n = 1
    while n < len(lines) and not _is_meta(parse_label(lines[n])):
        n += 1
    return parse_head(one_line("\n".join(lines[:n]))), lines[n:]
