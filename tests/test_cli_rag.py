"""`phasegate index` / `phasegate search` end to end (subprocesses, no server needed)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cli_helpers import cli_argv

REPO = Path(__file__).resolve().parent.parent


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PHASEGATE_HOME": str(home)}
    return subprocess.run(
        [*cli_argv(), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_index_then_search(tmp_path: Path) -> None:
    standards = tmp_path / "standards"
    standards.mkdir()
    (standards / "logging.md").write_text(
        "# Logging\n\n## Structured logs\n\nEmit JSON log lines with a correlation id per request.\n"
    )
    first = _cli("index", str(standards), home=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "indexed" in first.stdout and "skipped 0" in first.stdout
    again = json.loads(_cli("index", str(standards), "--json", home=tmp_path).stdout)
    assert again["indexed_files"] == 0 and again["skipped_files"] >= 1
    found = _cli("search", "correlation id log lines", "--json", home=tmp_path)
    assert found.returncode == 0, found.stderr
    hits = json.loads(found.stdout)
    assert hits and hits[0]["heading_path"][-1] == "Structured logs"
    hidden = _cli(
        "search",
        "coverage",
        "--workflow",
        "test_generation_v3",
        "--max-phase",
        "1",
        "--json",
        home=tmp_path,
    )
    for hit in json.loads(hidden.stdout):
        assert not (hit["workflow_type"] == "test_generation_v3" and (hit["phase"] or 0) > 1)
