"""The parser on tasks.md files people wrote in public repositories.

Each file in ``tests/fixtures/tasks/real/`` is kept byte for byte as its author
committed it (``SOURCES.md`` names the repository, path and commit). The expected
structure, one entry per file in ``EXPECTED.toml``, was read off each file by hand:
phase numbers, names and task counts, checkbox states, ``*`` optional markers, a few
tasks, and where the phases end. Generic checks then hold for every file: no phase or
task comes from a fenced code block, nothing after the first trailing section
(Dependencies, Notes...) is read as a phase or task, and each phase and task points at
the line that wrote it.

The second half pins, on small inputs, the rules these files taught the parser.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.activities.tasks_md._text import match_phase, parse_head, phase_number
from phasegate.domain.spec import ParsedSpec, SpecTask

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "tasks" / "real"


@dataclass(frozen=True)
class Warn:
    """Warnings expected at the line starting with ``at`` (and the ``lines - 1`` after it)."""

    at: str
    says: str
    lines: int = 1


@dataclass(frozen=True)
class Real:
    """One entry of ``EXPECTED.toml`` (its header explains the fields)."""

    name: str
    title: str
    phases: list[tuple[int, str, int]]
    statuses: dict[str, int]
    optional: set[str] = field(default_factory=set)
    parallel: set[str] | None = None
    samples: list[tuple[str, str, str]] = field(default_factory=list)
    warnings: list[Warn] = field(default_factory=list)
    ends_before: str | None = None

    @classmethod
    def load(cls, entry: dict[str, Any]) -> Real:
        parallel = entry.get("parallel")
        return cls(
            name=entry["name"],
            title=entry["title"],
            phases=[(n, name, count) for n, name, count in entry["phases"]],
            statuses=entry["statuses"],
            optional=set(entry.get("optional", [])),
            parallel=None if parallel is None else set(parallel),
            samples=[(i, name, status) for i, name, status in entry.get("samples", [])],
            warnings=[Warn(**w) for w in entry.get("warnings", [])],
            ends_before=entry.get("ends_before"),
        )

    def __str__(self) -> str:
        return self.name


CASES = [Real.load(e) for e in tomllib.loads((REAL / "EXPECTED.toml").read_text("utf-8"))["file"]]


def lines_of(name: str) -> list[str]:
    return (REAL / name).read_bytes().decode("utf-8").splitlines()


def parse(name: str) -> ParsedSpec:
    return parse_tasks_md((REAL / name).read_bytes().decode("utf-8"), source=name)


def line_of(lines: list[str], start: str) -> int:
    """1-based number of the first line that starts with ``start`` (indentation ignored)."""
    for n, line in enumerate(lines, start=1):
        if line.lstrip().startswith(start):
            return n
    raise AssertionError(f"no line starts with {start!r}")


def fenced_lines(lines: list[str]) -> set[int]:
    """Line numbers inside ``` / ~~~ fences (a plain scan, as a reader would)."""
    inside, fence, out = False, "", set()
    for n, line in enumerate(lines, start=1):
        mark = line.strip()[:3]
        if not inside and mark in ("```", "~~~"):
            inside, fence = True, mark
        elif inside and line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
            inside = False
        elif inside:
            out.add(n)
    return out


def every_task(spec: ParsedSpec) -> list[SpecTask]:
    return [t for p in spec.phases for t in p.tasks]


def test_every_real_file_has_a_source() -> None:
    sources = (REAL / "SOURCES.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in REAL.glob("*.md") if p.name != "SOURCES.md")
    assert files == sorted(case.name for case in CASES)
    for name in files:
        assert f"| `{name}` |" in sources


@pytest.mark.parametrize("case", CASES, ids=str)
def test_real_file_structure(case: Real) -> None:
    spec = parse(case.name)
    lines = lines_of(case.name)
    assert spec.title == case.title
    assert [(p.number, p.name, len(p.tasks)) for p in spec.phases] == case.phases
    tasks = every_task(spec)
    assert Counter(t.status for t in tasks) == Counter(case.statuses)
    assert {t.id for t in tasks if t.optional} == case.optional
    if case.parallel is not None:
        assert {t.id for t in tasks if t.parallel} == case.parallel
    by_id = {t.id: t for t in tasks}
    assert len(by_id) == len(tasks), "task ids are unique"
    for task_id, name, status in case.samples:
        assert by_id[task_id].name.startswith(name), (task_id, by_id[task_id].name)
        assert by_id[task_id].status == status
    expected = [(line_of(lines, w.at) + k, w.says) for w in case.warnings for k in range(w.lines)]
    assert len(spec.warnings) == len(expected), [(w.line, w.message) for w in spec.warnings]
    for warning, (line, says) in zip(spec.warnings, sorted(expected), strict=True):
        assert (warning.line, says in warning.message) == (line, True), warning


@pytest.mark.parametrize("case", CASES, ids=str)
def test_real_file_lines_fences_and_trailing_sections(case: Real) -> None:
    spec = parse(case.name)
    lines = lines_of(case.name)
    fenced = fenced_lines(lines)
    end = line_of(lines, case.ends_before) if case.ends_before else len(lines) + 1
    for phase in spec.phases:
        assert phase.line not in fenced and phase.line < end
        if phase.name != spec.title:  # a lone checklist is named after the file's title
            assert phase.name in lines[phase.line - 1].replace("**", ""), phase
    for task in every_task(spec):
        assert task.line not in fenced and task.line < end, task
        assert task.name[:20] in lines[task.line - 1].replace("**", ""), task
    trailing = {"Dependencies & Execution Order", "Dependencies", "Notes", "Summary", "Report"}
    assert not {p.name for p in spec.phases} & (trailing | {"Implementation Strategy"})


# --- what the files say beyond the outline ------------------------------------------


def test_kiro_sibling_subtasks_keep_their_bullets_and_requirements() -> None:
    spec = parse("kiro-ui-design-system.md")
    t21 = next(t for t in every_task(spec) if t.id == "2.1")
    assert t21.requirements == ["1.1", "1.2", "1.3", "1.4", "1.5", "1.7"]
    assert t21.description.startswith("- Define primary color palette (50-700 shades)")
    t25 = next(t for t in every_task(spec) if t.id == "2.5")  # the two "2.5" items, merged
    assert "Test all spacing tokens are defined" in t25.description
    assert [p.written_number for p in spec.phases] == [str(n) for n in range(1, 8)]


def test_spec_kit_placeholder_phases_keep_what_was_written() -> None:
    spec = parse("speckit-deacon-phase-n.md")
    assert [(p.number, p.written_number) for p in spec.phases[-3:]] == [
        (6, "6"),
        (7, "N"),
        (8, "R"),
    ]
    assert spec.phases[1].validation_gate[0].startswith("Foundation ready — user story phases")


def test_front_matter_is_not_a_heading_and_lines_still_count() -> None:
    spec = parse("speckit-memory-plugin.md")
    lines = lines_of("speckit-memory-plugin.md")
    assert spec.phases[0].line == line_of(lines, "## Phase 0: Dependencies")
    assert spec.phases[0].estimated_duration == "0.5-1 day"
    agent = parse("speckit-agent-behavior.md")
    assert agent.phases[1].validation_gate == [
        "Foundation ready - user story implementation can now begin"
    ]


def test_praxis_task_headings_metadata_and_gate_headings() -> None:
    spec = parse("praxis-workflow-guidance.md")
    assert [p.estimated_duration for p in spec.phases] == ["45 minutes", "45 minutes"]
    t11, t14 = spec.phases[0].tasks[0], spec.phases[0].tasks[3]
    assert (t11.estimated_time, t11.dependencies) == ("15 minutes", [])
    assert t11.requirements == ["FR-1", "FR-2", "FR-3", "NFR-P1", "NFR-M1", "NFR-R1"]
    assert (
        t11.acceptance_criteria[0]
        == "Function `add_workflow_guidance(response: Dict) -> Dict` created"
    )
    assert t14.dependencies == ["1.1", "1.2", "1.3"]
    assert "All code changes implemented ✅/❌" in spec.phases[0].validation_gate
    assert "Unit tests written and passing ✅/❌" in spec.phases[1].validation_gate


def test_heading_tasks_keep_their_code_as_description() -> None:
    spec = parse("speckit-pulse-heading-tasks.md")
    t001 = spec.phases[0].tasks[0]
    assert "mkdir -p scripts" in t001.description  # the fenced bash block, verbatim
    assert t001.acceptance_criteria == [
        "Directory structure matches plan.md project structure section."
    ]
    t007 = next(t for t in every_task(spec) if t.id == "T007")
    assert (t007.stories, t007.dependencies) == (["US1"], ["T002"])
    assert "git commit -m" in spec.phases[2].validation_gate[0]  # **CHECKPOINT**:
    lines = lines_of("speckit-pulse-heading-tasks.md")
    fenced_h1 = [n for n in fenced_lines(lines) if lines[n - 1].startswith("# ")]
    assert len(fenced_h1) >= 10  # "# Create directories"...: headings, were they not fenced
    assert spec.title == "Task List: Pulse Zero-Config Install Script"


# --- the rules these files taught, on small inputs -------------------------------------


def outline(text: str) -> list[tuple[int, str, list[tuple[str, str, str]]]]:
    spec = parse_tasks_md(text)
    return [(p.number, p.name, [(t.id, t.name, t.status) for t in p.tasks]) for p in spec.phases]


def test_kiro_sibling_subtasks_belong_to_the_numbered_item_before_them() -> None:
    text = (
        "# Plan\n\n- [x] 1. Set up\n- [x] 1.1 Create dirs\n  - Make `src/`\n  - _Requirements: 1.1_\n"
        "- [ ]* 1.2 Property test\n\n- [ ] 2. Build\n  - Build notes for the phase\n"
        "- [-] 2.1 Code it\n- [ ] 3.1 Lost child\n"
    )
    spec = parse_tasks_md(text)
    assert outline(text) == [
        (1, "Set up", [("1.1", "Create dirs", "done"), ("1.2", "Property test", "todo")]),
        (2, "Build", [("2.1", "Code it", "in_progress"), ("3.1", "Lost child", "todo")]),
    ]
    assert [t.optional for t in spec.phases[0].tasks] == [False, True]
    assert spec.phases[0].tasks[0].requirements == ["1.1"]
    assert spec.phases[1].description == "Build notes for the phase"  # not a task
    assert [(w.line, w.message) for w in spec.warnings] == [
        (12, "task 3.1 follows item 2 and no item numbered 3; it was added to phase 2")
    ]


def test_an_empty_item_wrapping_a_list_is_opened() -> None:
    text = "- [x] 5. Layer\n  - [x] 5.1 One\n\n- - [x] 5.2 Two\n    - detail\n"
    assert outline(text) == [(5, "Layer", [("5.1", "One", "done"), ("5.2", "Two", "done")])]


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "# Plan\n\nBefore you start:\n\n1. Read the spec\n2. Run the tests\n\n"
            "- [ ] 1. Setup\n  - [ ] 1.1 Repo\n- [ ] 2. Ship\n",
            id="numbered-checklist",
        ),
        pytest.param(
            "# Plan\n\n1. Read the spec\n2. Run the tests\n\n## Phase 1: Setup\n\n- [ ] 1.1 Repo\n"
            "\n## Phase 2: Ship\n\n- [ ] 2.1 Ship\n",
            id="phase-headings",
        ),
    ],
)
def test_a_numbered_list_of_instructions_is_not_phases(text: str) -> None:
    assert [(p.number, p.name) for p in parse_tasks_md(text).phases] == [(1, "Setup"), (2, "Ship")]


def test_numbered_instructions_before_a_flat_checklist() -> None:
    text = (
        "# Chores\n\n1. Read the runbook\n2. Ask on call\n\n- [ ] Rotate keys\n- [x] Renew cert\n"
    )
    assert outline(text) == [
        (1, "Chores", [("1.1", "Rotate keys", "todo"), ("1.2", "Renew cert", "done")])
    ]


def test_checklist_lines_in_fences_are_never_tasks_in_a_kiro_file() -> None:
    text = (
        "- [ ] 1. Setup\n- [ ] 1.1 Real\n\n```markdown\n- [ ] 1.2 Fenced sibling\n"
        "- [ ] 2. Fenced phase\n```\n\n~~~\n## Phase 9: fenced\n~~~\n"
    )
    assert outline(text) == [(1, "Setup", [("1.1", "Real", "todo")])]


def test_phase_headings_of_mixed_levels() -> None:
    text = (
        "# Plan\n\n### Phase 0: Research\n\n- [x] Read code\n\n## PHASE 1: BUILD\n\n### Tests\n\n"
        "- [ ] Unit tests\n\n## PHASE 2: SHIP\n\n- [ ] Release\n\n## Notes\n\n### Phase 3: Later\n\n"
        "- [ ] Maybe\n"
    )
    spec = parse_tasks_md(text)
    assert outline(text) == [
        (0, "Research", [("0.1", "Read code", "done")]),
        (1, "BUILD", [("1.1", "Unit tests", "todo")]),  # "### Tests" is inside phase 1
        (2, "SHIP", [("2.1", "Release", "todo")]),
    ]
    assert [(w.line, w.message) for w in spec.warnings] == [
        (21, "task-like item in section 'Phase 3: Later' was ignored")
    ]


def test_an_overview_of_the_phases_is_not_phases() -> None:
    text = (
        "# Upgrade\n\n## Phase Breakdown\n\n### Phase 1: Core (4 hours, 2 tasks)\nModels.\n\n"
        "### Phase 2: CLI (2 hours, 1 task)\nWiring.\n\n## Phase 1: Core\n\n### Task 1.1: Models\n\n"
        "### Task 1.2: Utils\n\n## Phase 2: CLI\n\n### Task 2.1: Wire it\n"
    )
    spec = parse_tasks_md(text)
    assert outline(text) == [
        (1, "Core", [("1.1", "Models", "todo"), ("1.2", "Utils", "todo")]),
        (2, "CLI", [("2.1", "Wire it", "todo")]),
    ]
    assert spec.warnings == []


def test_placeholder_and_unnumbered_phases_are_numbered_after_the_one_before() -> None:
    text = "## Phase 1: A\n- [ ] a\n## Phase N: Polish\n- [ ] b\n## Phase: Extra\n- [ ] c\n"
    spec = parse_tasks_md(text)
    assert [(p.number, p.written_number, p.name) for p in spec.phases] == [
        (1, "1", "A"),
        (2, "N", "Polish"),
        (3, "", "Extra"),
    ]
    assert [(w.line, w.message) for w in spec.warnings] == [
        (3, "phase 'N' has no number; it was numbered 2"),
        (5, "phases without a number were numbered in file order from 3"),
    ]


@pytest.mark.parametrize(
    ("heading", "written", "number", "name"),
    [
        ("Phase N: Polish & Cross-Cutting Concerns", "N", None, "Polish & Cross-Cutting Concerns"),
        ("Phase: Setup", "", None, "Setup"),
        ("Phase II - Build", "II", 2, "Build"),
        ("PHASE IV: SHIP", "IV", 4, "SHIP"),
        ("阶段 1：进程分离", "1", 1, "进程分离"),
        ("フェーズ2: 実装", "2", 2, "実装"),
        ("Fase 3: Pruebas", "3", 3, "Pruebas"),
    ],
)
def test_phase_heading_forms_from_the_wild(
    heading: str, written: str, number: int | None, name: str
) -> None:
    assert match_phase(heading) == (written, name)
    assert phase_number(written) == number


@pytest.mark.parametrize(
    "heading", ["Phases: overview", "Phase-out plan: later", "Phase N", "Phase:", "Phase a: x"]
)
def test_not_phase_headings_either(heading: str) -> None:
    assert match_phase(heading) is None


@pytest.mark.parametrize(
    ("line", "task_id", "name", "parallel", "stories"),
    [
        ("[ ] T072b [US4] Timeout test", "T072b", "Timeout test", False, ["US4"]),
        ("T003.5: [Foundation] Write tests", "T003.5", "[Foundation] Write tests", False, []),
        ("[ ] **T-001** `[P]` `Cargo.toml` 作成", "T-001", "`Cargo.toml` 作成", True, []),
        ("T001: Create project structure [P]", "T001", "Create project structure", True, []),
        ("[ ] T1: 仕様書作成", "T1", "仕様書作成", False, []),
        ("[ ] Tenant 1.1 migration [US2]", None, "Tenant 1.1 migration", False, ["US2"]),
    ],
)
def test_task_ids_and_markers_from_the_wild(
    line: str, task_id: str | None, name: str, parallel: bool, stories: list[str]
) -> None:
    head = parse_head(line)
    assert (head.task_id, head.name, head.parallel, head.stories) == (
        task_id,
        name,
        parallel,
        stories,
    )


def test_sections_over_checklists_are_phases_without_phase_headings() -> None:
    text = (
        "## 1. Setup\n- [ ] 1.1 Repo\n- [ ] 1.2 CI\n\n## 2. Ship\n- [x] 2.1 Tag\n\n## Notes\n- x\n"
    )
    spec = parse_tasks_md(text)
    assert outline(text) == [
        (1, "Setup", [("1.1", "Repo", "todo"), ("1.2", "CI", "todo")]),
        (2, "Ship", [("2.1", "Tag", "done")]),
    ]
    assert [p.written_number for p in spec.phases] == ["1", "2"]
    assert spec.warnings == []


def test_yaml_front_matter_is_skipped_but_a_leading_rule_is_not() -> None:
    fm = '---\n# comment\ndescription: "x"\nphases:\n  - id: 0\n---\n# Tasks\n## Phase 1: A\n- [ ] a\n'
    spec = parse_tasks_md(fm, source="t.md")
    assert (spec.title, spec.phases[0].line, spec.phases[0].tasks[0].line) == ("Tasks", 8, 9)
    rule = "---\n# Real title\n\nIntro text.\n---\n## Phase 1: A\n- [ ] a\n"
    assert parse_tasks_md(rule).title == "Real title"
