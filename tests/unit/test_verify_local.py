"""Which checks may run on the session's own worker (``domain.verify.reads_only``) and
what its local activity does with a request (``activities/_verify_local.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from phasegate.activities._verify_local import LocalChecks
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition
from phasegate.domain.session.plan import ChecksHereRequest, RenderPhaseRequest
from phasegate.domain.verify import (
    CHECK_MODELS,
    READ_KINDS,
    VerifyRequest,
    parse_checks,
    reads_only,
)

READS = [
    {"kind": "file_exists", "path": "a.txt"},
    {"kind": "glob_count", "pattern": "*.txt", "min": 1},
    {"kind": "file_contains", "path": "a.txt", "pattern": "hello"},
]
COMMAND = {"kind": "command", "argv": ["true"]}
SESSION_COMMAND = {"kind": "session_command", "command": "test"}


def checks(*items: dict) -> list:
    return parse_checks(list(items), source="gate-definition.yaml")


def test_every_kind_is_either_a_read_or_a_command() -> None:
    assert READ_KINDS | {"command", "session_command"} == set(CHECK_MODELS)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (READS, True),
        ([], False),  # nothing to run: no verify at all
        ([*READS, COMMAND], False),
        ([SESSION_COMMAND], False),  # unresolved: the verify worker reports it
        ([{"kind": "git_changed", "paths": ["."]}], True),
    ],
)
def test_reads_only(items: list[dict], expected: bool) -> None:
    assert reads_only(checks(*items)) is expected


def request(ws: Path, *items: dict) -> VerifyRequest:
    return VerifyRequest(
        workspace=str(ws), checks=checks(*items), evidence={}, session_id="s", target=str(ws)
    )


def test_a_worker_that_runs_no_checks_answers_none(tmp_path: Path) -> None:
    assert not LocalChecks(None).enabled
    assert LocalChecks(None).run_checks_here(request(tmp_path, *READS)) is None


def test_reading_checks_run_as_the_verify_worker_runs_them(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    verify = VerifyActivities()
    here = LocalChecks(verify.run_verify_checks)
    report = here.run_checks_here(request(tmp_path, *READS))
    assert report is not None and report.passed
    assert [r.kind for r in report.results] == ["file_exists", "glob_count", "file_contains"]
    missing = here.run_checks_here(request(tmp_path, {"kind": "file_exists", "path": "b.txt"}))
    assert missing is not None and not missing.passed
    assert "b.txt does not exist" in missing.results[0].message


@pytest.mark.parametrize("command", [COMMAND, SESSION_COMMAND])
def test_commands_never_run_here(tmp_path: Path, command: dict) -> None:
    here = LocalChecks(VerifyActivities().run_verify_checks)
    with pytest.raises(ApplicationError) as refused:
        here.run_checks_here(request(tmp_path, READS[0], command))
    assert refused.value.type == "verify_invalid" and refused.value.non_retryable


def test_the_next_phase_is_rendered_only_when_every_check_passed(tmp_path: Path) -> None:
    rendered: list[int] = []

    def render(req: RenderPhaseRequest) -> PhaseDefinition:
        rendered.append(req.index)
        return PhaseDefinition(
            index=req.index, label=str(req.index), name=f"Phase {req.index}", content="text"
        )

    here = LocalChecks(VerifyActivities().run_verify_checks, render)
    ref = DefinitionRef(
        workflow_type="w", target=str(tmp_path), total_phases=3, static_phase_count=3
    )
    ask = RenderPhaseRequest(ref=ref, index=1)
    failed = here.check_and_render_here(
        ChecksHereRequest(checks=request(tmp_path, *READS), render=ask)
    )
    assert failed is not None and not failed.report.passed and failed.next_phase is None
    assert rendered == []  # a future phase never reaches history before it is entered
    (tmp_path / "a.txt").write_text("hello\n")
    done = here.check_and_render_here(
        ChecksHereRequest(checks=request(tmp_path, *READS), render=ask)
    )
    assert done is not None and done.report.passed and done.next_phase is not None
    assert done.next_phase.index == 1 and rendered == [1]
    unasked = here.check_and_render_here(ChecksHereRequest(checks=request(tmp_path, *READS)))
    assert unasked is not None and unasked.next_phase is None and rendered == [1]


def test_a_render_that_fails_is_left_to_the_advance(tmp_path: Path) -> None:
    def render(req: RenderPhaseRequest) -> PhaseDefinition:
        raise ValueError("template error")

    (tmp_path / "a.txt").write_text("hello\n")
    here = LocalChecks(VerifyActivities().run_verify_checks, render)
    ref = DefinitionRef(
        workflow_type="w", target=str(tmp_path), total_phases=3, static_phase_count=3
    )
    req = ChecksHereRequest(
        checks=request(tmp_path, *READS), render=RenderPhaseRequest(ref=ref, index=1)
    )
    done = here.check_and_render_here(req)
    assert done is not None and done.report.passed and done.next_phase is None
    assert LocalChecks(None).check_and_render_here(req) is None
