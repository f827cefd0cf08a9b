"""Unit tests of the tasks.md parser: one fixture per family, plus edge cases.

No server needed. Fixtures live in ``tests/fixtures/tasks/``; they are read as
bytes and decoded so that line endings reach the parser exactly as written.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from phasegate.activities import tasks_parser
from phasegate.activities._tasks_md_text import match_phase, parse_head, parse_label
from phasegate.activities.tasks_parser import (
    EXPECTED_FORMAT_HINT,
    generate_tasks_md,
    parse_tasks_md,
)
from phasegate.domain.errors import SpecParseError
from phasegate.domain.spec import ParsedSpec, SpecPhase, SpecTask

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


def load(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def parse(name: str) -> ParsedSpec:
    return parse_tasks_md(load(name), source=name)


def outline(spec: ParsedSpec) -> list[tuple[int, str, list[tuple[str, str, str]]]]:
    """(number, name, [(id, name, status)]) per phase: the shape most tests compare."""
    return [(p.number, p.name, [(t.id, t.name, t.status) for t in p.tasks]) for p in spec.phases]


def task(spec: ParsedSpec, task_id: str) -> SpecTask:
    return next(t for p in spec.phases for t in p.tasks if t.id == task_id)


def phase(spec: ParsedSpec, number: int) -> SpecPhase:
    return next(p for p in spec.phases if p.number == number)


# --- spec-kit -----------------------------------------------------------------


def test_speckit_phases_tasks_and_statuses() -> None:
    spec = parse("speckit.md")
    assert spec.title == "Tasks: Photo Albums"
    assert outline(spec) == [
        (1, "Setup (Shared Infrastructure)", [
            ("T001", "Create project structure per implementation plan", "done"),
            ("T002", "Initialize Python 3.12 project with FastAPI and SQLModel dependencies", "done"),
            ("T003", "Configure ruff and mypy in pyproject.toml", "todo"),
        ]),
        (2, "Foundational (Blocking Prerequisites)", [
            ("T004", "Setup database schema and migrations framework in src/db/migrations/", "todo"),
            ("T005", "Implement authentication middleware in src/api/auth.py", "todo"),
            ("T006", "Setup API routing and middleware structure in src/api/app.py", "todo"),
        ]),
        (3, "User Story 1 - Create and browse albums (Priority: P1) 🎯 MVP", [
            ("T010", "Contract test for POST /albums in tests/contract/test_albums_post.py", "todo"),
            ("T011", ("Integration test for the create-then-list journey in "
                      "tests/integration/test_albums.py"), "todo"),
            ("T012", "Create Album model in src/models/album.py", "todo"),
            ("T013", "Implement AlbumService in src/services/album_service.py (depends on T012)",
             "todo"),
            ("T014", "Implement POST/GET /albums endpoints in src/api/albums.py", "todo"),
        ]),
        (4, "User Story 2 - Share an album (Priority: P2)", [
            ("T015", "Create ShareLink model in src/models/share_link.py", "todo"),
            ("T016", "Implement GET /shared/{token} in src/api/shared.py", "todo"),
        ]),
        (5, "Polish & Cross-Cutting Concerns", [
            ("T017", "Documentation updates in docs/albums.md", "todo"),
            ("T018", "Run quickstart.md validation", "todo"),
        ]),
    ]  # fmt: skip
    assert [p.line for p in spec.phases] == [24, 34, 48, 71, 82]
    assert spec.warnings == []


def test_speckit_markers_checkpoints_and_descriptions() -> None:
    spec = parse("speckit.md")
    assert (task(spec, "T003").parallel, task(spec, "T003").stories) == (True, [])
    assert (task(spec, "T001").parallel, task(spec, "T001").line) == (False, 28)
    assert (task(spec, "T010").parallel, task(spec, "T010").stories) == (True, ["US1"])
    assert (task(spec, "T013").parallel, task(spec, "T013").stories) == (False, ["US1"])
    assert task(spec, "T016").stories == ["US2"]
    assert phase(spec, 1).validation_gate == []
    assert phase(spec, 2).validation_gate == [
        "Foundation ready - user story implementation can now begin in parallel"
    ]
    assert phase(spec, 3).validation_gate == [
        "At this point, User Story 1 should be fully functional and testable independently"
    ]
    assert phase(spec, 1).description == "**Purpose**: Project initialization and basic structure"
    assert phase(spec, 3).description == (
        "**Goal**: A user can create an album and see it in their album list\n\n"
        "**Independent Test**: POST /albums then GET /albums returns the new album\n\n"
        "> **NOTE: Write these tests FIRST, ensure they FAIL before implementation**"
    )


def test_speckit_trailing_sections_do_not_leak() -> None:
    spec = parse("speckit.md")
    last = spec.phases[-1]
    assert [t.id for t in last.tasks] == ["T017", "T018"]
    assert last.validation_gate == []
    assert "Dependencies" not in last.description and "Notes" not in last.description
    assert "T999" not in {t.id for p in spec.phases for t in p.tasks}


def test_legacy_speckit_dotted_phases_are_numbered_in_file_order() -> None:
    spec = parse("speckit_legacy.md")
    assert outline(spec) == [
        (1, "Setup", [
            ("T001", "Create project structure per implementation plan", "done"),
            ("T002", "Configure ruff and pytest", "todo"),
        ]),
        (2, "Tests First (TDD) ⚠️ MUST COMPLETE BEFORE 3.3", [
            ("T003", "Contract test POST /api/users in tests/contract/test_users_post.py", "todo"),
            ("T004", "Contract test GET /api/users/{id} in tests/contract/test_users_get.py",
             "todo"),
        ]),
        (3, "Core Implementation (ONLY after tests are failing)", [
            ("T005", "User model in src/models/user.py", "todo"),
            ("T006", "UserService CRUD in src/services/user_service.py", "todo"),
        ]),
        (4, "Polish", [
            ("T007", "Unit tests for validation in tests/unit/test_validation.py", "todo"),
        ]),
    ]  # fmt: skip
    assert [p.line for p in spec.phases] == [18, 22, 27, 31]
    assert [t.parallel for t in spec.phases[1].tasks] == [True, True]
    assert phase(spec, 2).description == (
        "**CRITICAL: These tests MUST be written and MUST FAIL before ANY implementation**"
    )
    assert [(w.line, w.message) for w in spec.warnings] == [
        (18, ("phase numbers like '3.1' are not whole numbers; the phases were numbered 1, 2, "
              "... in file order")),
        (44, "task-like item in section 'Validation Checklist' was ignored"),
        (45, "task-like item in section 'Validation Checklist' was ignored"),
    ]  # fmt: skip


def test_dotted_phase_headings_are_plain_headings_next_to_whole_numbers() -> None:
    text = "## Phase 1: A\n\n- [ ] 1.1 a\n\n### Phase 1.5: Hotfix\n\n- [ ] 1.2 b\n"
    spec = parse_tasks_md(text)
    assert outline(spec) == [(1, "A", [("1.1", "a", "todo"), ("1.2", "b", "todo")])]


# --- Kiro --------------------------------------------------------------------


def test_kiro_numbered_items_become_phases() -> None:
    spec = parse("kiro.md")
    assert spec.title == "Implementation Plan"
    assert outline(spec) == [
        (1, "Set up project structure and core interfaces", [
            ("1.1", ("Create directory structure for models, services, repositories, and API "
                     "components"), "done"),
            ("1.2", "Define interfaces that establish system boundaries", "done"),
        ]),
        (2, "Implement data models and validation", [
            ("2.1", "Create core data model interfaces and types", "done"),
            ("2.2", "Implement User model with validation", "in_progress"),
            ("2.3", "Write unit tests for data models", "todo"),
        ]),
        (3, "Create storage mechanism", [
            ("3.1", "Implement database connection utilities", "todo"),
            ("3.2", "Implement repository pattern for data access", "todo"),
        ]),
        (4, "Checkpoint - Ensure all tests pass, ask the user if questions arise.", [
            ("4.1", "Checkpoint - Ensure all tests pass, ask the user if questions arise.", "todo"),
        ]),
    ]  # fmt: skip
    assert [p.line for p in spec.phases] == [3, 8, 22, 29]
    assert spec.warnings == []


def test_kiro_requirements_optional_and_descriptions() -> None:
    spec = parse("kiro.md")
    t21 = task(spec, "2.1")
    assert t21.requirements == ["2.1", "3.3", "1.2"]
    assert t21.description == (
        "- Write TypeScript interfaces for all data models\n"
        "- Implement validation functions for data integrity"
    )
    assert t21.line == 9
    assert task(spec, "2.3").optional is True
    assert task(spec, "2.2").optional is False
    assert task(spec, "2.3").requirements == ["1.2", "2.1"]
    assert task(spec, "3.2").requirements == ["4.3"]
    # Metadata bullets directly under a numbered item stay with the phase.
    assert phase(spec, 1).description == "_Requirements: 1.1_"


# --- prAxIs / agent-os ---------------------------------------------------------


def test_praxis_tasks_metadata_and_gates() -> None:
    spec = parse("praxis.md")
    assert outline(spec) == [
        (1, "Foundation", [
            ("1.1", "Create export module structure", "todo"),
            ("1.2", "Define ExportJob and ExportFormat models", "done"),
            ("1.3", "Add configuration loading", "in_progress"),
        ]),
        (2, "Exporter", [
            ("2.1", "Implement the CSV writer", "todo"),
            ("2.2", "Implement the Parquet writer", "todo"),
            ("2.3", "Add S3 upload", "skipped"),
        ]),
    ]  # fmt: skip
    p1 = phase(spec, 1)
    assert p1.estimated_duration == "4 hours"
    assert p1.description == "**Objective:** Lay down the export package and its data models."
    assert p1.validation_gate == [
        "All tasks in Phase 1 completed ✅/❌",
        "All acceptance criteria met ✅/❌",
        "No linting errors ✅/❌",
    ]
    assert phase(spec, 2).validation_gate == [
        "Exports of 10k sessions finish in under a minute",
        "All tests passing ✅/❌",
    ]
    t11 = task(spec, "1.1")
    assert (t11.estimated_time, t11.dependencies) == ("30 minutes", [])
    assert t11.acceptance_criteria == [
        "Package imports cleanly",
        "`pytest --collect-only` finds the new test module",
    ]
    assert t11.description == (
        "- Create `src/export/__init__.py` and `src/export/models.py`\n"
        "- Register the package in `pyproject.toml`"
    )
    t12 = task(spec, "1.2")
    assert (t12.estimated_time, t12.dependencies) == ("1 hour", ["1.1"])
    assert t12.acceptance_criteria == [
        "Models validate required fields",
        "JSON round trip keeps every field",
    ]
    assert t12.requirements == ["FR-001", "FR-002"]
    t13 = task(spec, "1.3")
    assert (t13.estimated_time, t13.dependencies) == ("45 minutes", ["1.1", "1.2"])
    assert t13.acceptance_criteria == ["Config file overrides environment defaults"]
    assert (task(spec, "2.1").dependencies, task(spec, "2.1").estimated_time) == (
        ["1.2"],
        "2 hours",
    )
    assert task(spec, "2.2").optional is True
    assert task(spec, "2.2").estimated_time == "2 hours"
    assert task(spec, "2.2").dependencies == ["1.2", "2.1"]
    assert task(spec, "2.3").description == "- Skipped: storage team owns uploads now"


def test_praxis_checklists_after_the_phases_are_warned_not_parsed() -> None:
    spec = parse("praxis.md")
    assert [(w.line, w.message) for w in spec.warnings] == [
        (100, "task-like item in section 'Project Completion' was ignored"),
        (101, "task-like item in section 'Project Completion' was ignored"),
    ]
    # "## Time Estimates" lists "- **Phase 1:** 4 hours": not a phase.
    assert [p.number for p in spec.phases] == [1, 2]


def test_agent_os_phase_zero_label_variants_and_gates() -> None:
    spec = parse("agent_os.md")
    assert outline(spec) == [
        (0, "SETUP AND ANALYSIS", [
            ("0.1", "Read the existing middleware stack", "done"),
            ("0.2", "Write the design note", "done"),
        ]),
        (1, "Token Bucket Core", [
            ("1.1", "Implement the token bucket", "todo"),
            ("1.2", "Persist buckets in Redis", "in_progress"),
            ("1.3", "Memcached backend", "skipped"),
            ("1.4", "Property-based tests for refill math", "todo"),
        ]),
        (2, "Rollout", [
            ("2.1", "Add the feature flag", "done"),
            ("2.2", "Canary in one region", "todo"),
        ]),
    ]  # fmt: skip
    assert [p.estimated_duration for p in spec.phases] == ["1 day", "2 days", ""]
    assert [p.validation_gate for p in spec.phases] == [
        ["Design note reviewed", "Middleware entry points listed"],
        ["Unit tests green", "p99 overhead below 1 ms"],
        ["Dashboards show no 429 spikes"],
    ]
    assert (task(spec, "0.1").estimated_time, task(spec, "0.1").dependencies) == ("2 hours", [])
    assert (task(spec, "0.2").estimated_time, task(spec, "0.2").dependencies) == ("1 hour", ["0.1"])
    t11 = task(spec, "1.1")
    assert (t11.estimated_time, t11.dependencies) == ("3 hours", ["0.2"])
    assert t11.acceptance_criteria == [
        "Refill rate is configurable",
        "Burst size is respected",
        "Thread safe under 100 concurrent callers",
    ]
    assert t11.description == "- Uses a monotonic clock, never wall time"
    assert task(spec, "1.2").dependencies == ["1.1", "0.2"]
    assert task(spec, "1.3").dependencies == []
    assert [task(spec, i).optional for i in ("1.3", "1.4", "2.1", "2.2")] == [
        False,
        True,
        False,
        True,
    ]
    assert task(spec, "2.2").acceptance_criteria == ["Error rate unchanged after 24 hours"]
    assert spec.phases[0].description == ""


# --- tasks as headings ---------------------------------------------------------


def test_heading_tasks_with_description_and_metadata() -> None:
    spec = parse("heading_tasks.md")
    assert outline(spec) == [
        (1, "Indexing", [
            ("1.1", "Define the document schema", "todo"),
            ("1.2", "Write the bulk indexer", "todo"),
        ]),
        (2, "Querying", [
            ("2.1", "Query parser", "done"),
            ("2.2", "Ranking", "todo"),
        ]),
    ]  # fmt: skip
    assert [p.line for p in spec.phases] == [3, 36]
    assert [t.line for p in spec.phases for t in p.tasks] == [7, 18, 38, 44]
    t11 = task(spec, "1.1")
    assert t11.description == "Describe every indexed field and its analyzer."
    assert (t11.estimated_time, t11.dependencies) == ("2 hours", [])
    assert t11.acceptance_criteria == ["Schema file checked in", "Analyzer choices documented"]
    t12 = task(spec, "1.2")
    assert t12.description == (
        "- Batches of 500 documents\n- Retries with backoff\n\n"
        "##### Notes\n\nBackpressure is handled by the queue, not the indexer."
    )
    assert (t12.estimated_time, t12.dependencies) == ("1 day", ["1.1"])
    assert task(spec, "2.1").dependencies == ["1.1", "1.2"]
    assert task(spec, "2.2").acceptance_criteria == ["NDCG@10 >= 0.7"]
    assert phase(spec, 1).description == "Build the indexing pipeline first."
    assert phase(spec, 1).validation_gate == [
        "1M documents indexed in under 10 minutes",
        "Index size within budget",
    ]
    assert phase(spec, 2).validation_gate == ["Search p95 latency below 200 ms."]
    assert spec.warnings == []


def test_heading_tasks_phase_task_ids_and_checkpoint_heading() -> None:
    spec = parse("heading_tasks_pt.md")
    assert outline(spec) == [
        (1, "Preparation", [
            ("P1-T1", "Snapshot current invoices", "todo"),
            ("P1-T2", "Freeze pricing changes", "todo"),
        ]),
        (2, "Cutover", [
            ("P2-T1", "Switch writes to the new service", "todo"),
            ("P2-T2", "Decommission the old cron", "todo"),
        ]),
    ]  # fmt: skip
    assert task(spec, "P1-T1").estimated_time == "1 hour"
    assert task(spec, "P1-T2").description == "Announce the freeze in #billing."
    assert task(spec, "P2-T1").dependencies == ["P1-T1", "P1-T2"]
    assert task(spec, "P2-T1").acceptance_criteria == ["No dropped invoices in shadow mode"]
    assert phase(spec, 1).validation_gate == ["Snapshot verified against ledger totals"]
    assert phase(spec, 2).validation_gate == []
    assert [(w.line, w.message) for w in spec.warnings] == [
        (30, "task-like item in section 'Rollback Plan' was ignored")
    ]


# --- no phase headings -----------------------------------------------------------


def test_numbered_list_without_phase_headings() -> None:
    spec = parse("numbered.md")
    assert outline(spec) == [
        (1, "Set up the project", [
            ("1.1", "Create the virtualenv", "todo"),
            ("1.2", "Install dependencies", "todo"),
        ]),
        (2, "Build the parser", [
            ("2.1", "Write the tokenizer", "todo"),
            ("2.2", "Write the tree walker", "done"),
        ]),
        (3, "Ship it", [("3.1", "Ship it", "todo")]),
    ]  # fmt: skip
    assert [p.line for p in spec.phases] == [5, 9, 13]
    assert task(spec, "1.2").estimated_time == "10 minutes"
    assert spec.warnings == []  # the numbered list under "## Notes" is not phases


def test_flat_checklist_is_one_phase_with_a_warning() -> None:
    spec = parse("flat_checklist.md")
    assert outline(spec) == [
        (1, "Chores", [
            ("1.1", "Rotate the API keys", "todo"),
            ("1.2", "Renew the TLS certificate", "done"),
            ("1.3", "Archive old logs", "todo"),
        ]),
    ]  # fmt: skip
    assert [w.line for w in spec.warnings] == [3]
    assert "read as one phase" in spec.warnings[0].message


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

    assert blocks(tasks_parser._MD) == blocks(plain)


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

    monkeypatch.setattr(tasks_parser, "phase_layout", boom)
    with pytest.raises(SpecParseError, match="kaboom") as err:
        parse_tasks_md("## Phase 1: A\n- [ ] x\n", source="t.md")
    assert err.value.line == 1
    assert isinstance(err.value.__cause__, RuntimeError)


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
