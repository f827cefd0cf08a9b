"""``phasegate graph list | check`` as a person runs them (a real process, no server):
the real graphs load clean, each broken graph reports exactly its problems at
``file:line``, ``--json`` carries the same, and listing runs no graph code."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from cli_helpers import cli_argv

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "graphs"
BROKEN = FIXTURES / "broken" / "graphs"

# (file, line or None, code) of every problem of every broken graph, in output order.
EXPECTED = [
    ("args.yaml", 5, "bad_arg"),
    ("args.yaml", 6, "bad_arg"),
    ("args.yaml", 7, "bad_arg"),
    ("args.yaml", 8, "bad_arg"),
    ("args.yaml", 9, "bad_arg"),
    ("args.yaml", 10, "bad_arg"),
    ("args.yaml", 11, "bad_arg"),
    ("args.yaml", 13, "bad_arg"),
    ("entry.yaml", 3, "entry_missing"),
    ("fields.yaml", 3, "bad_field"),
    ("fields.yaml", 5, "bad_field"),
    ("fields.yaml", 10, "bad_field"),
    ("fields.yaml", 11, "bad_field"),
    ("fields.yaml", 13, "bad_field"),
    ("fields.yaml", 17, "bad_field"),
    ("gates.yaml", 10, "bad_gate"),
    ("gates.yaml", 13, "bad_gate"),
    ("gates.yaml", 17, "bad_gate"),
    ("gates.yaml", 26, "bad_gate"),
    ("handlers.yaml", 5, "bad_handler"),
    ("handlers.yaml", 9, "unresolved_handler"),
    ("handlers.yaml", 13, "unresolved_handler"),
    ("handlers.yaml", 17, "unresolved_handler"),
    ("handlers.yaml", 21, "unresolved_handler"),
    ("handlers.yaml", 25, "unknown_output_field"),
    ("handlers.yaml", 29, "unresolved_handler"),
    ("import_error.py", 6, "unreadable"),
    ("no-end.yaml", None, "no_terminal"),
    ("outcomes.yaml", 8, "uncapped_iterate"),
    ("outcomes.yaml", 12, "impossible_outcome"),
    ("outcomes.yaml", 12, "useless_default"),
    ("outcomes.yaml", 13, "unreachable_step"),
    ("outcomes.yaml", 16, "impossible_outcome"),
    ("structure.yaml", 17, "no_way_out"),
    ("structure.yaml", 19, "unknown_target"),
    ("structure.yaml", 20, "duplicate_step"),
    ("structure.yaml", 23, "unreachable_step"),
    ("structure.yaml", 23, "no_way_out"),
    ("structure.yaml", 26, "unreachable_step"),
    ("structure.yaml", 26, "no_way_out"),
    ("structure.yaml", 29, "unreachable_step"),
    ("syntax.yaml", 6, "syntax_error"),
]


def phasegate(*args: str, library: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEGATE_", "TEMPORAL_"))}
    if library is not None:
        env["PHASEGATE_LIBRARY"] = str(library)
    return subprocess.run(
        [*cli_argv(), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_real_graphs_check_clean() -> None:
    run = phasegate("graph", "check", str(FIXTURES / "good"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip().endswith("ok — 4 graph(s), 0 with problems, 0 problem(s)")


def test_every_broken_graph_reports_exactly_its_problems() -> None:
    run = phasegate("graph", "check", str(BROKEN))
    assert run.returncode == 1
    *problems, summary = run.stdout.strip().splitlines()
    found = []
    for line in problems:
        where, code = line.split(": ", 2)[:2]
        path, _, number = where.rpartition(":")
        if not number.isdigit():
            path, number = where, ""
        found.append((Path(path).name, int(number) if number else None, code))
    assert found == EXPECTED
    assert summary.endswith(f"FAILED — 10 graph(s), 10 with problems, {len(EXPECTED)} problem(s)")
    assert (
        f"{BROKEN}/structure.yaml:19: unknown_target: outcome 'ok' of step 'reflect' goes to "
        "'research_critic', which is no step (did you mean 'research_critique'? use a step id, "
        "or null to end the run; steps: planner, research_plan, generate, reflect, "
        "research_critique, revise, polish)"
    ) in problems


def test_json_carries_every_problem_and_the_clean_graphs_digest() -> None:
    run = phasegate("graph", "check", str(BROKEN / "outcomes.yaml"), "--json")
    assert run.returncode == 1
    data = json.loads(run.stdout)
    assert data["ok"] is False
    [graph] = data["graphs"]
    assert [(p["code"], p["step"], p["outcome"]) for p in graph["problems"]] == [
        ("uncapped_iterate", "draft", "iterate"),
        ("impossible_outcome", "ship", "skip"),
        ("useless_default", "ship", "_default"),
        ("unreachable_step", "classify", None),
        ("impossible_outcome", "classify", "slow"),
    ]
    clean = json.loads(phasegate("graph", "check", str(FIXTURES / "good"), "--json").stdout)
    assert clean["ok"] is True
    assert all(len(g["sha256"]) == 64 for g in clean["graphs"])


def test_check_of_nothing_is_an_error() -> None:
    run = phasegate("graph", "check", str(FIXTURES / "nowhere"))
    assert run.returncode == 1
    assert run.stderr.startswith("error: ")
    assert "no such file or folder" in run.stderr
    assert "Traceback" not in run.stderr


def test_list_reads_graphs_without_running_them(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    lib = tmp_path / "lib"
    (lib / "graphs").mkdir(parents=True)
    for path in (FIXTURES / "good" / "graphs").iterdir():
        (lib / "graphs" / path.name).write_text(path.read_text())
    (lib / "graphs" / "effect.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "GRAPH = {'name': 'effect', 'description': 'Writes a file on import', 'entry': 'a',\n"
        "         'steps': [{'id': 'a', 'title': 'A'}]}\n"
    )
    run = phasegate("graph", "list", "--json", library=lib)
    assert run.returncode == 0, run.stderr
    listed = {g["name"]: (g["steps"], g["description"]) for g in json.loads(run.stdout)}
    assert listed["effect"] == (1, "Writes a file on import")
    assert listed["essay-writer"][0] == 5
    assert listed["reflection"] == (2, "Generate, reflect, regenerate: three rounds at most.")
    assert not marker.exists()
    text = phasegate("graph", "list", library=lib).stdout
    assert text.splitlines()[0].split() == ["NAME", "STEPS", "DESCRIPTION", "FILE"]


def test_help_documents_the_exit_codes() -> None:
    run = phasegate("graph", "check", "--help")
    assert run.returncode == 0
    assert "exit codes: 0 every graph is clean; 1 a graph has a problem" in run.stdout


def test_import_asl_prints_a_graph_file_that_checks_clean(tmp_path: Path) -> None:
    run = phasegate("graph", "import-asl", str(FIXTURES / "asl" / "review-loop.asl.json"))
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("# converted from review-loop.asl.json")
    assert run.stderr == ""
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "review-loop.yaml").write_text(run.stdout)
    check = phasegate("graph", "check", str(tmp_path))
    assert check.returncode == 0, check.stdout
    bad = phasegate("graph", "import-asl", str(BROKEN / "args.yaml"))
    assert (bad.returncode, bad.stderr.split(":")[0]) == (1, "error")
