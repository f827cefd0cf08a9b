"""prAxIs OS libraries load as prAxIs serves them.

``tests/fixtures/praxis/universal/workflows`` holds the five workflows of prAxIs
OS's ``universal/workflows`` as collected from public copies (see SOURCES.md):
real files, with the gaps and disagreements the real folders have. They must
load with no errors (warnings name each disagreement), and a session of each
must walk to ``completed`` with phasegate.testing's ScriptedAgent, one submission
per phase. The rules behind that are unit-tested on small
folders built here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from phasegate.activities.definitions import DefinitionActivities, render_static_phase
from phasegate.activities.library import find_workflow, list_workflows, workflow_issues
from phasegate.activities.library_check import check_library
from phasegate.activities.templates import Renderer
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import DefinitionError
from phasegate.domain.library import PhaseMetadata, TaskMetadata, reconcile_tasks
from phasegate.domain.session.messages import PhaseView, SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest
from phasegate.testing import (
    ScriptedAgent,
    unsigned_approver,
)

REPO = Path(__file__).resolve().parent.parent
PRAXIS = REPO / "tests" / "fixtures" / "praxis" / "universal" / "workflows"
FIVE = (
    "praxis_os_upgrade_v1",
    "spec_creation_v1",
    "spec_execution_v1",
    "standards_creation_v1",
    "workflow_creation_v1",
)
SPEC = REPO / "examples" / "specs" / "todo-api"
# Warnings per workflow (library check): every disagreement between metadata.json and
# the folder, each absent phase.md or gate file, each file served verbatim.
EXPECTED_WARNINGS = {
    "praxis_os_upgrade_v1": 13,
    "spec_creation_v1": 26,
    "spec_execution_v1": 2,
    "standards_creation_v1": 10,
    "workflow_creation_v1": 33,
}


def _report(workflow: str, tmp_path: Path) -> Any:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / workflow).symlink_to(PRAXIS / workflow)
    return check_library(str(lib))


# --------------------------------------------------------------------------- the five


def test_library_check_reports_no_errors() -> None:
    report = check_library(str(PRAXIS))
    assert report.errors == []
    assert sorted(report.workflows) == sorted(FIVE)
    assert len(report.warnings) == sum(EXPECTED_WARNINGS.values())


@pytest.mark.parametrize("workflow", FIVE)
def test_each_workflow_loads_without_errors(workflow: str, tmp_path: Path) -> None:
    report = _report(workflow, tmp_path)
    assert report.errors == [] and report.workflows == [workflow]
    assert len(report.warnings) == EXPECTED_WARNINGS[workflow], "\n".join(report.warnings)
    for warning in report.warnings:  # every warning says where, what, and what was done
        where, _, rest = warning.partition(": ")
        assert str(PRAXIS / workflow) in where or workflow in where, warning
        assert "; " in rest, warning


def test_workflow_creation_disagreements_are_warnings() -> None:
    """Upstream workflow_creation_v1's metadata.json and folders disagree a lot."""
    issues = [str(i) for i in workflow_issues(PRAXIS / "workflow_creation_v1")]
    meta = f"{PRAXIS / 'workflow_creation_v1' / 'metadata.json'}"
    p4 = PRAXIS / "workflow_creation_v1" / "phases" / "4"
    assert (
        f"{meta}: phases[4].tasks[0].file: names task-1-load-target-definition.md, which is "
        "not in phases/4/; not served: prAxIs serves the task-N-*.md files the folder holds"
    ) in issues
    assert (
        f"{p4}/task-3-verify-three-tier.md: a second file for task 3 (besides "
        "task-3-generate-task-files.md); both are served; this one has task id "
        "'3-verify-three-tier'"
    ) in issues
    assert (
        f"{meta}: phases[4].tasks[5].task_number: 6 for task-2-audit-command-coverage.md, "
        "whose name says task 2; served as task 2, in folder order"
    ) in issues
    assert (
        f"{PRAXIS / 'workflow_creation_v1' / 'phases' / '0' / 'phase.md'}: absent; the phase "
        "is served from an overview built from metadata.json and its 4 task file(s)"
    ) in issues
    assert all(i.severity == "warning" for i in workflow_issues(PRAXIS / "workflow_creation_v1"))


def test_a_task_that_is_not_a_jinja_template_is_served_verbatim(tmp_path: Path) -> None:
    phases = _engine_phases(tmp_path, "workflow_creation_v1")
    task = next(t for t in phases[4].tasks if t.id == "3")
    assert "`{{phase_number}}`" in task.content  # prAxIs' own placeholder notation, as written
    report = _report("workflow_creation_v1", tmp_path)
    assert any(
        "task-3-generate-task-files.md:37: template render failed: 'phase_number' is undefined; "
        "served verbatim" in w
        for w in report.warnings
    )


def test_tasks_are_served_from_the_folder(tmp_path: Path) -> None:
    phases = _engine_phases(tmp_path, "spec_creation_v1")
    ids = [[t.id for t in p.tasks] for p in phases]
    assert ids[0] == ["0", "1", "3", "4"]  # metadata lists 0-3; task-2 file absent, task-4 extra
    assert ids[1] == ["2", "2-user-stories", "4", "5"]
    assert [t.number for t in phases[1].tasks] == [1, 2, 3, 4]
    assert phases[1].tasks[0].name == "business-goals"  # described by metadata.json
    assert phases[1].tasks[1].name == "User stories"  # unlisted: named from its file
    upgrade = _engine_phases(tmp_path, "praxis_os_upgrade_v1")
    assert [t.id for t in upgrade[0].tasks] == ["1", "4"]
    assert upgrade[0].content.startswith("# Phase 0: Pre-Flight Checks\n")  # overview
    assert "task-4-check-concurrent.md" in upgrade[0].content
    assert "Source repo is clean (no uncommitted changes)" in upgrade[0].content


def test_a_workflow_without_metadata_takes_its_phases_from_folders(tmp_path: Path) -> None:
    found = {w.metadata.workflow_type: w for w in list_workflows([str(PRAXIS)])}
    assert set(found) == set(FIVE)
    standards = find_workflow("standards_creation_v1", [str(PRAXIS)])
    assert [p.phase_number for p in standards.metadata.phases] == [0, 1, 2, 3, 4, 5]
    phases = _engine_phases(tmp_path, "standards_creation_v1")
    assert phases[0].gate.fields == {}  # no gate file, no phase.md: permissive, as prAxIs
    assert set(phases[3].gate.fields) >= {"queries_tested", "average_relevance"}


def test_dynamic_workflow_follows_its_dynamic_config(tmp_path: Path) -> None:
    phases = _engine_phases(tmp_path, "spec_execution_v1", spec=SPEC)
    assert [p.label for p in phases] == ["0", "1", "2", "3"]
    assert [t.id for t in phases[0].tasks] == ["3"]  # tasks 1 and 2: files absent upstream
    assert phases[1].content.startswith("# Phase 1: ")  # [PHASE_NUMBER] filled
    assert "[PHASE_NUMBER]" not in phases[1].content


# --------------------------------------------------------------------------- the rules


def _tasks(*pairs: tuple[int, str]) -> list[TaskMetadata]:
    return [TaskMetadata(task_number=n, name=f.removesuffix(".md"), file=f) for n, f in pairs]


def _reconcile(listed: list[TaskMetadata], files: list[str]) -> tuple[list[str], list[str]]:
    served, issues = reconcile_tasks(
        listed, files, metadata_where="m.json: phases[0]", folder_where="p/0", label="phases/0"
    )
    return [s.id for s in served], [str(i) for i in issues]


def test_metadata_lists_more_tasks_than_the_folder() -> None:
    ids, issues = _reconcile(_tasks((1, "task-1-a.md"), (2, "task-2-b.md")), ["task-1-a.md"])
    assert ids == ["1"]
    assert issues == [
        (
            "m.json: phases[0].tasks[1].file: names task-2-b.md, which is not in phases/0/; "
            "not served: prAxIs serves the task-N-*.md files the folder holds"
        )
    ]


def test_folder_holds_more_tasks_than_metadata() -> None:
    ids, issues = _reconcile(_tasks((1, "task-1-a.md")), ["task-1-a.md", "task-2-b.md", "x.md"])
    assert ids == ["1", "2"]
    assert issues == [
        (
            "p/0/task-2-b.md: not listed in metadata.json phases[0].tasks; "
            "served as task 2 (the folder decides, as in prAxIs)"
        )
    ]


def test_missing_task_file_points_at_a_renamed_one() -> None:
    ids, issues = _reconcile(_tasks((3, "task-3-user-stories.md")), ["task-2-user-stories.md"])
    assert ids == ["2"]
    assert "(the folder has task-2-user-stories.md)" in issues[-1]


def test_no_metadata_tasks_means_the_folder_quietly() -> None:
    ids, issues = _reconcile([], ["task-2-b.md", "task-10-z.md", "task-1-a.md", "phase.md"])
    assert ids == ["1", "2", "10"] and issues == []


def test_duplicate_numbers_and_entries_without_file() -> None:
    listed = [TaskMetadata(task_number=3, name="by number")]
    ids, issues = _reconcile(listed, ["task-3-x.md", "task-3-y.md"])
    assert ids == ["3", "3-y"]
    assert issues == [
        (
            "p/0/task-3-y.md: a second file for task 3 (besides task-3-x.md); both are served; "
            "this one has task id '3-y'"
        )
    ]


def test_task_number_that_disagrees_with_the_file_name() -> None:
    ids, issues = _reconcile(_tasks((5, "task-1-a.md")), ["task-1-a.md"])
    assert ids == ["1"]
    assert issues == [
        (
            "m.json: phases[0].tasks[0].task_number: 5 for task-1-a.md, whose name says task 1; "
            "served as task 1, in folder order"
        )
    ]


def test_phase_numbers_as_int_string_or_range() -> None:
    assert PhaseMetadata(phase_number="0").phase_number == 0
    assert PhaseMetadata(phase_number=2).is_static
    assert not PhaseMetadata(phase_number="1-N").is_static


def _workflow(
    root: Path, name: str, metadata: dict[str, Any] | None, files: dict[str, str]
) -> Path:
    wdir = root / name
    wdir.mkdir(parents=True)
    if metadata is not None:
        (wdir / "metadata.json").write_text(json.dumps(metadata), encoding="utf-8")
    for rel, text in files.items():
        (wdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (wdir / rel).write_text(text, encoding="utf-8")
    return wdir


def test_unservable_phase_is_an_error(tmp_path: Path) -> None:
    meta = {"phases": [{"phase_number": 0, "phase_name": "Ok"}, {"phase_number": 1},
                       {"phase_number": 2, "phase_name": "Gone"}]}  # fmt: skip
    files = {"phases/0/phase.md": "# Phase 0\n", "phases/1/gate-definition.yaml": "{}\n"}
    wdir = _workflow(tmp_path / "lib", "w_v1", meta, files)
    report = check_library(str(tmp_path / "lib"))
    unservable = "the phase cannot be served; add phase.md or task-N-*.md files to its folder"
    assert report.errors == [
        f"{wdir}/phases/1/phase.md: absent, and the folder has no task-N-*.md files; {unservable}",
        f"{wdir}/phases/2: phase 2 (Gone) has no folder; {unservable}",
    ]
    wf = find_workflow("w_v1", [str(tmp_path / "lib")])
    session = {"workflow_type": "w_v1", "target": "", "total_phases": 3}
    with pytest.raises(DefinitionError, match="cannot be served"):
        render_static_phase(Renderer(), wf, session, 1)


def test_folder_name_is_the_workflow_type(tmp_path: Path) -> None:
    meta = {"workflow_type": "workflow_creation", "phases": [{"phase_number": 0}]}
    wdir = _workflow(tmp_path / "lib", "workflow_creation_v1", meta, {"phases/0/phase.md": "x"})
    assert find_workflow("workflow_creation_v1", [str(tmp_path / "lib")]).path == wdir
    assert str(workflow_issues(wdir)[0]) == (
        f"{wdir}/metadata.json: workflow_type: 'workflow_creation' differs from the folder "
        "name; the workflow is started as 'workflow_creation_v1', the folder name, as in prAxIs"
    )


def test_unsupported_dynamic_source_is_an_error(tmp_path: Path) -> None:
    meta = {"phases": [{"phase_number": 0}], "dynamic_phases": True,
            "dynamic_config": {"source_type": "workflow_definition",
                               "source_path_key": "definition_path"}}  # fmt: skip
    files = {"phases/0/phase.md": "x", "phases/dynamic/phase-template.md": "p",
             "phases/dynamic/task-template.md": "t"}  # fmt: skip
    _workflow(tmp_path / "lib", "d_v1", meta, files)
    report = check_library(str(tmp_path / "lib"))
    assert len(report.errors) == 1 and "'workflow_definition' is not supported" in report.errors[0]


def test_legacy_placeholders_are_filled_when_served_verbatim(tmp_path: Path) -> None:
    files = {"phases/0/phase.md": "# [PHASE_NAME]\n\nUse `{{ task_name }}` in templates.\n"}
    meta = {"phases": [{"phase_number": 0, "phase_name": "Setup"}]}
    _workflow(tmp_path / "lib", "v_v1", meta, files)
    wf = find_workflow("v_v1", [str(tmp_path / "lib")])
    session = {"workflow_type": "v_v1", "target": "", "total_phases": 1}
    phase, issues = render_static_phase(Renderer(), wf, session, 0)
    assert phase.content == "# Setup\n\nUse `{{ task_name }}` in templates.\n"
    assert any("served verbatim" in str(i) for i in issues)


# --------------------------------------------------------------------------- walking them


def _engine_phases(tmp_path: Path, workflow: str, spec: Path | None = None) -> list[Any]:
    acts = DefinitionActivities([str(PRAXIS)], str(tmp_path / "home"))
    options = SessionOptions(spec_path=str(spec)) if spec else SessionOptions()
    target = str(spec) if spec else ""  # a spec is read from inside the session's target
    plan = acts.plan(LoadSessionRequest(workflow_type=workflow, target=target, options=options))
    wf = find_workflow(workflow, [str(PRAXIS)])
    return [acts.build_phase(wf, plan.ref, i) for i in range(plan.ref.total_phases)]


# No evidence table: none of the five documents a JSON example, so the scripted agent
# builds every evidence object from each field's JSON Schema, including the values only
# a lambda validator reveals (prAxIs' equals_high, greater_than_or_equal_5, ...), which
# it finds by trying the validator's own literals.
@pytest.mark.parametrize("workflow", FIVE)
async def test_session_walks_to_completed(workflow: str, settings_for, run_worker, env, tmp_path):
    settings = settings_for(PRAXIS)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        options = None
        if workflow == "spec_execution_v1":  # a spec is read from inside the target
            shutil.copytree(SPEC, tmp_path / "spec")
            options = SessionOptions(spec_path=str(tmp_path / "spec"))
        sid = await pg.start(workflow, str(tmp_path), options=options)
        agent = ScriptedAgent(pg, approve=unsigned_approver("lead"))
        final = await agent.walk(sid)
        assert final.status == "completed"
        walked = list(range(final.total_phases))
        assert [s.phase for s in agent.steps] == walked  # one submission per phase
        assert all(s.result.passed and not s.result.warnings for s in agent.steps)
        for index in walked:  # every phase served real content
            view = await pg.phase(sid, index)
            assert isinstance(view, PhaseView) and view.state == "completed", view
            assert view.content.strip(), (workflow, index)
        summary = await pg.result(sid)
        assert summary.status == "completed" and summary.completed_phases == walked
