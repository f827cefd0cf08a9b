"""Gates parsed from phase markdown and from tasks.md validation-gate items."""

from __future__ import annotations

import pytest

from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.gate_fallback import gate_from_checklist, gate_from_markdown, slugify_field

SOURCE = "library/demo/phases/4/phase.md"

# The shape of prAxIs OS workflow_creation_v1 phase files.
PRAXIS_TABLE_PHASE = """# Phase 4: Phase Content Generation

**Purpose**: Generate all phase.md and task files for target workflow
**Deliverable**: Complete target workflow with all phase and task files populated

---

## Tasks

| # | Task | File | Status |
|---|------|------|--------|
| 1 | Load Target Definition | task-1-load-target-definition.md | ⬜ |
| 2 | Generate Phase Files | task-2-generate-phase-files.md | ⬜ |

---

## Validation Gate

🚨 **CRITICAL**: Phase 3 MUST complete successfully before proceeding to Phase 4.

**Evidence Required**:

| Evidence | Type | Validator | Description |
|----------|------|-----------|-------------|
| `phase_files_created` | integer | greater_than_0 | Number of phase.md files created |
| `workflow_directory_path` | string | directory_exists | Path to created workflow directory |
| `all_phases_populated` | boolean | is_true | All target phases have complete files |

**Human Approval**: Not required

---

## Navigation

**Start Here**: 🎯 NEXT-MANDATORY: task-1-load-target-definition.md
"""

# An older agent-os style phase: a checkpoint heading with a checklist.
CHECKLIST_PHASE = """# Phase 1: Requirements Gathering

Work through the tasks, then pass the checkpoint.

- [ ] Read the existing design doc (not part of the gate)

```markdown
## Checkpoint
- [ ] `never_parsed`: inside a code fence
```

## ✅ Phase 1 Checkpoint

**Before proceeding to Phase 2, validate:**

- [ ] `srd_created`: true
- [ ] `business_goals_count`: 3
- [ ] `tests_passing`: all tests pass
- [ ] All unit tests pass
- [ ] srd.md reviewed with the user ✅/❌
- [x] `pytest` green

### Evidence notes

Record the `requirements_files` you touched.

## Next Steps

- [ ] `not_a_requirement`: outside the gate
Mention of `other_field` here is ignored.
"""

MUST_PROVIDE_PHASE = """# Phase 2: Design

You must provide `design_doc_path` and **diagram_count** before advancing.

To complete this phase you MUST provide:

- `api_endpoints_list`: every endpoint you designed
- A short risk summary

Then stop.

- this list is unrelated
"""


def test_praxis_evidence_table() -> None:
    gate = gate_from_markdown(PRAXIS_TABLE_PHASE, source=SOURCE)
    assert gate.source == f"{SOURCE} (fallback)"
    assert list(gate.fields) == [
        "phase_files_created", "workflow_directory_path", "all_phases_populated",
    ]  # fmt: skip
    created = gate.fields["phase_files_created"]
    assert created.type == "integer" and created.required
    assert created.validator == "greater_than_0"
    assert created.description == "Number of phase.md files created"
    # An unknown validator name (directory_exists) is not guessed at.
    assert gate.fields["workflow_directory_path"].validator is None
    assert gate.fields["all_phases_populated"].validator == "is_true"
    assert gate.validators == {
        "greater_than_0": "lambda x: x > 0",
        "is_true": "lambda x: x == True",
    }
    assert gate.approval.required is False
    assert gate.strict is True


def test_praxis_table_gate_evaluates() -> None:
    gate = gate_from_markdown(PRAXIS_TABLE_PHASE, source=SOURCE)
    good = {"phase_files_created": 3, "workflow_directory_path": "w/", "all_phases_populated": True}
    assert evaluate_gate(gate, good).passed
    result = evaluate_gate(gate, {**good, "phase_files_created": 0, "all_phases_populated": False})
    assert [p.rule for p in result.problems] == ["validator:greater_than_0", "validator:is_true"]
    assert not evaluate_gate(gate, {}).passed


def test_checklist_under_checkpoint_heading() -> None:
    gate = gate_from_markdown(CHECKLIST_PHASE, source=SOURCE)
    assert list(gate.fields) == [
        "srd_created",
        "business_goals_count",
        "tests_passing",
        "all_unit_tests_pass",
        "srd_md_reviewed_with_the_user",
        "pytest_green",
        "requirements_files",
    ]
    types = {name: spec.type for name, spec in gate.fields.items()}
    assert types == {
        "srd_created": "boolean",
        "business_goals_count": "integer",
        "tests_passing": "boolean",
        "all_unit_tests_pass": "boolean",
        "srd_md_reviewed_with_the_user": "boolean",
        "pytest_green": "boolean",
        "requirements_files": "list",
    }
    assert all(spec.required for spec in gate.fields.values())
    assert gate.fields["all_unit_tests_pass"].validator == "is_true"
    assert gate.fields["all_unit_tests_pass"].description == "All unit tests pass"
    assert gate.fields["tests_passing"].description == "all tests pass"


def test_checklist_gate_blocks_false_booleans() -> None:
    gate = gate_from_markdown(CHECKLIST_PHASE, source=SOURCE)
    evidence = {
        "srd_created": True,
        "business_goals_count": 3,
        "tests_passing": True,
        "all_unit_tests_pass": True,
        "srd_md_reviewed_with_the_user": True,
        "pytest_green": True,
        "requirements_files": ["srd.md"],
    }
    assert evaluate_gate(gate, evidence).passed
    result = evaluate_gate(gate, {**evidence, "all_unit_tests_pass": False})
    assert [p.field for p in result.problems] == ["all_unit_tests_pass"]


def test_must_provide_sentences_and_lists() -> None:
    gate = gate_from_markdown(MUST_PROVIDE_PHASE, source=SOURCE)
    assert list(gate.fields) == [
        "design_doc_path", "diagram_count", "api_endpoints_list", "a_short_risk_summary",
    ]  # fmt: skip
    assert gate.fields["diagram_count"].type == "integer"
    assert gate.fields["api_endpoints_list"].type == "list"
    assert gate.fields["api_endpoints_list"].description == "every endpoint you designed"
    assert gate.fields["a_short_risk_summary"].type == "boolean"


def test_must_provide_colon_list_on_one_line() -> None:
    gate = gate_from_markdown("Must provide: `a_value`, `b`, `is_ready`.", source=SOURCE)
    assert [(n, s.type) for n, s in gate.fields.items()] == [
        ("a_value", "string"), ("b", "string"), ("is_ready", "boolean"),
    ]  # fmt: skip


def test_bold_label_gate_block_and_approval() -> None:
    text = """## Phase 3: Build

Some text with `ignored_name`.

**Validation Gate:**
- [ ] `coverage_percent`: at least 80
- [ ] Linting clean
**Human Approval**: Required

## Phase 4: Ship
- [ ] not in a gate
"""
    gate = gate_from_markdown(text, source=SOURCE)
    assert list(gate.fields) == ["coverage_percent", "linting_clean"]
    assert gate.fields["coverage_percent"].type == "number"
    assert gate.approval.required is True


def test_evidence_heading_with_bold_names() -> None:
    text = """## Evidence

Submit **commit_sha** and **has_changelog**; see `docs/guide.md`. **Important** note.
"""
    gate = gate_from_markdown(text, source=SOURCE)
    assert list(gate.fields) == ["commit_sha", "has_changelog"]
    assert gate.fields["has_changelog"].type == "boolean"


def test_tilde_fences_and_nested_fences_are_skipped() -> None:
    text = """## Validation Gate
~~~
- [ ] `in_tilde_fence`: x
~~~
````
```
- [ ] `in_long_fence`: x
```
````
- [ ] `real_field`: y
"""
    assert list(gate_from_markdown(text, source=SOURCE).fields) == ["real_field"]


@pytest.mark.parametrize(
    "text",
    ["", "# Phase 0\n\nJust prose, no requirements.\n", "## Tasks\n- [ ] Do the thing\n"],
)
def test_no_requirements_gives_an_empty_gate(text: str) -> None:
    gate = gate_from_markdown(text, source="phase.md")
    assert gate.fields == {} and gate.validators == {}
    assert gate.source == "phase.md (fallback)"
    assert evaluate_gate(gate, {}).passed


def test_source_already_marked_fallback_is_kept() -> None:
    assert gate_from_markdown("", source="phase.md (fallback)").source == "phase.md (fallback)"


def test_duplicate_names_keep_first_position_but_table_type_wins() -> None:
    text = """## Checkpoint
Provide `files_total` first.

| Evidence | Type |
|---|---|
| `files_total` | string |
"""
    gate = gate_from_markdown(text, source=SOURCE)
    assert list(gate.fields) == ["files_total"]
    assert gate.fields["files_total"].type == "string"


def test_gate_from_checklist_items() -> None:
    items = [
        "All tests pass",
        "- [ ] `coverage_percent`: >= 80",
        "[x] Code reviewed by a human",
        "`tests_run_count`: 12",
        "  ",
        "Linting passes (ruff + mypy)",
    ]
    gate = gate_from_checklist(items, source="tasks.md: Phase 2 validation gate")
    assert gate.source == "tasks.md: Phase 2 validation gate"
    assert [(n, s.type) for n, s in gate.fields.items()] == [
        ("all_tests_pass", "boolean"),
        ("coverage_percent", "number"),
        ("code_reviewed_by_a_human", "boolean"),
        ("tests_run_count", "integer"),
        ("linting_passes_ruff_mypy", "boolean"),
    ]
    assert evaluate_gate(
        gate,
        {
            "all_tests_pass": True,
            "coverage_percent": 85.5,
            "code_reviewed_by_a_human": True,
            "tests_run_count": 12,
            "linting_passes_ruff_mypy": True,
        },
    ).passed
    assert not evaluate_gate(gate, {"all_tests_pass": False}).passed


def test_gate_from_empty_checklist() -> None:
    assert gate_from_checklist([], source="tasks.md").fields == {}


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("All unit tests pass", "all_unit_tests_pass"),
        ("  Tests: 100% passing!  ", "tests_100_passing"),
        ("✅ Résumé généré", "resume_genere"),
        ("80% coverage", "item_80_coverage"),
        ("`code` and **bold**", "code_and_bold"),
        ("???", "item"),
        ("", "item"),
        (
            "Every public function has a docstring and type hints everywhere",
            "every_public_function_has_a_docstring",
        ),
        ("a" * 60, "a" * 40),
        # Cut at a word that fits, never after a word that cannot end a name.
        ("Repository is injected, not imported as a global", "repository_is_injected_not_imported"),
        ("Validation errors return 422 with the offending field", "validation_errors_return_422"),
        (
            "Every endpoint in specs.md section 3 is implemented",
            "every_endpoint_in_specs_md_section_3",
        ),
        ("Sign in", "sign_in"),  # short enough: kept whole, even on a small word
    ],
)
def test_slugify_field(text: str, slug: str) -> None:
    result = slugify_field(text)
    assert result == slug
    assert len(result) <= 40 and result.isidentifier()


def test_tool_and_update_names_are_not_fields() -> None:
    text = """## Evidence

Submit with the `submit_checkpoint` update, or call `complete_phase`.
Run `run_tests()` first, then report `tests_run_count` and `report_path`.
"""
    gate = gate_from_markdown(text, source=SOURCE)
    assert list(gate.fields) == ["tests_run_count", "report_path"]


def test_colliding_slugs_get_suffixes_and_repeats_merge() -> None:
    long = "Every public function has a docstring and type hints"
    items = [f"{long} in module a", f"{long} in module b", f"{long} in module a", "Done!"]
    gate = gate_from_checklist(items, source="tasks.md")
    assert list(gate.fields) == [
        "every_public_function_has_a_docstring",
        "every_public_function_has_a_docstring_2",
        "done",
    ]


def test_a_suffix_never_cuts_a_word() -> None:
    text = "Formatting of generated reports matches upstream style exactly"
    gate = gate_from_checklist([f"{text} (a)", f"{text} (b)"], source="tasks.md")
    assert list(gate.fields) == [
        "formatting_of_generated_reports_matches",
        "formatting_of_generated_reports_2",
    ]


# The validator column of prAxIs OS standards_creation_v1 / workflow_creation_v1 tables.
PARAMETRIC_TABLE = """## Validation Gate

| Evidence | Type | Validator | Description |
|----------|------|-----------|-------------|
| `keyword_density_tldr` | string | equals_high | TL;DR keyword density |
| `query_hooks_count` | integer | greater_than_or_equal_5 | Number of query hooks |
| `average_relevance` | float | greater_than_or_equal_0_85 | Average relevance score |
| `average_rank` | float | less_than_or_equal_2_0 | Average rank |
| `compliance_percent` | integer | percent_gte_95 | Compliant task files |
| `generic_content_detected` | boolean | is_false | No generic placeholder content |
| `workflow_directory_path` | string | directory_exists | Created directory |
"""


def test_parametric_and_negative_validators_from_tables() -> None:
    gate = gate_from_markdown(PARAMETRIC_TABLE, source=SOURCE)
    assert {n: f.validator for n, f in gate.fields.items()} == {
        "keyword_density_tldr": "equals_high",
        "query_hooks_count": "greater_than_or_equal_5",
        "average_relevance": "greater_than_or_equal_0_85",
        "average_rank": "less_than_or_equal_2_0",
        "compliance_percent": "percent_gte_95",
        "generic_content_detected": "is_false",  # not turned into "must be true"
        "workflow_directory_path": None,
    }
    assert gate.validators["greater_than_or_equal_0_85"] == "lambda x: x >= 0.85"
    assert gate.validators["equals_high"] == "lambda x: x == 'high'"
    good = {
        "keyword_density_tldr": "high", "query_hooks_count": 5, "average_relevance": 0.9,
        "average_rank": 1.5, "compliance_percent": 96, "generic_content_detected": False,
        "workflow_directory_path": "w/",
    }  # fmt: skip
    assert evaluate_gate(gate, good).passed
    bad = {**good, "query_hooks_count": 4, "generic_content_detected": True}
    assert [p.field for p in evaluate_gate(gate, bad).problems] == [
        "query_hooks_count", "generic_content_detected",
    ]  # fmt: skip
