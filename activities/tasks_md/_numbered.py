"""Files without phase headings: numbered items, or failing that sections, are the phases.

* Kiro / Agent OS: ``- [ ] 1. Set up`` (or a plain ``1. Set up``) opens phase 1. Its
  nested items are its tasks, and so are the items that follow it at the same level
  with ids ``1.1``, ``1.2``, ...: Kiro writes subtasks as siblings of their parent.
  A numbered item with neither is a phase of one task, itself.
* A plain numbered list of instructions in a checklist file ("1. Read the spec",
  "2. Run the tests") holds no task and is not a phase.
* No numbered items, but two or more sections each over a checklist (OpenSpec's
  ``## 1. Setup`` with ``- [ ] 1.1 ...``): each section is a phase.
* Otherwise a checklist is read as one phase, with a warning.

Lists under Notes/Summary/Overview-like headings are never read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from phasegate.activities.tasks_md._build import PhaseDraft, PhaseSink, ordinal_of, split_head
from phasegate.activities.tasks_md._text import (
    Head,
    is_non_phase_section,
    parse_head,
    parse_label,
    plain_heading,
)
from phasegate.activities.tasks_md._tree import LISTS, Node, first_line, item_text
from phasegate.domain.spec import ParseWarning


@dataclass(slots=True)
class _Item:
    """A top-level list item and what its first line says."""

    node: Node
    head: Head
    number: int | None  # "1." / "- [ ] 1.": the phase it opens
    lst: Node  # the top-level list it belongs to
    section: Node | None  # the heading that list sits under
    subtasks: list[_Item] = field(default_factory=list)  # Kiro's sibling "1.1" items

    @property
    def parent_number(self) -> int | None:
        """``1`` for an item with id ``1.2``: the numbered item it is a subtask of."""
        tid = self.head.task_id
        if tid is None or "." not in tid or not tid[0].isdigit():
            return None
        return int(tid.split(".", 1)[0])


def walk_numbered(nodes: list[Node], title: str, warnings: list[ParseWarning]) -> list[PhaseDraft]:
    """Phases from a file without phase headings (see the module docstring)."""
    lists = _eligible_lists(nodes)
    items = [
        _Item(node, head, ordinal_of(node, list_type, head), lst, section)
        for section, lst in lists
        for node, list_type in _top_items(lst)
        for head in (split_head(item_text(node)[0])[0],)
    ]
    checklist = any(item.head.status is not None for item in items)
    if checklist:  # numbered lists with no task in them are instructions, not phases
        keep = {id(lst) for _, lst in lists if _has_task(lst)}
        items = [item for item in items if id(item.lst) in keep]
    groups: list[_Item] = []
    loose: list[_Item] = []
    for item in items:
        if item.number is not None:
            groups.append(item)
        elif not item.head.is_task or (checklist and item.head.status is None):
            continue  # in a checklist, "- T2 → T3" is a note, not a task
        elif groups and item.parent_number is not None:
            _parent_of(item, groups, warnings).subtasks.append(item)
        else:
            loose.append(item)
    if groups:
        for item in loose:
            warnings.append(
                ParseWarning(line=item.node.line, message="unnumbered top-level task ignored")
            )
        return [_numbered_phase(group, warnings) for group in groups]
    if not loose:
        return []
    # Lists the fallbacks read: those holding the tasks, and prose lists with no task at all.
    with_tasks = {id(item.lst) for item in loose}
    lists = [(sec, lst) for sec, lst in lists if id(lst) in with_tasks or not _has_task(lst)]
    return _section_phases(loose, lists, warnings) or _one_phase(loose, lists, title, warnings)


def _eligible_lists(nodes: list[Node]) -> list[tuple[Node | None, Node]]:
    """Top-level lists with the heading above each, skipping Notes-like sections."""
    lists: list[tuple[Node | None, Node]] = []
    skip_level = 0
    section: Node | None = None
    for node in nodes:
        if node.type == "heading":
            if skip_level and node.level > skip_level:
                continue
            skip_level = node.level if is_non_phase_section(node.content) else 0
            section = node
        elif not skip_level and node.type in LISTS:
            lists.append((section, node))
    return lists


def _top_items(lst: Node) -> Iterator[tuple[Node, str]]:
    """``(item, list type)`` of a list; an empty item wrapping a list ("- - [x] 5.3") is opened."""
    for node in lst.children:
        text, rest = item_text(node)
        if not text.strip() and rest and all(child.type in LISTS for child in rest):
            for child in rest:
                yield from _top_items(child)
        else:
            yield node, lst.type


def _has_task(node: Node) -> bool:
    """True if a list holds a task-like item at any depth."""
    for item in node.children:
        text, rest = item_text(item)
        if parse_head(first_line(text)).is_task:
            return True
        if any(child.type in LISTS and _has_task(child) for child in rest):
            return True
    return False


def _parent_of(item: _Item, groups: list[_Item], warnings: list[ParseWarning]) -> _Item:
    """The numbered item a sibling "2.1" belongs to: the last one numbered 2, else the last."""
    for group in reversed(groups):
        if group.number == item.parent_number:
            return group
    last = groups[-1]
    warnings.append(
        ParseWarning(
            line=item.node.line,
            message=(
                f"task {item.head.task_id} follows item {last.number} and no item numbered "
                f"{item.parent_number}; it was added to phase {last.number}"
            ),
        )
    )
    return last


def _numbered_phase(group: _Item, warnings: list[ParseWarning]) -> PhaseDraft:
    """A numbered item as a phase: nested tasks and sibling subtasks, else plain sub-items."""
    number, head, item = group.number, group.head, group.node
    assert number is not None
    phase = PhaseDraft(
        number=number, name=head.name or f"Phase {number}", line=item.line, written=str(number)
    )
    sink = PhaseSink(phase, warnings)
    text, rest = item_text(item)
    subs = [sub for child in rest if child.type in LISTS for sub in child.children]
    if any(parse_head(first_line(item_text(sub)[0])).is_task for sub in subs):
        sink.lines(split_head(text)[1])
        for child in rest:
            sink.feed(child)
    elif group.subtasks:  # Kiro: the item's own bullets describe the phase
        sink.lines(split_head(text)[1])
        for child in rest:
            if child.type in LISTS:
                for sub in child.children:
                    _phase_label_item(phase, sub)
            else:
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
    for subtask in group.subtasks:
        sink.task_from_item(subtask.node, split=split_head(item_text(subtask.node)[0]))
    return phase


def _section_phases(
    loose: list[_Item], lists: list[tuple[Node | None, Node]], warnings: list[ParseWarning]
) -> list[PhaseDraft]:
    """One phase per section heading over a checklist, if there are two or more such."""
    sections: dict[int, Node] = {}
    for item in loose:
        if item.section is None or item.section.level < 2:
            return []  # tasks under the title or no heading: not sections
        sections.setdefault(id(item.section), item.section)
    if len(sections) < 2:
        return []
    heads = {key: split_head(plain_heading(node.content))[0] for key, node in sections.items()}
    in_heading = [heads[key].ordinal for key in sections]  # "## 1. Setup"
    by_ids = [_common_parent(loose, key) for key in sections]  # "- [ ] 1.1" ... under it
    numbers: list[int | None]
    if all(n is not None for n in in_heading):
        numbers = in_heading
    elif all(n is not None for n in by_ids) and len(set(by_ids)) == len(by_ids):
        numbers = by_ids  # each section's tasks share their own N
    else:
        numbers = list(range(1, len(sections) + 1))
    phases: list[PhaseDraft] = []
    for (key, node), number in zip(sections.items(), numbers, strict=True):
        assert number is not None
        name = heads[key].name or plain_heading(node.content)
        written = str(number) if heads[key].ordinal is not None else ""
        phase = PhaseDraft(number=number, name=name, line=node.line, written=written)
        sink = PhaseSink(phase, warnings)
        for section, lst in lists:
            if section is node:
                sink.collect(lst)
        phases.append(phase)
    return phases


def _common_parent(loose: list[_Item], section_key: int) -> int | None:
    """The N all tasks of a section share as ids ``N.M``, if they do."""
    parents = {item.parent_number for item in loose if id(item.section) == section_key}
    return parents.pop() if len(parents) == 1 else None


def _one_phase(
    loose: list[_Item],
    lists: list[tuple[Node | None, Node]],
    title: str,
    warnings: list[ParseWarning],
) -> list[PhaseDraft]:
    phase = PhaseDraft(number=1, name=title or "Tasks", line=loose[0].node.line)
    warnings.append(
        ParseWarning(
            line=phase.line,
            message="no phase headings or numbered items; the checklist was read as one phase",
        )
    )
    sink = PhaseSink(phase, warnings)
    for _, lst in lists:
        sink.collect(lst)
    return [phase]


def _is_label(item: Node) -> bool:
    label = parse_label(first_line(item_text(item)[0]))
    return label is not None and label.kind is not None


def _phase_label_item(phase: PhaseDraft, item: Node) -> None:
    """A bullet directly under a numbered phase item: duration, gate, else description."""
    text = item_text(item)[0]
    label = parse_label(first_line(text))
    if label is not None and label.kind == "time":
        phase.duration = label.value
    elif label is not None and label.kind == "gate":
        phase.gate.append(label.value)
    else:
        phase.desc.append(text.strip())
