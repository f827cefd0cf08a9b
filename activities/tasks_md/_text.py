"""String helpers for the tasks.md parser: each works on ONE heading or inline text.

Structure (what is a heading, a list item, a code block) comes from markdown-it's
token stream in ``_walk``; these helpers only read the text of a single
heading or list item: checkbox state, task id, ``[P]``/``[USn]`` markers,
``Label: value`` metadata and the phase-heading pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from phasegate.domain.spec import TaskStatus

_STATES: dict[str, TaskStatus] = {
    " ": "todo",
    "": "todo",
    "x": "done",
    "X": "done",
    "-": "in_progress",
    "~": "skipped",
}
_CHECKBOX = re.compile(r"\[(?P<state>[ xX~-]?)\](?P<star>\*)?(?=\s|$)\s*")
# "Task 1.1", "Task T001", "Task 3": the word Task makes any digit-bearing token an id.
_TASK_WORD_ID = re.compile(
    r"task\s+(?P<id>[A-Za-z]{0,4}-?\d[\w.-]*)\.?(?P<star>\*)?(?:\s*[:–—-]\s*|\s+|$)", re.IGNORECASE
)
# Bare ids: spec-kit "T001" (also "T003.5", "T072b", legacy "T-001"), "P1-T2", dotted "1.1".
_BARE_ID = re.compile(
    r"(?P<id>P\d+-T\d+|T-?\d{1,6}(?:\.\d{1,4})*[a-z]?|\d+(?:\.\d+)+)\.?(?P<star>\*)?(?=[\s:]|$)[\s:]*"
)
_ORDINAL = re.compile(r"(?P<n>\d{1,9})[.)](?:\s+|$)")
_RANGE = re.compile(r"\d+\s*[–—-]\s*\d+")
# "[P]" / "[US1]", also written as code ("`[P]`"); leading, or trailing after the name.
_MARKER = re.compile(r"`?\[(?P<m>P|US\d+)\]`?\s*")
_TRAILING_MARKER = re.compile(r"\s+`?\[(?P<m>P|US\d+)\]`?$")
# "Phase 2", "PHASE 2", "Phase 3.1", spec-kit's placeholder "Phase N", roman "Phase II", no
# number at all ("Phase: Setup"); also 阶段/階段/フェーズ/Fase. The number is kept as written.
_ROMAN = r"(?-i:(?=[IVX])X{0,3}(?:IX|IV|V?I{0,3}))"
_PHASE = re.compile(
    r"(?:phase|阶段|階段|フェーズ|fase)"
    r"(?:\s*(?P<num>\d{1,9}(?:\.\d{1,9})?)|\s+(?P<tag>" + _ROMAN + r"|(?-i:[A-Z])))?(?![\w.])"
    r"(?:\s*(?P<sep>[:：.–—-])\s*(?P<name>.*?))?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_ROMAN_RE = re.compile(_ROMAN)
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10}
_GATE = re.compile(
    r"(?:phase\s+\d+\s+)?(?:validation\s+gates?|checkpoints?|quality\s+gates?)\b", re.IGNORECASE
)
_LABEL = re.compile(
    r"(?P<o>\*\*|__|\*|_)?(?P<label>[A-Za-z][\w &/'()-]{0,48}?)\s*(?P<c>\*\*|__|\*|_)?\s*:"
    r"(?P<c2>\*\*|__|\*|_)?(?:\s+|$)(?P<value>.*)$",
    re.DOTALL,
)
_LABEL_KINDS: dict[str, str] = {
    "estimated time": "time",
    "estimate": "time",
    "estimated": "time",
    "time": "time",
    "time estimate": "time",
    "estimated effort": "time",
    "effort": "time",
    "estimated duration": "time",
    "duration": "time",
    "dependencies": "deps",
    "dependency": "deps",
    "depends on": "deps",
    "depends": "deps",
    "deps": "deps",
    "blocked by": "deps",
    "acceptance criteria": "criteria",
    "acceptance": "criteria",
    "done when": "criteria",
    "requirements": "reqs",
    "requirements satisfied": "reqs",
    "requirement": "reqs",
    "validates": "reqs",  # Kiro property-test tasks: **Validates: Requirements 1.6**
    "description": "desc",
    "details": "desc",
    "status": "status",
}
_NONE_VALUES = {"none", "n/a", "na", "-", "—", "nothing", "no dependencies", "(none)", "null"}
_STATUS_WORDS: dict[str, TaskStatus] = {
    "done": "done",
    "complete": "done",
    "completed": "done",
    "✅": "done",
    "in progress": "in_progress",
    "in-progress": "in_progress",
    "started": "in_progress",
    "skipped": "skipped",
    "todo": "todo",
    "not started": "todo",
    "pending": "todo",
}
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_GATE_PHASE = re.compile(r"phase\s+(\d{1,9})(?![.\d])", re.IGNORECASE)
_VALUE_SEP = re.compile(r"\s*[,;]\s*|\s+and\s+")
_TASK_WORD = re.compile(r"^(?:tasks?|requirements?)\s+", re.IGNORECASE)
_NON_PHASE_SECTION = re.compile(
    r"\b(summary|notes?|dependenc|execution order|implementation strategy|parallel|risks?"
    r"|references?|appendix|overview|format|conventions|glossary|questions|success criteria"
    r"|time estimates?|changelog|legend)",
    re.IGNORECASE,
)


@dataclass(slots=True)
class Head:
    """What the first line of a task (list item or heading) says about it."""

    name: str
    status: TaskStatus | None = None
    optional: bool = False
    task_id: str | None = None
    strong_id: bool = False  # "Task X", "T001", "P1-T2": a task even without a checkbox
    ordinal: int | None = None  # "1." list numbering written in the text
    parallel: bool = False
    stories: list[str] = field(default_factory=list)

    @property
    def is_task(self) -> bool:
        """A checkbox, or an id strong enough to mean "task" without one."""
        return self.status is not None or self.strong_id


@dataclass(slots=True)
class Label:
    """A ``Label: value`` line; ``kind`` is None for labels the parser does not know."""

    kind: str | None
    value: str


def strip_bold(text: str) -> str:
    """Remove ``**`` markers outside code spans (ids and names are compared without them)."""
    if "**" not in text:
        return text
    return _outside_code(text, lambda part: part.replace("**", ""))


def plain_heading(text: str) -> str:
    """Heading text for matching: emphasis markers outside code dropped, spaces collapsed."""
    if "*" in text:
        text = _outside_code(text, lambda part: part.replace("**", "").replace("*", " "))
    return " ".join(text.split())


def _outside_code(text: str, change: Callable[[str], str]) -> str:
    if "`" not in text:
        return change(text)
    parts = _CODE_SPAN.split(text)
    return "".join(p if p.startswith("`") else change(p) for p in parts)


def match_phase(text: str) -> tuple[str, str] | None:
    """``(number, name)`` if ``text`` is a phase heading such as ``Phase 2: Build``.

    ``number`` is as written: ``"2"``, ``"3.1"`` in the older spec-kit layout
    (``## Phase 3.1: Setup``), a roman ``"II"``, a placeholder letter (spec-kit's
    ``## Phase N: Polish``) or ``""`` (``## Phase: Setup``); see ``phase_number``.
    Ranges ("Phase 1-3") are not phases; a phase without a digit needs a name.
    """
    m = _PHASE.match(plain_heading(text))
    if m is None:
        return None
    num, sep, name = m["num"] or m["tag"] or "", m["sep"], (m["name"] or "").strip()
    if sep and sep not in ":：" and name[:1].isdigit():
        return None
    if not m["num"] and (not name or (not num and sep not in ":：")):  # "Phase-out plan"
        return None
    return num, name or f"Phase {num}"


def phase_number(written: str) -> int | None:
    """The whole number a phase heading's written number stands for, if any.

    ``"7"`` -> 7, roman ``"IV"`` -> 4; None for a placeholder letter (``"N"``),
    no number (``""``) and dotted numbers (``"3.1"``), which are numbered by position.
    """
    if written.isdigit():
        return int(written)
    if not written or _ROMAN_RE.fullmatch(written) is None:
        return None
    values = [_ROMAN_VALUES[c] for c in written]
    return sum(-v if v < nxt else v for v, nxt in zip(values, [*values[1:], 0], strict=True))


def is_gate_title(text: str) -> bool:
    """True for "Validation Gate", "Checkpoint", "Phase 2 Validation Gate" and the like."""
    return _GATE.match(plain_heading(text)) is not None


def gate_phase_number(text: str) -> int | None:
    """The phase a gate heading names ("Phase 2 Validation Gate" -> 2), if any."""
    m = _GATE_PHASE.search(plain_heading(text))
    return int(m.group(1)) if m else None


def is_non_phase_section(text: str) -> bool:
    """True for headings like Notes, Summary, Dependencies, Implementation Strategy."""
    return _NON_PHASE_SECTION.search(text) is not None


def parse_head(text: str) -> Head:
    """Split a task's first line into checkbox, id, markers and name.

    Args:
        text: Raw inline text, e.g. ``[ ]* 2.1 Write tests`` or ``[x] **Task 1.1**: Name``.

    Returns:
        The parsed head; ``task_id`` is None when the text carries no id.
    """
    s = text.strip()
    head = Head(name="")
    m = _CHECKBOX.match(s)
    if m:
        head.status = _STATES[m["state"]]
        head.optional = bool(m["star"])
        s = s[m.end() :]
    s = strip_bold(s).strip()
    s = _take_id(s, head)
    while (m := _MARKER.match(s)) is not None:
        _mark(head, m["m"])
        s = s[m.end() :]
    name = s.strip().rstrip(":").strip()
    if name.endswith("*") and not name.startswith("*"):
        head.optional = True
        name = name[:-1].rstrip()
    if name.endswith("]"):  # "Create project structure [P]": markers after the name
        trailing: list[str] = []
        while (m := _TRAILING_MARKER.search(name)) is not None:
            trailing.append(m["m"])
            name = name[: m.start()]
        for marker in reversed(trailing):
            _mark(head, marker)
    head.name = name
    return head


def _mark(head: Head, marker: str) -> None:
    if marker == "P":
        head.parallel = True
    else:
        head.stories.append(marker)


def _take_id(s: str, head: Head) -> str:
    """Record the id (or "1." ordinal) at the start of ``s``; returns the rest."""
    m = _TASK_WORD_ID.match(s)
    if m is not None and not _RANGE.fullmatch(m["id"]):
        head.task_id, head.strong_id = m["id"].rstrip(".-"), True
    elif (m := _BARE_ID.match(s)) is not None:
        head.task_id, head.strong_id = m["id"], not m["id"][0].isdigit()
    else:
        ordinal = _ORDINAL.match(s)
        if ordinal is None:
            return s
        head.ordinal = int(ordinal["n"])
        return s[ordinal.end() :]
    head.optional = head.optional or bool(m["star"])
    return s[m.end() :]


def parse_label(line: str) -> Label | None:
    """Read ``**Label**: value``, ``**Label:** value``, ``Label: value`` or ``_Label: value_``."""
    m = _LABEL.match(line.strip())
    if m is None:
        return None
    value = m["value"].strip()
    opener = m["o"]
    if opener and not m["c"] and not m["c2"] and value.endswith(opener):
        value = value[: -len(opener)].rstrip()
    key = " ".join(m["label"].lower().split())
    kind = "gate" if _GATE.fullmatch(key) else _LABEL_KINDS.get(key)
    return Label(kind=kind, value=value)


def strip_checkbox(text: str) -> str:
    """Item text without a leading ``[ ]``/``[x]`` checkbox (for gates and criteria)."""
    m = _CHECKBOX.match(text.strip())
    return text.strip()[m.end() :].strip() if m else text.strip()


def split_values(value: str) -> list[str]:
    """``"1.1, 2.3"`` -> ``["1.1", "2.3"]``; markup and a leading "Task" / "Requirements" are dropped."""
    out: list[str] = []
    for part in _VALUE_SEP.split(value):
        part = _TASK_WORD.sub("", part.strip().strip("*_`").strip())
        if part and part.lower().rstrip(".") not in _NONE_VALUES:
            out.append(part)
    return out


def status_word(value: str) -> TaskStatus | None:
    """Map a ``Status: Done`` value to a task status (None if unrecognised)."""
    return _STATUS_WORDS.get(" ".join(value.strip().strip("*_`.").lower().split()))
