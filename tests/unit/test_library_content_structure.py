"""The shipped workflow library (library/) is complete and loadable.

Unit tests, no Temporal server: every workflow's metadata.json names its folder
and describes every phase; each static phase has phase.md, a gate file and the
task files metadata.json lists; spec_execution_v1 is dynamic with its templates
and base gate; the library check finds no errors or warnings.
"""

from __future__ import annotations

import re

import pytest
from library_helpers import LIBRARY, SHIPPED, metadata, static_phases

from phasegate.activities.library_check import check_library
from phasegate.domain.library import WorkflowMetadata


@pytest.mark.parametrize("workflow", SHIPPED)
def test_metadata_parses_and_names_its_directory(workflow: str) -> None:
    data = metadata(workflow)
    meta = WorkflowMetadata.model_validate(data)
    assert meta.workflow_type == workflow
    assert meta.name and meta.description and meta.version
    numbers = [p.phase_number for p in meta.static_phases]
    assert numbers == list(range(len(numbers))), "static phases are numbered 0..N-1"
    for phase in data["phases"]:
        for key in ("phase_name", "purpose", "estimated_effort"):
            assert phase.get(key), f"{workflow} phase {phase['phase_number']}: {key} is empty"
        assert phase["key_deliverables"] and phase["validation_criteria"]
        if isinstance(phase["phase_number"], int):
            assert len(phase["tasks"]) >= 2, "a static phase has task files"
            assert [t["task_number"] for t in phase["tasks"]] == list(
                range(1, len(phase["tasks"]) + 1)
            )


@pytest.mark.parametrize("workflow", SHIPPED)
def test_every_phase_has_content_gate_and_task_files(workflow: str) -> None:
    wdir = LIBRARY / workflow
    for phase in static_phases(workflow):
        pdir = wdir / "phases" / str(phase["phase_number"])
        assert (pdir / "phase.md").is_file(), pdir
        assert (pdir / "gate-definition.yaml").is_file(), pdir
        for task in phase["tasks"]:
            assert re.fullmatch(r"task-\d+-[a-z0-9-]+\.md", task["file"]), task["file"]
            assert task["file"].startswith(f"task-{task['task_number']}-")
            assert (pdir / task["file"]).is_file(), pdir / task["file"]
            assert task["name"] and task["purpose"]
        listed = {t["file"] for t in phase["tasks"]}
        on_disk = {f.name for f in pdir.glob("task-*.md")}
        assert on_disk == listed, f"{pdir}: task files not listed in metadata.json"


def test_spec_execution_is_dynamic_with_templates_and_base_gate() -> None:
    data = metadata("spec_execution_v1")
    assert data["dynamic_phases"] is True
    assert [p["phase_number"] for p in data["phases"]] == [0, "1-N"]
    cfg = data["dynamic_config"]
    assert cfg["source_type"] == "spec_tasks_md"
    assert cfg["source_path_key"] == "spec_path"
    assert cfg["parser"] == "spec_tasks_parser"
    wdir = LIBRARY / "spec_execution_v1"
    for key in ("phase", "task"):
        assert (wdir / cfg["templates"][key]).is_file()
    assert (wdir / "phases" / "dynamic" / "gate-definition.yaml").is_file()
    for doc in ("task-parser.md", "validation-gates.md", "dependency-resolver.md"):
        assert (wdir / "core" / doc).stat().st_size > 500, doc


@pytest.mark.parametrize("workflow", SHIPPED)
def test_core_docs_exist(workflow: str) -> None:
    docs = list((LIBRARY / workflow / "core").glob("*.md"))
    assert docs, f"{workflow}/core has no helper docs"


def test_library_check_is_clean() -> None:
    report = check_library(str(LIBRARY))
    assert report.errors == [] and report.warnings == []
    assert sorted(report.workflows) == sorted(SHIPPED)
