"""tasks.md parser, one fixture per family: the phase and task layouts each tool writes.

spec-kit (current and legacy dotted phases), Kiro numbered items, prAxIs and
agent-os phase/task metadata and gates, tasks written as headings, and files
with no phase headings (numbered lists, a flat checklist). No server needed;
the fixtures are in ``tests/fixtures/tasks/``.
"""

from __future__ import annotations

from tasks_helpers import outline, parse, phase, task

from phasegate.activities.tasks_md import parse_tasks_md

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
