"""The workflow authoring guide holds: docs/authoring.md's worked example is the real
examples/library/hello_v1 (every file quoted verbatim), ``library check`` passes it
clean, and a scripted agent walks it on the dev server (its verify checks refuse a
script that is not there). The guide names every metadata key, gate check, verify kind
and template variable phasegate reads. ``library check`` renders every template with
sample data: a dynamic template that would fail in a session is an error that names
file:line, the undefined variable and the one meant; unknown metadata.json keys and
examples that fail their gate are warnings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from phasegate.activities._library_samples import KNOWN_KEYS, sample_spec, variables
from phasegate.activities._phase_render import phase_context, task_context
from phasegate.activities._spec_phases import dynamic_context
from phasegate.activities.library_check import check_library
from phasegate.activities.templates import LEGACY_PLACEHOLDERS
from phasegate.client.api import PhasegateClient
from phasegate.domain.gates import ApprovalSpec, FieldSpec, GateDefinition, GateRule
from phasegate.domain.library import DynamicConfig, PhaseMetadata, TaskMetadata, WorkflowMetadata
from phasegate.domain.verify import CHECK_MODELS
from phasegate.domain.verify_contain import ARG_TYPES
from phasegate.testing import ScriptedAgent, unsigned_approver

REPO = Path(__file__).resolve().parent.parent
GUIDE = REPO / "docs" / "authoring.md"
EXAMPLES = REPO / "examples" / "library"
HELLO = EXAMPLES / "hello_v1"
SHIPPED = REPO / "library"

# --------------------------------------------------------------------------- the guide


def _guide() -> str:
    return GUIDE.read_text(encoding="utf-8")


def test_the_worked_example_is_quoted_verbatim() -> None:
    text = _guide()
    files = sorted(p for p in HELLO.rglob("*") if p.is_file())
    assert len(files) == 7
    for path in files:
        rel = path.relative_to(REPO).as_posix()
        assert f"`{rel}`" in text, f"the guide does not name {rel}"
        assert path.read_text(encoding="utf-8").strip() in text, f"{rel} differs from the guide"


def test_the_guide_names_everything_an_author_can_write() -> None:
    text = _guide()
    names = {
        "metadata.json": [*WorkflowMetadata.model_fields, "approver_keys",
                          *PhaseMetadata.model_fields, "validation_criteria",
                          *TaskMetadata.model_fields, *DynamicConfig.model_fields],
        "evidence_schema": [*FieldSpec.model_fields, "boolean", "integer", "number", "string",
                            "list", "dict"],
        "gate": ["checkpoint", "strict", "allow_override", "validators", "rules",
                 *GateRule.model_fields, "approval", *ApprovalSpec.model_fields, "verify"],
        "verify": [f for m in CHECK_MODELS.values() for f in m.model_fields],
        "kinds": list(CHECK_MODELS),
        "slots": [f"| {t}" for t in ARG_TYPES],
        "legacy": [f"[{name}]" for name in LEGACY_PLACEHOLDERS],
    }  # fmt: skip
    missing = {k: [n for n in v if n not in text] for k, v in names.items()}
    assert all(not v for v in missing.values()), missing


def test_the_guide_lists_every_template_variable() -> None:
    text = _guide()
    session = {"workflow_type": "w", "target": "/t", "total_phases": 3}
    phase = {"number": 0, "label": "0", "name": "n", "description": "", "estimated_duration": "",
             "tasks": [{**TaskMetadata(task_number=1).model_dump(), "id": "1"}],
             "validation_gate": []}  # fmt: skip
    static = task_context(phase_context(session, phase, 0), {**phase["tasks"][0], "number": 1})
    spec = sample_spec("tasks.md")
    dynamic = dynamic_context(session, spec, 1, 0, GateDefinition())
    dynamic = task_context(dynamic, dynamic["phase"]["tasks"][0])
    shown = set(re.findall(r"`\{\{ ([a-z_.\[\]]+) \}\}`", text))
    missing = [v for v in {*variables(static), *variables(dynamic)} if v not in shown]
    assert missing == [], "document these template variables (as `{{ name }}`)"


# --------------------------------------------------------------------------- the example


def test_library_check_passes_the_example_clean() -> None:
    report = check_library(str(EXAMPLES))
    assert (report.errors, report.warnings, report.workflows) == ([], [], ["hello_v1"])


def test_library_check_passes_the_shipped_library_clean() -> None:
    report = check_library(str(SHIPPED))
    assert (report.errors, report.warnings) == ([], [])


@pytest.fixture
def python3_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's verify check runs ``python3``: this interpreter, first on PATH."""
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")


HELLO_PY = """import sys


def main() -> None:
    name, times = sys.argv[1], int(sys.argv[2])
    for _ in range(times):
        print(f"Hello, {name}!")


if __name__ == "__main__":
    main()
"""


async def test_a_scripted_agent_walks_the_example(
    env, settings_for, run_worker, tmp_path: Path, python3_on_path: None
) -> None:
    workspace = tmp_path / "project"
    workspace.mkdir()
    settings = settings_for(EXAMPLES)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("hello_v1", str(workspace))
        agent = ScriptedAgent(pg, approve=unsigned_approver("lead"))
        # Phase 0 passes on its documented example and waits for the lead.
        view = await pg.phase(sid, 0)
        first = await pg.submit(sid, 0, agent.evidence_for(view))
        assert first.passed and first.awaiting_approval, first.problems
        await unsigned_approver("lead")(pg, sid, 0)
        # Phase 1 claims a script the workspace does not hold: the gate looks, and refuses.
        view = await pg.phase(sid, 1)
        claim = agent.evidence_for(view)
        refused = await pg.submit(sid, 1, claim)
        assert not refused.passed
        assert {p.field for p in refused.problems} >= {"verify:script_exists"}
        (workspace / "hello.py").write_text(HELLO_PY, encoding="utf-8")
        final = await agent.walk(sid)
    assert final.status == "completed"
    greets = next(r for r in agent.steps[-1].result.verify if r.name == "script_greets")
    assert greets.passed and "Hello, World!" in greets.excerpt


# --------------------------------------------------------------------------- library check


def _copy(tmp_path: Path, src: Path = HELLO) -> Path:
    lib = tmp_path / "lib"
    shutil.copytree(src, lib / src.name)
    return lib / src.name


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_dynamic_template_that_fails_to_render_is_an_error(tmp_path: Path) -> None:
    wdir = _copy(tmp_path, SHIPPED / "spec_execution_v1")
    template = wdir / "phases" / "dynamic" / "phase-template.md"
    _edit(template, "**Target:** `{{ session.target }}`", "**Target:** `{{ target }}`")
    line = next(
        n for n, s in enumerate(template.read_text("utf-8").splitlines(), 1) if "{{ target }}" in s
    )
    _edit(wdir / "phases" / "dynamic" / "task-template.md", "{{ task.name }}", "{{ task.title }}")
    report = check_library(str(wdir.parent))
    assert len(report.errors) == 2, report.errors
    phase_error, task_error = report.errors
    assert phase_error.startswith(
        f"{template}:{line}: template render failed: 'target' is undefined"
    )
    assert "did you mean {{ session.target }}?" in phase_error
    assert "phase.validation_items" in phase_error  # the variables available are listed
    assert "task-template.md:1:" in task_error and "'title'" in task_error
    assert "task.name" in task_error


def test_a_static_file_that_does_not_render_says_what_is_available(tmp_path: Path) -> None:
    wdir = _copy(tmp_path)
    _edit(wdir / "phases" / "1" / "task-1-write-script.md", "{{ task.purpose }}",
          "{{ task.purpos }}")  # fmt: skip
    report = check_library(str(wdir.parent))
    assert report.errors == []
    (warning,) = report.warnings
    assert "task-1-write-script.md:3: template render failed" in warning
    assert "served verbatim" in warning and "did you mean {{ task.purpose }}?" in warning


def test_unknown_metadata_keys_are_warnings_with_the_key_meant(tmp_path: Path) -> None:
    wdir = _copy(tmp_path)
    meta = json.loads((wdir / "metadata.json").read_text("utf-8"))
    meta["descripton"] = meta.pop("description")
    meta["author"] = "prAxIs-style informational key: known, no warning"
    meta["phases"][0]["name"] = meta["phases"][0].pop("phase_name")
    meta["phases"][1]["requires_aproval"] = False
    meta["phases"][1]["tasks"][0]["title"] = "Write it"
    meta["phases"][1]["tasks"][1]["zzz"] = 1
    (wdir / "metadata.json").write_text(json.dumps(meta), encoding="utf-8")
    report = check_library(str(wdir.parent))
    assert report.errors == []
    where = f"{wdir / 'metadata.json'}: "
    assert [w.removeprefix(where).split(";")[0] for w in report.warnings] == [
        "descripton: unknown key",
        "phases[0].name: unknown key",
        "phases[1].requires_aproval: unknown key",
        "phases[1].tasks[0].title: unknown key",
        "phases[1].tasks[1].zzz: unknown key",
    ]
    meant = [re.search(r"did you mean '(\w+)'", w) for w in report.warnings]
    assert [m.group(1) if m else None for m in meant] == [
        "description", "phase_name", "requires_approval", "name", None,
    ]  # fmt: skip
    assert "{{ task.title }}" in report.warnings[3]  # a task key still reaches task files
    assert {"author", "key_deliverables", "evidence_gate_enabled"} <= KNOWN_KEYS["workflow"] | (
        KNOWN_KEYS["phase"]
    )


def test_an_example_that_fails_its_gate_is_a_warning(tmp_path: Path) -> None:
    wdir = _copy(tmp_path)
    _edit(wdir / "phases" / "0" / "phase.md", '"repeat": 2', '"repeat": 9')
    report = check_library(str(wdir.parent))
    assert report.errors == []
    (warning,) = report.warnings
    assert warning.startswith(f"{wdir / 'phases' / '0' / 'phase.md'}: the evidence example fails")
    assert "repeat:" in warning and "fix the example or the gate" in warning
