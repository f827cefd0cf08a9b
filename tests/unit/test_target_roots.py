"""Threat level 1 (MCP tools only): an agent that starts its own session chooses the
target and the spec. Neither may reach outside the project: not the file system's root,
not outside the worker's PHASEGATE_TARGET_ROOTS, and never a file of the workflow
library read as a spec (that would serve a later phase's text as the current one)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from phasegate import SHIPPED_LIBRARY
from phasegate.activities.definitions import DefinitionActivities
from phasegate.domain.errors import DefinitionError
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest

FIXTURE_LIBRARY = Path(__file__).resolve().parents[1] / "fixtures" / "library"


def _plan(acts: DefinitionActivities, target: str, spec: str | None = None, wf: str = "dyn_v1"):
    options = SessionOptions(spec_path=spec) if spec else SessionOptions()
    return acts.plan(LoadSessionRequest(workflow_type=wf, target=target, options=options))


def test_the_root_is_never_a_target(tmp_path):
    acts = DefinitionActivities([str(FIXTURE_LIBRARY)], str(tmp_path / "home"))
    with pytest.raises(DefinitionError, match="file system's root"):
        _plan(acts, "/", wf="fallback_v1")


def test_target_roots_bound_the_target(tmp_path):
    inside, outside = tmp_path / "work" / "proj", tmp_path / "elsewhere"
    inside.mkdir(parents=True)
    outside.mkdir()
    acts = DefinitionActivities(
        [str(FIXTURE_LIBRARY)], str(tmp_path / "home"), target_roots=[str(tmp_path / "work")]
    )
    with pytest.raises(DefinitionError, match="outside the folders this worker serves") as err:
        _plan(acts, str(outside), wf="fallback_v1")
    assert "PHASEGATE_TARGET_ROOTS" in (err.value.hint or "")
    (tmp_path / "work" / "link").symlink_to(outside)  # a symlink does not lead out either
    with pytest.raises(DefinitionError, match="outside"):
        _plan(acts, str(tmp_path / "work" / "link"), wf="fallback_v1")
    assert _plan(acts, str(inside), wf="fallback_v1").ref.target == str(inside)


def test_a_library_file_is_never_read_as_a_spec(tmp_path):
    # The review's attack: a target that holds the library, and a later phase's file as
    # the spec. Refused, though the file is inside the target.
    lib = tmp_path / "lib"
    shutil.copytree(FIXTURE_LIBRARY, lib)
    shutil.copytree(Path(SHIPPED_LIBRARY) / "test_generation_v3", lib / "test_generation_v3")
    acts = DefinitionActivities([str(lib)], str(tmp_path / "home"))
    later = lib / "test_generation_v3" / "phases" / "5" / "phase.md"
    assert later.is_file()
    with pytest.raises(DefinitionError, match="file of the workflow library"):
        _plan(acts, str(tmp_path), str(later))
