"""Whole spec folders as people wrote them in public repositories (issue 18), each kept
unchanged under tests/fixtures/specs/<name>/ with its SOURCE.md, run as sessions of
spec_execution_v1 on the real dev server:

- phase 0 names the design documents the folder's family writes, each one the folder
  really has, and accepts ``required_files_present: true`` for them;
- the spec's phases come out with their written numbers and names (unicode intact),
  and their tasks with their written ids, in the order written;
- the dependencies the folder writes (prose in a task, spec-kit's dependency section)
  and the requirements Kiro's tasks cite reach the task the agent reads. Each expected
  value quotes the line of the real file it comes from.

The scripted agent then walks every phase with the known-good evidence.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from phasegate.activities.tasks_md import read_spec
from phasegate.domain.session.messages import PhaseView, SessionOptions, TaskView
from phasegate.testing import ScriptedAgent, known_good, workspace_for

SPECS = Path(__file__).resolve().parent / "fixtures" / "specs"


@dataclass(frozen=True)
class Folder:
    name: str  # under tests/fixtures/specs/
    where: str  # where the family keeps it in a repository
    documents: tuple[str, ...]  # the family's design documents this folder really has
    labels: tuple[str, ...]  # phase numbers as written
    names: dict[str, str] = field(default_factory=dict)  # label -> phase name as written
    tasks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # label -> task ids
    task_names: dict[str, str] = field(default_factory=dict)  # task id -> name (prefix)
    depends: dict[str, tuple[str, ...]] = field(default_factory=dict)  # task -> deps
    requirements: dict[str, tuple[str, ...]] = field(default_factory=dict)  # Kiro
    warnings: tuple[str, ...] = ()  # parser warnings the real file earns (substrings)


SPECKIT_007 = Folder(
    name="speckit-deacon-007-up-build-parity",
    where="specs/007-up-build-parity",
    documents=("spec.md", "plan.md", "data-model.md", "contracts/", "research.md", "quickstart.md"),
    labels=("1", "2", "3", "4", "5", "N"),  # "## Phase N: Polish & Cross-Cutting Concerns"
    names={
        # "## Phase 3: User Story 1 - Build options respected (Priority: P1) 🎯 MVP"
        "3": "User Story 1 - Build options respected (Priority: P1) 🎯 MVP",
        "N": "Polish & Cross-Cutting Concerns",
    },
    tasks={
        # T021-T024 were added to Phase 3 after T011-T020 were numbered: kept in place.
        "3": ("T006", "T007", "T008", "T009", "T010", "T021", "T022", "T023", "T024"),
        "N": ("T018", "T019", "T020", "T025", "T026"),
    },
    task_names={
        # "- [x] T025 Run acceptance sweep to validate ≥95% pass rate across ..."
        "T025": "Run acceptance sweep to validate ≥95% pass rate",
    },
    depends={
        # "- After T011-T012 land, T014 can run in parallel with T013 since it ..."
        "T014": ("T011", "T012"),
        # "- T016 and T017 can proceed in parallel once metadata shape from T015 is defined."
        "T016": ("T015",),
        "T017": ("T015",),
    },
    warnings=("phase 'N' has no number; it was numbered 6",),
)

SPECKIT_017 = Folder(
    name="speckit-deacon-017-user-profiles",
    where="specs/017-user-profiles",
    documents=("spec.md", "plan.md", "data-model.md", "contracts/", "research.md", "quickstart.md"),
    labels=("1", "2", "3", "4", "5", "6"),
    names={
        # "## Phase 3: User Story 1 - Select a named profile per run (Priority: P1) 🎯 MVP"
        "3": "User Story 1 - Select a named profile per run (Priority: P1) 🎯 MVP",
    },
    tasks={
        "2": ("T002", "T003", "T004", "T005", "T006"),
        # T030 is written between T008 and T009: kept where it is.
        "3": ("T007", "T008", "T030", "T009", "T010", "T011", "T012", "T013", "T014", "T015"),
    },
    depends={
        # "T005 is `[P]` with T002–T004 (different file); T006 depends on T005."
        "T006": ("T005",),
        # "- [X] T009 [US1] Implement `Settings::resolve(...)` ... (Depends on T002–T004.)"
        "T009": ("T002", "T003", "T004"),
        # "- [X] T012 [US1] Wire `up` to the profile helper: ... (Depends on T006, T011.)"
        "T012": ("T006", "T011"),
        # "- [X] T015 [US1] Wire `outdated` ... (Depends on T011; may reuse the generalized
        # loader.)"
        "T015": ("T011",),
        # "- [X] T029 [US3] Implement the `browser = "none"` ... (Depends on T021;
        # independent of T023 but exercised by it.)"  -- "independent of T023" is no dep
        "T029": ("T021",),
    },
    # "## FR-020a Host-Hook Trust Provenance (implemented — no longer deferred)" holds
    # "- [X] T028 Implement FR-020a ...": not a phase, so the task is not one either.
    warnings=("task-like item in section 'FR-020a Host-Hook Trust Provenance",),
)

KIRO = Folder(
    name="kiro-spaceweirdos-1-ui-design-system",
    where=".kiro/specs/1-ui-design-system",
    documents=("requirements.md", "design.md"),
    labels=("1", "2", "3", "4", "5", "6", "7"),
    names={
        "1": "Set up design system file structure",  # "- [x] 1. Set up design system ..."
        "7": "Final cleanup and verification",  # "- [x] 7. Final cleanup and verification"
    },
    tasks={
        "2": ("2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10"),
    },
    requirements={
        "2.1": ("1.1", "1.2", "1.3", "1.4", "1.5", "1.7"),  # "_Requirements: 1.1, 1.2, ...1.7_"
        "2.2": ("1.1-1.7",),  # "_Requirements: 1.1-1.7_"
        "2.3": ("1.6",),  # "**Validates: Requirements 1.6**"
    },
    # "- [x] 2.5 Write tests for spacing token definitions" twice (lines 57 and 64)
    warnings=("duplicate task id '2.5' in phase 2 (first at line 57)",),
)

AGENT_OS = Folder(
    name="agent-os-spec-workflow-validation",
    where="specs/2025-08-11-spec-workflow-validation",
    documents=("spec.md", "sub-specs/"),
    labels=("1", "2", "3"),
)

FOLDERS = [SPECKIT_007, SPECKIT_017, KIRO, AGENT_OS]


def _copy(folder: Folder, tmp_path: Path) -> tuple[Path, Path]:
    """The workspace (with the files the known-good evidence names) and the spec folder
    copied into it where the family keeps it."""
    target = workspace_for("spec_execution_v1", tmp_path)
    spec = target / folder.where
    shutil.copytree(SPECS / folder.name, spec)
    (spec / "SOURCE.md").unlink()  # ours, not the folder's
    return target, spec


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_folder_is_kept_with_its_source(folder: Folder) -> None:
    here = SPECS / folder.name
    source = (here / "SOURCE.md").read_text(encoding="utf-8")
    assert "repository:" in source and "commit:" in source and folder.where in source
    assert (here / "tasks.md").is_file()
    for doc in folder.documents:
        assert (here / doc.rstrip("/")).exists(), doc


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
async def test_a_real_spec_folder_runs_as_written(session_env, tmp_path, folder: Folder):
    pg, _ = session_env
    target, spec_dir = _copy(folder, tmp_path)
    parsed = read_spec(str(spec_dir), target=str(target))
    for expected in folder.warnings:
        assert any(expected in w.message for w in parsed.warnings), parsed.warnings

    sid = await pg.start(
        "spec_execution_v1", str(target), options=SessionOptions(spec_path=folder.where)
    )
    assert (await pg.status(sid)).total_phases == 1 + len(folder.labels)

    # Phase 0 names the family's design documents this folder has, and takes them.
    view0 = await pg.phase(sid)
    assert isinstance(view0, PhaseView) and view0.phase == 0
    locate = await pg.task(sid, 0, 1)
    assert isinstance(locate, TaskView)
    for doc in folder.documents:
        assert f"`{doc}`" in locate.content, doc
    named = view0.gate.fields["required_files_present"].description
    assert [d for d in folder.documents if d in named], named
    assert "This session runs no command." in view0.content  # none named, none found
    example = view0.example_evidence
    assert isinstance(example, dict)
    evidence0 = {
        **example,
        "spec_path": folder.where,
        "phases_found": len(parsed.phases),
        "tasks_found": parsed.task_count,
        "required_files_present": True,
    }
    result0 = await pg.submit(sid, 0, evidence0)
    assert not result0.problems and result0.awaiting_approval, result0.problems
    assert not result0.warnings, result0.warnings
    await pg.decide(sid, approver="lead", decision="approve", phase=0, comment="plan ok")

    # Each spec phase: its written number and name, its tasks as written, what they need.
    agent = ScriptedAgent(pg, known_good("spec_execution_v1"))
    labels = []
    for index, phase in enumerate(parsed.phases, start=1):
        view = await pg.phase(sid)
        assert isinstance(view, PhaseView) and view.phase == index
        labels.append(view.label)
        assert view.name == phase.name
        assert "\\u" not in view.content and "\\ud83c" not in view.content
        if view.label in folder.names:
            assert view.name == folder.names[view.label]
            assert folder.names[view.label] in view.content
        ids = [t.id for t in view.tasks]
        assert ids == [t.id for t in phase.tasks]
        if view.label in folder.tasks:
            assert ids == list(folder.tasks[view.label])
        for task in view.tasks:
            if task.id in folder.task_names:
                assert task.name.startswith(folder.task_names[task.id])
            if task.id in folder.depends or task.id in folder.requirements:
                shown = await pg.task(sid, index, task.id)
                assert isinstance(shown, TaskView)
                for dep in folder.depends.get(task.id, ()):
                    assert f"`{dep}` must be complete before you start." in shown.content
                reqs = folder.requirements.get(task.id)
                if reqs:
                    assert f"**Requirements:** {', '.join(reqs)}" in shown.content
        result = await pg.submit(sid, index, agent.evidence_for(view))
        assert result.passed, result.problems
    assert labels == list(folder.labels)
    assert (await pg.status(sid)).status == "completed"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_the_parser_reads_exactly_the_written_dependencies(folder: Folder) -> None:
    """Exactly, not at least: a task the folder writes no dependency for gets none
    (a regex that reads too much would link unrelated tasks)."""
    spec = read_spec(SPECS / folder.name)
    deps = {t.id: t.dependencies for p in spec.phases for t in p.tasks if t.dependencies}
    assert {k: tuple(v) for k, v in deps.items() if k in folder.depends} == folder.depends
    if folder is SPECKIT_007:
        # "- While T006-T009 are in progress, begin test scaffolding T010 in parallel
        # once flag shapes are known." names no dependency: T010 gets none.
        assert deps.keys() == {"T014", "T016", "T017"}
    if folder is SPECKIT_017:
        # Every "(Depends on ...)" written in a task, and "T006 depends on T005".
        assert deps == {
            "T006": ["T005"],
            "T009": ["T002", "T003", "T004"],
            "T011": ["T009"],
            "T012": ["T006", "T011"],
            "T013": ["T006", "T011"],
            "T014": ["T006", "T011"],
            "T015": ["T011"],
            "T018": ["T009"],
            "T021": ["T009"],
            "T022": ["T011", "T021"],
            "T023": ["T011", "T021"],
            "T029": ["T021"],
        }
    if folder is KIRO:
        assert deps == {}  # Kiro writes requirements, not dependencies
        reqs = {t.id: tuple(t.requirements) for p in spec.phases for t in p.tasks}
        for task, expected in folder.requirements.items():
            assert reqs[task] == expected
