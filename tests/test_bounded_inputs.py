"""Issue 8 item 5: bounded inputs from disk. Each attack of the issue, reproduced and
refused: ``spec_path=/dev/zero`` (once grew a worker to 14.5 GB), a named pipe (16
sessions on one took every activity thread), a 50 MB sparse file, paths leading out of
the target, non-UTF-8 bytes, library files that are pipes or too large, and a
700-task phase that renders to megabytes (item 4)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import resource
import time
from pathlib import Path
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError

from phasegate.activities import _safe_read as safe_read
from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.library import find_workflow, load_gate_file, read_text
from phasegate.activities.rag import FtsIndex
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import DefinitionError
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest, RenderPhaseRequest, SessionPlan

REPO = Path(__file__).resolve().parent.parent
FIXTURE_LIBRARY = REPO / "tests" / "fixtures" / "library"
SHIPPED = REPO / "library"
SPEC = "# Spec\n\n## Phase 1: Setup\n\n- [ ] **Task 1.1**: Create repo\n"
FAST = 1.0  # seconds: a refusal never waits on the file


def _acts(tmp_path: Path, **kwargs: Any) -> DefinitionActivities:
    return DefinitionActivities([str(FIXTURE_LIBRARY)], str(tmp_path / "home"), **kwargs)


def _plan(acts: DefinitionActivities, target: Path | str, spec_path: str) -> SessionPlan:
    options = SessionOptions(spec_path=spec_path)
    return acts.plan(
        LoadSessionRequest(workflow_type="dyn_v1", target=str(target), options=options)
    )


def _refused(acts: DefinitionActivities, target: Path | str, spec_path: str) -> DefinitionError:
    t0 = time.perf_counter()
    with pytest.raises(DefinitionError) as err:
        _plan(acts, target, spec_path)
    assert time.perf_counter() - t0 < FAST
    assert err.value.code == "definition_invalid" and err.value.hint
    return err.value


def _target(tmp_path: Path) -> Path:
    target = tmp_path / "project"
    target.mkdir()
    return target


# --------------------------------------------------------------------------- specs


def test_dev_zero_is_refused_outside_the_target_and_as_a_device(tmp_path):
    target = _target(tmp_path)
    err = _refused(_acts(tmp_path), target, "/dev/zero")
    assert "outside" in err.message and err.where == "/dev/zero"
    assert f"inside the target {target}" in str(err.hint) and "--spec" in str(err.hint)
    # Even where a deployment allows /dev, a device is never read.
    err = _refused(_acts(tmp_path, spec_roots=["/dev"]), target, "/dev/zero")
    assert "is a character device, not a regular file" in err.message


def test_sixteen_loads_of_a_named_pipe_are_refused_at_once(tmp_path):
    target = _target(tmp_path)
    os.mkfifo(target / "tasks.md")  # no writer: a blocking open or read would hang forever
    acts = _acts(tmp_path)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(_plan, acts, target, str(target)) for _ in range(16)]
        errors = [f.exception(timeout=5) for f in futures]
    assert time.perf_counter() - t0 < FAST
    for err in errors:
        assert isinstance(err, DefinitionError), err
        assert "is a named pipe (FIFO), not a regular file" in err.message
        assert err.where == str(target / "tasks.md")


def test_a_50_mb_sparse_spec_is_refused_unread(tmp_path):
    target = _target(tmp_path)
    with open(target / "tasks.md", "wb") as fh:
        fh.truncate(50 * safe_read.MiB)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    err = _refused(_acts(tmp_path), target, "tasks.md")  # relative: against the target
    assert "is 50 MiB (limit 1 MiB)" in err.message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 20 * 1024  # KiB


def test_a_file_larger_than_it_says_is_cut_at_the_limit():
    # /proc files are regular files that report size 0: only the bytes read count.
    with pytest.raises(DefinitionError) as err:
        safe_read.read_bytes("/proc/self/maps", limit=100)
    assert "is more than 100 bytes (limit 100 bytes)" in err.value.message


@pytest.mark.parametrize("how", ["symlink", "dotdot", "absolute"])
def test_paths_leading_out_of_the_target_are_refused(tmp_path, how):
    target = _target(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "tasks.md").write_text(SPEC)
    if how == "symlink":
        (target / "tasks.md").symlink_to(outside / "tasks.md")
        spec_path = str(target)
    else:
        spec_path = "../outside/tasks.md" if how == "dotdot" else str(outside / "tasks.md")
    err = _refused(_acts(tmp_path), target, spec_path)
    assert "outside" in err.message and str(target.resolve()) in err.message
    # /etc/passwd, the classic
    assert "outside" in _refused(_acts(tmp_path), target, "/etc/passwd").message


def test_the_file_actually_opened_is_checked_against_the_roots(tmp_path):
    # No path check before the open here: only the real path of the opened file (as a
    # symlink swapped in after a check would leave it) decides.
    target = _target(tmp_path)
    (tmp_path / "secret.md").write_text("secret\n")
    (target / "tasks.md").symlink_to(tmp_path / "secret.md")
    with pytest.raises(DefinitionError) as err:
        safe_read.read_bytes(target / "tasks.md", limit=1024, roots=[target.resolve()])
    assert f"resolves to {(tmp_path / 'secret.md').resolve()}, outside" in err.value.message


def test_a_symlink_that_stays_inside_and_configured_roots_are_accepted(tmp_path):
    target = _target(tmp_path)
    (target / "specs").mkdir()
    (target / "specs" / "tasks.md").write_text(SPEC)
    (target / "current").symlink_to(target / "specs")
    plan = _plan(_acts(tmp_path), target, "current")
    assert plan.ref.spec_source == str((target / "specs" / "tasks.md").resolve())
    shared = tmp_path / "shared-specs"
    shared.mkdir()
    (shared / "tasks.md").write_text(SPEC)
    assert (
        _plan(_acts(tmp_path, spec_roots=[str(shared)]), target, str(shared)).ref.total_phases == 1
    )


def test_a_spec_needs_a_target_folder(tmp_path):
    (tmp_path / "tasks.md").write_text(SPEC)
    err = _refused(_acts(tmp_path), "", str(tmp_path / "tasks.md"))
    assert "the session has no target" in err.message
    err = _refused(_acts(tmp_path), "", "tasks.md")
    assert "a relative --spec (MCP: spec_path) needs a TARGET folder" in err.message


def test_a_spec_folder_is_its_tasks_md_only(tmp_path):
    target = _target(tmp_path)
    (target / "tasks.md").write_text(SPEC)
    with open(target / "huge.bin", "wb") as fh:  # never read: only tasks.md is
        fh.truncate(200 * safe_read.MiB)
    assert _plan(_acts(tmp_path), target, str(target)).ref.total_phases == 1
    (target / "tasks.md").write_bytes(b"- [ ] x\n" * (safe_read.MiB // 8 + 1))
    assert "(limit 1 MiB)" in _refused(_acts(tmp_path), target, str(target)).message
    err = _refused(_acts(tmp_path, max_spec_bytes=1024), target, str(target))
    assert "(limit 1 KiB)" in err.message and "split the spec" in str(err.hint)


def test_non_utf8_bytes_are_refused(tmp_path):
    target = _target(tmp_path)
    (target / "tasks.md").write_bytes(SPEC.encode() + b"\xff\xfe caf\xe9\n")
    err = _refused(_acts(tmp_path), target, str(target))
    assert "is not UTF-8 text (byte 0xff at offset" in err.message
    assert "UTF-8" in str(err.hint)


# --------------------------------------------------------------------------- library


def _workflow(lib: Path) -> Path:
    wdir = lib / "w_v1"
    (wdir / "phases" / "0").mkdir(parents=True)
    meta = {"phases": [{"phase_number": 0, "phase_name": "Setup"}]}
    (wdir / "metadata.json").write_text(json.dumps(meta))
    (wdir / "phases" / "0" / "phase.md").write_text("# Setup\n\nDo it.\n")
    return wdir


def _start_static(tmp_path: Path, lib: Path) -> DefinitionError:
    acts = DefinitionActivities([str(lib)], str(tmp_path / "home"))
    t0 = time.perf_counter()
    with pytest.raises(DefinitionError) as err:
        acts.plan(LoadSessionRequest(workflow_type="w_v1", target=str(tmp_path)))
    assert time.perf_counter() - t0 < FAST
    return err.value


@pytest.mark.parametrize(
    "name", ["metadata.json", "phases/0/phase.md", "phases/0/gate-definition.yaml"]
)
def test_library_files_that_are_pipes_are_refused_not_skipped(tmp_path, name):
    wdir = _workflow(tmp_path / "lib")
    (wdir / name).unlink(missing_ok=True)
    os.mkfifo(wdir / name)
    err = _start_static(tmp_path, tmp_path / "lib")
    assert err.where == str(wdir / name)
    assert "library file is a named pipe (FIFO), not a regular file" in err.message


@pytest.mark.parametrize(
    "name", ["metadata.json", "phases/0/phase.md", "phases/0/gate-definition.yaml"]
)
def test_oversized_library_files_are_refused(tmp_path, name):
    wdir = _workflow(tmp_path / "lib")
    with open(wdir / name, "ab") as fh:
        fh.truncate(2 * safe_read.MiB)
    err = _start_static(tmp_path, tmp_path / "lib")
    assert err.where == str(wdir / name) and "is 2 MiB (limit 1 MiB)" in err.message


def test_a_gate_file_that_is_a_folder_is_not_taken_as_absent(tmp_path):
    gate = tmp_path / "gate-definition.yaml"
    gate.mkdir()
    with pytest.raises(DefinitionError, match="is a directory, not a regular file"):
        load_gate_file(gate, fallback_markdown="must provide `x`")
    (tmp_path / "t.md").write_bytes(b"\xc3(")
    with pytest.raises(DefinitionError, match="not UTF-8 text"):
        read_text(tmp_path / "t.md")


def test_a_pipe_among_the_docs_is_skipped_by_the_index(tmp_path):
    docs = tmp_path / "standards"
    docs.mkdir()
    (docs / "ok.md").write_text("# Testing\n\nWrite tests first.\n")
    os.mkfifo(docs / "pipe.md")
    with open(docs / "big.md", "wb") as fh:
        fh.truncate(50 * safe_read.MiB)
    index = FtsIndex(":memory:")
    t0 = time.perf_counter()
    report = index.index_paths([], [str(docs)])
    assert time.perf_counter() - t0 < FAST
    assert report.indexed_files == 1
    index.close()


# --------------------------------------------------------------------------- phase size


def _issue_spec(n_tasks: int) -> str:
    """One phase of ``n_tasks`` one-line tasks, like the issue's 29 KB, 700-task file."""
    lines = "".join(f"- [ ] T{k:03d} Implement part {k}\n" for k in range(1, n_tasks + 1))
    return f"# Tasks\n\n## Phase 1: Everything\n\n{lines}"


def test_a_700_task_phase_is_refused_when_rendered(tmp_path):
    target = _target(tmp_path)
    (target / "tasks.md").write_text(_issue_spec(700))
    assert (target / "tasks.md").stat().st_size < 30 * 1024
    # (approvals are not the point here: name-only ones are allowed)
    acts = DefinitionActivities(
        [str(SHIPPED)], str(tmp_path / "home"), allow_unsigned_approvals=True
    )
    req = LoadSessionRequest(
        workflow_type="spec_execution_v1",
        target=str(target),
        options=SessionOptions(spec_path=str(target)),
    )
    ref = acts.plan(req).ref  # phase 0 is the static planning phase: it starts
    with pytest.raises(ApplicationError) as err:
        acts.render_phase(RenderPhaseRequest(ref=ref, index=1))
    assert err.value.non_retryable and err.value.type == "definition_invalid"
    details = err.value.details[0]
    assert re.fullmatch(
        r"phase 1 \(Everything\) renders to \d+ KiB \(limit 512 KiB\): it has 700 tasks",
        details["message"],
    ), details
    assert details["where"] == f"{(target / 'tasks.md').resolve()}:3"
    assert "split it into smaller phases in tasks.md" in details["hint"]
    wf = find_workflow("spec_execution_v1", [str(SHIPPED)])
    big = DefinitionActivities([str(SHIPPED)], str(tmp_path / "home"), max_phase_bytes=8 << 20)
    assert len(big.build_phase(wf, ref, 1).tasks) == 700  # the cap is a setting


# --------------------------------------------------------------------------- end to end


async def test_a_session_on_dev_zero_or_a_pipe_fails_its_start_promptly(
    env, settings_for, run_worker, tmp_path
):
    target = _target(tmp_path)
    os.mkfifo(target / "pipe.md")
    (target / "tasks.md").write_text(_issue_spec(3000))  # dyn_v1 phase 0: ~750 KiB
    settings = settings_for(FIXTURE_LIBRARY)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        for spec_path, reason in [
            ("/dev/zero", "outside"),
            (str(target / "pipe.md"), "named pipe (FIFO), not a regular file"),
            (str(target), "(limit 512 KiB): it has 3000 tasks"),
        ]:
            t0 = time.perf_counter()
            with pytest.raises(DefinitionError) as err:
                await pg.start("dyn_v1", str(target), options=SessionOptions(spec_path=spec_path))
            assert reason in str(err.value), err.value
            assert time.perf_counter() - t0 < 10, spec_path
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100 * 1024  # KiB
