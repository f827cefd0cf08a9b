"""tasks.md parser edge cases: what is never a task, and what is an error.

Code (fenced, indented, HTML) is never a task or phase in any layout; the
tokeniser yields exactly CommonMark's blocks; trailing sections end the last
phase; duplicate ids, empty phases and reused phase numbers are warnings; CRLF
parses like LF; empty or phase-less files raise SpecParseError with a hint.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt
from tasks_helpers import load, outline, parse, phase, task

from phasegate.activities.tasks_md import EXPECTED_FORMAT_HINT, _parse, parse_tasks_md
from phasegate.domain.errors import SpecParseError

# --- code, trailing sections, ranges --------------------------------------------------


def test_fenced_indented_and_html_code_is_never_tasks() -> None:
    spec = parse("fenced_code.md")
    assert outline(spec) == [
        (1, "Examples", [
            ("1.1", "Document the task format", "todo"),
            ("1.2", "Add the CLI example", "todo"),
            ("1.3", "Publish the docs", "done"),
        ]),
        (2, "Ship", [("2.1", "Tag the release", "todo")]),
    ]  # fmt: skip
    assert [t.line for p in spec.phases for t in p.tasks] == [5, 12, 25, 33]
    assert "Task 9.9" in task(spec, "1.1").description  # kept verbatim as the task's code sample
    assert spec.warnings == []


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "## Phase 1: A\n\n- [ ] 1.1 real\n\n```\n- [ ] 1.9 fenced\n## Phase 9: fenced\n```\n\n"
            "~~~md\n- [ ] 1.8 tilde\n~~~\n\n    - [ ] 1.7 indented\n    ## Phase 8: indented\n\n"
            "- [ ] 1.2 real too\n  ```\n  - [ ] 1.6 fenced in the item\n  ```\n\n"
            "      - [ ] 1.5 indented in the item\n",
            id="phase-headings",
        ),
        pytest.param(
            "## Phase 1: A\n\n### Task 1.1: real\n\n```\n### Task 1.9: fenced\n- [ ] 1.8 fenced\n```\n\n"
            "    ### Task 1.7: indented\n\n### Task 1.2: real too\n",
            id="heading-tasks",
        ),
        pytest.param(
            "# Plan\n\n1. A\n   - [ ] real\n\n   ```\n   - [ ] fenced\n   2. fenced phase\n   ```\n\n"
            "         - [ ] indented\n\n   - [ ] real too\n\n```\n3. fenced phase\n```\n\n"
            "    4. indented phase\n",
            id="numbered-items",
        ),
        pytest.param(
            "# A\n\n- [ ] real\n\n```\n- [ ] fenced\n```\n\n    - [ ] indented\n\n- [ ] real too\n",
            id="flat-checklist",
        ),
    ],
)
def test_code_blocks_are_never_tasks_or_phases_in_any_layout(text: str) -> None:
    spec = parse_tasks_md(text)
    assert [(p.number, p.name) for p in spec.phases] == [(1, "A")]
    assert [t.name for t in spec.phases[0].tasks] == ["real", "real too"]


def test_setext_phase_headings_and_reference_definitions() -> None:
    # The tokeniser skips the setext and reference rules where they cannot match;
    # where they can, they still apply.
    text = (
        "Release\n=======\n\nPhase 1: Setup\n---\n\n- [ ] 1.1 a\n\n[spec]: specs/001/spec.md\n\n"
        "Phase 2: Ship\n  ---\n\n- [ ] 2.1 b\n"
    )
    spec = parse_tasks_md(text)
    assert spec.title == "Release"
    assert outline(spec) == [
        (1, "Setup", [("1.1", "a", "todo")]),
        (2, "Ship", [("2.1", "b", "todo")]),
    ]


_MD_PIECES = [
    "", "---", "===", "  ---", "> ---", "> > ===", "> - [ ] T001 x", "para", "- [ ] T001 x",
    "  - sub", "    code", "\tcode", "```", "~~~", "````md", "- ```", "[a]: /url", "[a", "b]: /u",
    "  'title'", "[P]: x", "# H", "## Phase 1: A", "#no", "<!--", "-->", "<div>", "1. x", "2) y",
    "* * *", "_ _ _", "- - -", "- ---", "a -", "\x00", " \t", "- > q", "1. # h",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(_MD_PIECES), st.sampled_from(["\n", "\n\n", "\r\n", "\r", " "])),
        max_size=14,
    )
)
def test_tokens_are_exactly_commonmark_blocks(pieces: list[tuple[str, str]]) -> None:
    text = "".join(piece + sep for piece, sep in pieces)
    plain = MarkdownIt("commonmark").disable("inline")

    def blocks(md: MarkdownIt) -> list[tuple[object, ...]]:
        return [(t.type, t.map, t.content, t.info, t.markup, t.level) for t in md.parse(text)]

    assert blocks(_parse._MD) == blocks(plain)


def test_trailing_sections_end_the_last_phase() -> None:
    spec = parse("trailing_sections.md")
    assert outline(spec) == [
        (1, "Parse", [("1.1", "Read CSV headers", "todo"), ("1.2", "Map columns", "todo")]),
        (2, "Load", [("2.1", "Bulk insert rows", "todo")]),
    ]
    assert phase(spec, 2).description == ""
    assert phase(spec, 2).validation_gate == []
    assert [(w.line, w.message) for w in spec.warnings] == [
        (32, "task-like item in section 'Phase 3: Maybe later' was ignored"),
        (42, "task-like item in section 'Risks' was ignored"),
    ]


def test_duplicate_ids_empty_phase_and_reused_phase_number() -> None:
    spec = parse("duplicates.md")
    assert outline(spec) == [
        (1, "First", [("1.1", "Alpha", "todo"), ("1.2", "Beta", "todo")]),
        (2, "Empty", []),
        (1, "First again", [("1.3", "Gamma", "todo")]),
    ]
    assert task(spec, "1.1").estimated_time == "1 hour"  # the duplicate's details merged in
    assert [(w.line, w.message) for w in spec.warnings] == [
        (6, ("duplicate task id '1.1' in phase 1 (first at line 5); its details were merged "
             "into the first")),
        (10, "phase 2 ('Empty') has no tasks"),
        (14, "phase number 1 is used twice (first at line 3)"),
    ]  # fmt: skip


def test_crlf_line_endings_parse_like_lf() -> None:
    lf = load("crlf.md").replace("\r\n", "\n")
    crlf = lf.replace("\n", "\r\n")  # independent of how git checked the fixture out
    a, b = parse_tasks_md(lf), parse_tasks_md(crlf)
    assert a.phases == b.phases
    assert outline(b) == [
        (1, "Setup", [
            ("1.1", "Install the toolchain", "todo"),
            ("1.2", "Clone the repository", "done"),
        ]),
        (2, "Port", [
            ("2.1", "Replace shell scripts with Python", "in_progress"),
            ("2.2", "Add a PowerShell wrapper", "todo"),
        ]),
    ]  # fmt: skip
    assert [t.line for p in b.phases for t in p.tasks] == [7, 10, 23, 24]
    assert phase(b, 1).validation_gate == ["Build passes on Windows"]
    assert task(b, "1.2").acceptance_criteria == ["`git status` is clean"]
    assert task(b, "2.2").optional is True
    assert b.sha256 == hashlib.sha256(crlf.encode()).hexdigest() != a.sha256


# --- errors ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\n\t\n"])
def test_empty_file_is_an_error(text: str) -> None:
    with pytest.raises(SpecParseError) as err:
        parse_tasks_md(text, source="specs/x/tasks.md")
    assert err.value.line == 1
    assert err.value.code == "source_parse_failed"
    assert str(err.value).startswith("specs/x/tasks.md:1: the file is empty")
    assert err.value.hint == EXPECTED_FORMAT_HINT


def test_empty_fixture_is_an_error() -> None:
    with pytest.raises(SpecParseError, match="empty"):
        parse("empty.md")


def test_prose_only_is_an_error_with_a_hint() -> None:
    with pytest.raises(SpecParseError) as err:
        parse("prose_only.md")
    assert err.value.message == "no phases found"
    assert err.value.line == 1
    assert "## Phase 1: Setup" in (err.value.hint or "")
    assert err.value.where == "prose_only.md:1"


def test_no_phases_error_points_at_a_phase_like_heading() -> None:
    text = "# Plan\n\nIntro.\n\n## Phase 1-3 overview\n\nText.\n"
    with pytest.raises(SpecParseError) as err:
        parse_tasks_md(text)
    assert err.value.line == 5


def test_unexpected_exceptions_become_spec_parse_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(_nodes: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(_parse, "phase_layout", boom)
    with pytest.raises(SpecParseError, match="kaboom") as err:
        parse_tasks_md("## Phase 1: A\n- [ ] x\n", source="t.md")
    assert err.value.line == 1
    assert isinstance(err.value.__cause__, RuntimeError)
