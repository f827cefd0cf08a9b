"""Property tests: whatever the text, only SpecParseError escapes and line numbers hold.

Inputs are stitched together from markdown-ish fragments (phase and task
headings, checkbox items with every state, metadata labels, fences, quotes,
unicode, NULs, stray carriage returns, very long lines) so the parser's
interesting paths are hit far more often than with uniformly random text.
"""

from __future__ import annotations

import hashlib
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.domain.errors import SpecParseError
from phasegate.domain.spec import ParsedSpec

_NEWLINES = re.compile(r"\r\n?|\n")  # what markdown-it counts as a line break

words = st.sampled_from(
    ["Setup", "Build", "x", "Überprüfung", "日本語", "🎯 MVP", "(Priority: P1)", "`code`", "**b**",
     "_i_", "[P]", "[US1]", "1-3", "–", "—", ":", "*", "\x00", "\t", "\\", "<!--", "-->", "|a|b|"]
)  # fmt: skip
name = st.lists(words, max_size=5).map(" ".join)
number = st.integers(min_value=0, max_value=12).map(str) | st.sampled_from(
    ["1.1", "2.3.1", "99999999999"]
)
indent = st.sampled_from(["", "  ", "    ", "   ", "\t"])
state = st.sampled_from(["[ ]", "[x]", "[X]", "[-]", "[~]", "[]", "[ ]*", "[?]", ""])
task_id = st.sampled_from(
    [
        "",
        "T001 ",
        "**Task 1.1**: ",
        "**Task 1.1:** ",
        "1.1 ",
        "1. ",
        "P1-T2: ",
        "Task 1-3: ",
        "2.1* ",
        "T-001 ",
        "T003.5: ",
        "T072b ",
        "3.1 ",
    ]
)
label = st.sampled_from(
    ["**Dependencies**:", "**Dependencies:**", "Dependencies:", "Depends on:", "_Requirements:",
     "**Estimated Time**:", "Estimate:", "**Acceptance Criteria**:", "**Validation Gate:**",
     "**Checkpoint**:", "**Estimated Duration**:", "Status:", "Note:"]
)  # fmt: skip

heading_kind = st.sampled_from(
    ["Phase {n}: {name}", "PHASE {n} - {name}", "Phase {n} — {name}", "Phase {n}", "Phases {n}-3",
     "Task {n}: {name}", "P{n}-T2: {name}", "Validation Gate", "Phase {n} Validation Gate",
     "Checkpoint", "Notes", "Summary", "{name}", "Phase N: {name}", "Phase: {name}",
     "PHASE II - {name}", "阶段 {n}：{name}", "{n}. {name}", "T00{n}: {name} [P]"]
)  # fmt: skip
heading = st.builds(
    lambda hashes, kind, n, nm: f"{'#' * hashes} {kind.format(n=n, name=nm)}",
    st.integers(min_value=1, max_value=7),
    heading_kind,
    number,
    name,
)
item = st.builds(
    lambda ind, bullet, st_, tid, nm: f"{ind}{bullet} {st_} {tid}{nm}",
    indent,
    st.sampled_from(["-", "*", "+", "1.", "2)", "10.", "- -", "-"]),
    state,
    task_id,
    name,
)
meta = st.builds(lambda ind, lb, nm: f"{ind}- {lb} {nm}", indent, label, name)
fence = st.builds(
    lambda f, body: f"{f}\n{body}\n{f}",
    st.sampled_from(["```", "~~~", "````md"]),
    st.just("- [ ] T999 x"),
)
long_line = st.builds(
    lambda ch, n: ch * n,
    st.sampled_from(["x", "`", "*", "[", "- ", "#", "**", "[ ] ", "_"]),
    st.integers(min_value=1000, max_value=20000),
)
other = st.sampled_from(
    ["", "---", "===", "> quote", "> - [ ] quoted task", "<!--", "-->", "    - [ ] code", "\x00",
     "\r", "text line", "1. Complete Phase 1-3", "|a|b|\n|-|-|", "---\nkey: v\n# c\n---",
     "---\n\ndescription: x\n---", "-"]
)  # fmt: skip
fragment = heading | item | item | meta | fence | other | name | long_line
separator = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r", "\n\n"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    parts = draw(st.lists(fragment, max_size=40))
    out = []
    for part in parts:
        out.append(part)
        out.append(draw(separator))
    return "".join(out)


def _check(text: str) -> None:
    try:
        spec = parse_tasks_md(text, source="fuzz.md")
    except SpecParseError as err:  # the one exception allowed out
        assert err.line is None or err.line >= 1
        assert err.hint
        return
    assert isinstance(spec, ParsedSpec)
    n_lines = len(_NEWLINES.split(text))
    assert spec.phases
    assert spec.sha256 == hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    for phase in spec.phases:
        assert 1 <= phase.line <= n_lines
        for task in phase.tasks:
            assert 1 <= task.line <= n_lines
            assert task.id
    for warning in spec.warnings:
        assert 1 <= warning.line <= n_lines
    assert parse_tasks_md(text, source="fuzz.md") == spec  # deterministic


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_markdownish_documents_parse_or_raise_spec_parse_error(text: str) -> None:
    _check(text)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_parses_or_raises_spec_parse_error(text: str) -> None:
    _check(text)
