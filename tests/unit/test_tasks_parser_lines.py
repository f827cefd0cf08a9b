"""tasks.md parser line rules: small inputs, one rule each.

Phase heading variants (and what is not one), task head variants (ids,
checkbox states, optional and parallel markers, stories), metadata label
variants, generated and written task ids, descriptions versus tasks, gate
headings; plus the generator's round trip and parsing speed.
"""

from __future__ import annotations

import hashlib
import time

import pytest
from tasks_helpers import phase, task

from phasegate.activities.tasks_md import generate_tasks_md, parse_tasks_md
from phasegate.activities.tasks_md._text import match_phase, parse_head, parse_label
from phasegate.domain.errors import SpecParseError

# --- small inputs, one rule each ---------------------------------------------------


def test_sha256_source_and_title() -> None:
    text = "# My Spec\n\n## Phase 1: A\n\n- [ ] 1.1 Do it\n"
    spec = parse_tasks_md(text, source="specs/a/tasks.md")
    assert spec.sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert (spec.source, spec.title, spec.task_count) == ("specs/a/tasks.md", "My Spec", 1)


def test_no_h1_means_empty_title() -> None:
    assert parse_tasks_md("## Phase 1: A\n\n- [ ] x\n").title == ""


@pytest.mark.parametrize(
    ("heading", "number", "name"),
    [
        ("### Phase 1: Setup", 1, "Setup"),
        ("## Phase 0: Static Analysis", 0, "Static Analysis"),
        ("## PHASE 2: BUILD IT", 2, "BUILD IT"),
        ("## Phase 3 - Dash", 3, "Dash"),
        ("## Phase 4 — Em dash", 4, "Em dash"),
        ("## Phase 5 – En dash", 5, "En dash"),
        ("## **Phase 6**: Bold", 6, "Bold"),
        ("## Phase 7", 7, "Phase 7"),
        ("## Phase 8:   Spaced name  ", 8, "Spaced name"),
    ],
)
def test_phase_heading_variants(heading: str, number: int, name: str) -> None:
    spec = parse_tasks_md(f"{heading}\n\n- [ ] only task\n")
    assert [(p.number, p.name, p.line) for p in spec.phases] == [(number, name, 1)]
    assert spec.phases[0].tasks[0].id == f"{number}.1"


@pytest.mark.parametrize(
    "text",
    ["Phase 1-3", "Phases 1–3", "Phase 1 – 3", "Phase 1.2.3: Sub", "Phase 1 Tasks", "Phase one"],
)
def test_not_phase_headings(text: str) -> None:
    assert match_phase(text) is None


@pytest.mark.parametrize(
    ("line", "task_id", "name", "status", "optional", "parallel", "stories"),
    [
        ("[ ] **Task 1.1**: Name", "1.1", "Name", "todo", False, False, []),
        ("[ ] **Task 1.1:** Name", "1.1", "Name", "todo", False, False, []),
        ("[ ] T001 [P] [US1] Create x", "T001", "Create x", "todo", False, True, ["US1"]),
        ("[X] T002 [US2] [P] Both", "T002", "Both", "done", False, True, ["US2"]),
        ("[x] 1.1 text", "1.1", "text", "done", False, False, []),
        ("[-] 2.1.3 deep id", "2.1.3", "deep id", "in_progress", False, False, []),
        ("[~] **P1-T2**: Name", "P1-T2", "Name", "skipped", False, False, []),
        ("[ ]* 2.1 Write tests", "2.1", "Write tests", "todo", True, False, []),
        ("[ ] 2.2* Star after id", "2.2", "Star after id", "todo", True, False, []),
        ("[ ] Plain name *", None, "Plain name", "todo", True, False, []),
        ("[ ] *Italic, not optional*", None, "*Italic, not optional*", "todo", False, False, []),
        ("[ ] 1. Ordinal", None, "Ordinal", "todo", False, False, []),
        ("[ ] Task 1-3: a range", None, "Task 1-3: a range", "todo", False, False, []),
        ("[ ] Task T010 — Name", "T010", "Name", "todo", False, False, []),
        ("[ ] `**kwargs` support", None, "`**kwargs` support", "todo", False, False, []),
        ("Task 3.2: A heading", "3.2", "A heading", None, False, False, []),
    ],
)
def test_task_head_variants(
    line: str,
    task_id: str | None,
    name: str,
    status: str | None,
    optional: bool,
    parallel: bool,
    stories: list[str],
) -> None:
    head = parse_head(line)
    assert (head.task_id, head.name, head.status) == (task_id, name, status)
    assert (head.optional, head.parallel, head.stories) == (optional, parallel, stories)


@pytest.mark.parametrize(
    ("line", "kind", "value"),
    [
        ("**Dependencies**: T001", "deps", "T001"),
        ("**Dependencies:** T001", "deps", "T001"),
        ("Dependencies: None", "deps", "None"),
        ("Depends on: 1.1", "deps", "1.1"),
        ("_Requirements: 1.1, 2.3_", "reqs", "1.1, 2.3"),
        ("**Acceptance Criteria:**", "criteria", ""),
        ("*Estimate*: 2h", "time", "2h"),
        ("Time: 1 hour", "time", "1 hour"),
        ("**Estimated Duration**: 2 days", "time", "2 days"),
        ("**Validation Gate:**", "gate", ""),
        ("**Checkpoint**: Ready", "gate", "Ready"),
        ("Note: free text", None, "free text"),
    ],
)
def test_label_variants(line: str, kind: str | None, value: str) -> None:
    label = parse_label(line)
    assert label is not None
    assert (label.kind, label.value) == (kind, value)


def test_urls_are_not_labels() -> None:
    assert parse_label("See https://example.com/x") is None


def test_checkbox_tasks_without_ids_are_numbered_per_phase() -> None:
    text = "## Phase 3: Three\n\n- [ ] first\n- [x] 1. second\n- [ ] 3.9 explicit\n- [ ] fourth\n"
    spec = parse_tasks_md(text)
    assert [(t.id, t.name) for t in spec.phases[0].tasks] == [
        ("3.1", "first"),
        ("3.2", "second"),
        ("3.9", "explicit"),
        ("3.4", "fourth"),
    ]


def test_written_ids_win_over_generated_ones() -> None:
    text = (
        "## Phase 1: A\n\n- [ ] 1. Group\n  - [ ] 1.1 Sub one\n  - [ ] 1.2 Sub two\n- [ ] plain\n"
    )
    spec = parse_tasks_md(text)
    assert [(t.id, t.name, t.line) for t in spec.phases[0].tasks] == [
        ("1.5", "Group", 3),
        ("1.1", "Sub one", 4),
        ("1.2", "Sub two", 5),
        ("1.4", "plain", 6),
    ]
    assert spec.warnings == []


def test_plain_bullets_in_a_phase_are_description_not_tasks() -> None:
    text = "## Phase 1: A\n\n- Goal: fast\n- Scope: small\n\n- [ ] 1.1 Real task\n"
    spec = parse_tasks_md(text)
    assert [t.id for t in spec.phases[0].tasks] == ["1.1"]
    assert spec.phases[0].description == "- Goal: fast\n- Scope: small"


def test_bold_task_ids_without_checkbox_are_tasks() -> None:
    text = "## Phase 1: A\n\n- **Task 1.1**: Create module\n  - Dependencies: None\n"
    t = parse_tasks_md(text).phases[0].tasks[0]
    assert (t.id, t.name, t.status, t.dependencies) == ("1.1", "Create module", "todo", [])


def test_wrapped_task_name_and_lazy_metadata_line() -> None:
    text = (
        "## Phase 1: A\n\n"
        "- [ ] **Task 1.1**: Create the module\n"
        "  and its package marker\n"
        "  **Estimated Time**: 1h\n"
    )
    t = parse_tasks_md(text).phases[0].tasks[0]
    assert (t.name, t.estimated_time) == ("Create the module and its package marker", "1h")


def test_gate_heading_naming_a_phase_goes_to_that_phase() -> None:
    text = (
        "## Phase 1: A\n\n- [ ] 1.1 a\n\n## Phase 2: B\n\n- [ ] 2.1 b\n\n"
        "## Phase 1 Validation Gate\n\n- [ ] a done\n"
    )
    spec = parse_tasks_md(text)
    assert [p.validation_gate for p in spec.phases] == [["a done"], []]


def test_sub_headings_inside_a_phase_keep_their_tasks() -> None:
    text = "## Phase 1: A\n\n### Tests\n\n- [ ] T001 test\n\n### Code\n\n- [ ] T002 code\n"
    assert [t.id for t in parse_tasks_md(text).phases[0].tasks] == ["T001", "T002"]


def test_tasks_before_the_first_phase_are_warned() -> None:
    spec = parse_tasks_md("# T\n\n- [ ] stray\n\n## Phase 1: A\n\n- [ ] a\n")
    assert [(w.line, w.message) for w in spec.warnings] == [
        (3, "task-like item before any phase was ignored")
    ]


def test_heading_task_status_label() -> None:
    text = "## Phase 1: A\n\n### Task 1.1: X\n\n**Status:** In progress\n"
    assert parse_tasks_md(text).phases[0].tasks[0].status == "in_progress"


# --- generator and speed -----------------------------------------------------------


def test_generate_tasks_md_round_trips() -> None:
    spec = parse_tasks_md(generate_tasks_md(45, tasks_per_phase=20))
    assert [len(p.tasks) for p in spec.phases] == [20, 20, 5]
    assert [p.number for p in spec.phases] == [1, 2, 3]
    assert spec.task_count == 45
    assert spec.warnings == []
    t5 = task(spec, "T005")
    assert (t5.dependencies, len(t5.acceptance_criteria)) == (["T004"], 1)
    assert phase(spec, 1).validation_gate == ["Component 1 works on its own"]


def test_generate_tasks_md_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        generate_tasks_md(-1)
    with pytest.raises(ValueError):
        generate_tasks_md(10, tasks_per_phase=0)
    with pytest.raises(SpecParseError):
        parse_tasks_md(generate_tasks_md(0))


def test_thousand_tasks_parse_quickly() -> None:
    text = generate_tasks_md(1000)
    best = min(_timed(text) for _ in range(3))
    assert parse_tasks_md(text).task_count == 1000
    # Typically ~50-80 ms; the bound is loose so a busy CI machine does not flake.
    assert best < 1.0, f"parsing 1,000 tasks took {best * 1000:.0f} ms"


def _timed(text: str) -> float:
    start = time.perf_counter()
    parse_tasks_md(text)
    return time.perf_counter() - start
