"""Gates for phases that have no ``gate-definition.yaml``.

The requirements are read from the phase's own markdown with plain line
scanning (markdown-it-py stays out of ``domain``):

* "must provide" sentences anywhere: every backticked or **bold** name on the
  line, or in the list that directly follows it;
* inside a *gate section* (a heading, or a bold label such as
  ``**Validation Gate:**``, containing "Validation Gate", "Checkpoint" or
  "Evidence"): checklist items, evidence tables (``| `name` | integer | ... |``)
  and backticked/bold snake_case names;
* a checklist item without a field name becomes a boolean field named after its
  text (``- [ ] All unit tests pass`` -> ``all_unit_tests_pass``) that must be true;
* a table's validator column is honoured when its meaning is exact: ``is_true``,
  ``is_false``, ``greater_than_0``, ``non_empty`` and prAxIs' parametric names
  (``greater_than_or_equal_5``, ``less_than_or_equal_2_0``, ``percent_gte_95``,
  ``equals_high``); other names (``file_exists``) are ignored.

Fenced code blocks are skipped. Types are inferred from names unless a table
states one. Every field is required; booleans get ``lambda x: x == True``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field

from phasegate.domain.gates import ApprovalSpec, FieldSpec, FieldType, GateDefinition

__all__ = ["checklist_fields", "gate_from_checklist", "gate_from_markdown", "slugify_field"]

_MAX_SLUG = 40
_IS_TRUE = "is_true"
# Validator names used in prAxIs phase tables -> (expression, field types it fits).
_KNOWN_VALIDATORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "is_true": ("lambda x: x == True", ("boolean",)),
    "greater_than_0": ("lambda x: x > 0", ("integer", "number")),
    "positive": ("lambda x: x > 0", ("integer", "number")),
    "non_negative": ("lambda x: x >= 0", ("integer", "number")),
    "non_empty": ("lambda x: len(x) > 0", ("string", "list", "dict")),
    "not_empty": ("lambda x: len(x) > 0", ("string", "list", "dict")),
    "is_false": ("lambda x: x == False", ("boolean",)),
}  # file_exists / directory_exists are not guessed at: a gate cannot look at the disk
# Parametric names from prAxIs workflow definitions: greater_than_or_equal_5,
# less_than_or_equal_2_0 (2.0), percent_gte_95, equals_high ("high").
_PARAM_VALIDATOR = re.compile(
    r"^(greater_than_or_equal|less_than_or_equal|greater_than|less_than|percent_gte|equals)"
    r"_([a-z0-9]+(?:_[a-z0-9]+)*)$"
)
_PARAM_OPS = {"greater_than_or_equal": ">=", "less_than_or_equal": "<=", "greater_than": ">",
              "less_than": "<", "percent_gte": ">=", "equals": "=="}  # fmt: skip
_NUMBER = re.compile(r"^\d+(?:_\d+)?$")
_TYPE_WORDS: dict[str, FieldType] = {
    "boolean": "boolean", "bool": "boolean", "integer": "integer", "int": "integer",
    "number": "number", "float": "number", "string": "string", "str": "string",
    "list": "list", "array": "list", "dict": "dict", "object": "dict",
}  # fmt: skip
_GATE_WORDS = re.compile(r"validation\s+gates?|checkpoint|evidence", re.IGNORECASE)
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_BOLD_LABEL = re.compile(r"^\s*(?:[-*+]\s+)?\*\*([^*]+?)\*\*\s*:?")
_CHECKBOX = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\[([ xX~\-])\]\s*(.*)$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.*)$")
_MUST_PROVIDE = re.compile(r"\bmust\s+(?:also\s+)?provide\b", re.IGNORECASE)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_CODE_OR_BOLD = re.compile(rf"`({_NAME})`|\*\*({_NAME})\*\*")
_LEADING_NAME = re.compile(rf"^(?:`({_NAME})`|\*\*({_NAME})\*\*)\s*(:?)\s*[-–—]?\s*(.*)$")
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")
_APPROVAL = re.compile(r"human\s+approval\W*(.*)", re.IGNORECASE)
_NOT_FIELDS = frozenset({
    "true", "false", "none", "null", "yes", "no", "todo",
    # Tool and update names that phase text mentions next to its evidence.
    "submit_checkpoint", "complete_phase", "get_task", "get_current_phase", "start_workflow",
    "search_standards", "get_workflow_state", "submit_evidence", "approve_phase",
})  # fmt: skip
# A name followed by one of these words is a tool or command, not a field.
_TOOL_SUFFIX = re.compile(
    r"\s*(?:\(|(?:update|tool|command|function|query|signal)\b)", re.IGNORECASE
)


@dataclass
class _Found:
    """Fields in discovery order; a later, more explicit mention may refine one."""

    fields: dict[str, FieldSpec] = field(default_factory=dict)
    approval: bool | None = None

    def add(
        self,
        name: str,
        description: str = "",
        ftype: FieldType | None = None,
        validator: str | None = None,
    ) -> None:
        kind = ftype or _infer_type(name)
        old = self.fields.get(name)
        if old is not None:
            if ftype is None and validator is None:
                return
            description = old.description or description
        if validator is None and kind == "boolean":
            validator = _IS_TRUE
        self.fields[name] = FieldSpec(
            type=kind, required=True, description=description[:200], validator=validator
        )

    def gate(self, source: str) -> GateDefinition:
        used = {s.validator for s in self.fields.values() if s.validator}
        return GateDefinition(
            strict=True,
            # Parsed requirements are a best guess, so a person may override them.
            allow_override=True,
            fields=self.fields,
            validators={name: _validator(name)[0] for name in sorted(used)},
            approval=ApprovalSpec(required=bool(self.approval)),
            source=source,
        )


def gate_from_markdown(text: str, *, source: str) -> GateDefinition:
    """Derive a gate from a phase's markdown when it has no gate file.

    Args:
        text: The phase markdown (``phase.md``).
        source: The file it came from; the gate's ``source`` notes the fallback.

    Returns:
        A strict gate whose fields are the evidence the text asks for (no fields
        when it asks for none).
    """
    found = _Found()
    gate_level = 0  # heading level of the enclosing gate section, 0 when outside one
    fence: str | None = None
    awaiting = 0  # after "must provide:" without names: 1 = list expected, 2 = inside it
    for line in text.splitlines():
        marker = _FENCE.match(line)
        if fence is not None:
            if marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
                fence = None
            continue
        if marker:
            fence = marker.group(1)
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            if gate_level and level <= gate_level:
                gate_level = 0
            if not gate_level and _GATE_WORDS.search(heading.group(2)):
                gate_level = level
            awaiting = 0
            continue
        label = _BOLD_LABEL.match(line)
        if label and not gate_level and _GATE_WORDS.search(label.group(1)):
            gate_level = 7  # until the next heading of any level
        if _MUST_PROVIDE.search(line):
            names = _names_in(line, snake_only=False)
            for name in names:
                found.add(name, _plain(line))
            awaiting = 0 if names else 1
            continue
        if awaiting:
            bullet = _BULLET.match(line)
            if bullet:
                _provided_item(found, bullet.group(1))
                awaiting = 2
                continue
            awaiting = 1 if awaiting == 1 and not line.strip() else 0
        if gate_level:
            _scan_gate_line(found, line)
    return found.gate(source if "fallback" in source else f"{source} (fallback)")


def gate_from_checklist(items: list[str], *, source: str) -> GateDefinition:
    """Build a gate from validation-gate checklist items (e.g. parsed from tasks.md).

    Args:
        items: Item texts, with or without a leading ``- [ ]``.
        source: Where the items came from, kept on the gate.

    Returns:
        A strict gate with one required field per item.
    """
    return checklist_fields(items, source=source)[0]


def checklist_fields(items: list[str], *, source: str) -> tuple[GateDefinition, list[str]]:
    """:func:`gate_from_checklist` and, per item, the name of the field that checks it.

    Args:
        items: Item texts, with or without a leading ``- [ ]``.
        source: Where the items came from, kept on the gate.

    Returns:
        The gate and one field name per item, in order (``""`` for an empty item);
        a repeated item names the same field.
    """
    found = _Found()
    names: list[str] = []
    for item in items:
        text = item.strip()
        box = _CHECKBOX.match(text) or _BULLET.match(text)
        text = box.group(box.lastindex or 1) if box else text
        text = re.sub(r"^\[[ xX~\-]\]\s*", "", text.strip())
        names.append(_item_field(found, text.strip()) or "" if text.strip() else "")
    return found.gate(source), names


def slugify_field(text: str) -> str:
    """Turn free text into a snake_case field name of at most 40 characters, whole words.

    A longer text is cut at the last word that fits and loses the words that cannot
    end a name (``a``, ``the``, ``with``, ``is``, ...), so
    ``"Repository is injected, not imported as a global"`` gives
    ``"repository_is_injected_not_imported"``, not ``..._as_a``.

    Args:
        text: e.g. ``"All unit tests pass (``pytest``)"``.

    Returns:
        e.g. ``"all_unit_tests_pass_pytest"``; ``"item"`` when nothing is left,
        and an ``item_`` prefix when the text starts with a digit.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_text.lower())
    if not words:
        return "item"
    if words[0][0].isdigit():
        words.insert(0, "item")
    return _fit(words, _MAX_SLUG)


# Words a name cut short must not end on: it would read as a sentence broken off.
_DANGLING = frozenset({
    "a", "an", "the", "and", "or", "nor", "but", "with", "without", "of", "to", "in",
    "into", "on", "onto", "at", "by", "for", "from", "as", "is", "are", "was", "were",
    "be", "been", "being", "has", "have", "had", "its", "their", "this", "that",
    "these", "those", "than", "then", "when", "where", "which", "who", "whose", "not",
    "no", "if", "so", "via", "per", "each", "every", "all", "any", "some", "can",
    "could", "may", "might", "must", "shall", "should", "will", "would",
})  # fmt: skip


def _fit(words: list[str], limit: int) -> str:
    """``words`` joined by ``_``: all of them when they fit in ``limit`` characters, else
    the longest prefix of whole words that fits, without dangling words at its end."""
    joined = "_".join(words)
    if len(joined) <= limit:
        return joined
    kept: list[str] = []
    for word in words:
        if len("_".join([*kept, word])) > limit:
            break
        kept.append(word)
    if not kept:  # a single word longer than the limit
        return words[0][:limit]
    while len(kept) > 1 and kept[-1] in _DANGLING:
        kept.pop()
    return "_".join(kept)


def _scan_gate_line(found: _Found, line: str) -> None:
    approval = _APPROVAL.search(_plain(line))
    if approval:
        rest = approval.group(1).lower()
        found.approval = bool(re.search(r"\b(required|yes|true)\b", rest)) and not re.search(
            r"\b(not|no|none|optional)\b", rest
        )
        return
    box = _CHECKBOX.match(line)
    if box:
        if box.group(2).strip():
            _item_field(found, box.group(2).strip())
        return
    if line.lstrip().startswith("|"):
        _table_row(found, line)
        return
    bullet = _BULLET.match(line)
    text = (bullet.group(1) if bullet else line).strip()
    if not (bullet and _item_field(found, text, slug=False)):
        for name in _names_in(text, snake_only=True):
            found.add(name, _plain(text))


def _provided_item(found: _Found, text: str) -> None:
    """An item of a "must provide:" list: its names, or else the item as a boolean."""
    box = _CHECKBOX.match(f"- {text}")
    text = (box.group(2) if box else text).strip()
    names = _names_in(text, snake_only=False)
    if _LEADING_NAME.match(text) or not names:
        _item_field(found, text)
    for name in names:
        found.add(name, _plain(text))


def _item_field(found: _Found, text: str, *, slug: bool = True) -> str | None:
    """A checklist item: a leading field name, or else (``slug``) a boolean named by its text.

    Returns:
        The name of the field added, or None.
    """
    lead = _LEADING_NAME.match(text)
    if lead:
        name = lead.group(1) or lead.group(2)
        colon, rest = lead.group(3), lead.group(4).strip()
        if name.lower() not in _NOT_FIELDS and (colon or _SNAKE.match(name)):
            found.add(name, _plain(rest) or name, _value_type(rest))
            return name
    if not slug:
        return None
    plain = _plain(text)
    name = base = slugify_field(plain)
    for n in range(2, 1000):  # distinct items whose slugs collide get _2, _3, ...
        if name not in found.fields or found.fields[name].description == plain[:200]:
            break
        name = f"{_fit(base.split('_'), _MAX_SLUG - len(str(n)) - 1)}_{n}"
    found.add(name, plain, "boolean")
    return name


def _table_row(found: _Found, line: str) -> None:
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    names = _names_in(cells[0], snake_only=False) if cells else []
    if not names:
        return
    words = [_plain(c).lower() for c in cells[1:]]
    ftype = next((_TYPE_WORDS[w] for w in words if w in _TYPE_WORDS), None)
    description = _plain(cells[-1]) if len(cells) > 1 else ""
    ftype = ftype or _infer_type(names[0])
    validator = next((w for w in words if ftype in _validator(w)[1]), None)
    found.add(names[0], description, ftype, validator)


def _validator(name: str) -> tuple[str, tuple[str, ...]]:
    """The expression for a validator name and the field types it fits (none if unknown)."""
    if name in _KNOWN_VALIDATORS:
        return _KNOWN_VALIDATORS[name]
    m = _PARAM_VALIDATOR.match(name)
    if not m:
        return "", ()
    op, arg = _PARAM_OPS[m.group(1)], m.group(2)
    if _NUMBER.match(arg):
        return f"lambda x: x {op} {arg.replace('_', '.')}", ("integer", "number")
    if op == "==":
        return f"lambda x: x == {arg!r}", ("string",)
    return "", ()


def _names_in(text: str, *, snake_only: bool) -> list[str]:
    names = []
    for match in _CODE_OR_BOLD.finditer(text):
        name = match.group(1) or match.group(2)
        if name.lower() in _NOT_FIELDS or name in names or _TOOL_SUFFIX.match(text, match.end()):
            continue
        if not snake_only or _SNAKE.match(name):
            names.append(name)
    return names


def _infer_type(name: str) -> FieldType:
    lower = name.lower()
    if re.search(r"(_count|_total|_number)$|^(num|number|total|count)_", lower):
        return "integer"
    if re.search(r"(_percent|_percentage|_ratio|_score)$", lower):
        return "number"
    if re.search(r"(_files|_list|_paths)$|^files_", lower):
        return "list"
    if re.search(
        r"(_passed|_passing|_complete|_completed|_done|_verified|_approved|_reviewed|_exists"
        r"|_valid|_ok)$|^(is|has|all)_",
        lower,
    ):
        return "boolean"
    return "string"


def _value_type(rest: str) -> FieldType | None:
    """``- [ ] `name`: true`` states a boolean, ``: 12`` an integer."""
    value = _plain(rest).strip().lower().rstrip(".")
    if value in ("true", "false", "yes/no", "true/false"):
        return "boolean"
    if re.fullmatch(r"\d+", value):
        return "integer"
    return None


def _plain(text: str) -> str:
    """Markdown inline formatting removed, whitespace collapsed."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[`*]+|(?<!\w)_+|_+(?!\w)", "", text)
    return re.sub(r"\s+", " ", text).strip()
