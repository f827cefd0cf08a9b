"""``phasegate graph run | show | report | answer`` as a person and an agent use them:
real processes against the test server, exit codes included."""

from __future__ import annotations

import uuid
from pathlib import Path

from test_cli import _base_env, _run

WALK = """\
name: walk
description: a branch, a question and an end
entry: triage
params:
  depth: {type: int, default: 1, min: 1, max: 3}
state:
  notes: {type: str}
steps:
  - id: triage
    title: Triage the request
    actions: Depth {{ params.depth }}. Pick quick or full.
    outcomes: [quick, full]
    next: {quick: finish, full: research}
  - id: research
    title: Research
    actions: "{% if answers %}Scope: {{ answers.scope }}{% else %}Ask the scope.{% endif %}"
    ask: true
    next: {ok: finish}
  - id: finish
    title: Finish
    gate:
      evidence_schema:
        summary: {type: string, required: true, min_length: 5}
"""


async def test_a_graph_run_from_the_command_line(env, settings_for, run_worker, tmp_path: Path):
    library = tmp_path / "lib"
    (library / "graphs").mkdir(parents=True)
    (library / "graphs" / "walk.yaml").write_text(WALK)
    settings = settings_for()
    cli_env = _base_env(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_LIBRARY=str(library),
        PHASEGATE_HOME=settings.home,
        PHASEGATE_APPROVER="lead",
    )
    rid = f"graph-cli-{uuid.uuid4().hex[:6]}"
    async with run_worker(settings):
        r = await _run(cli_env, "graph", "run", "walk", "--param", "depth=3", "--id", rid)
        assert r.code == 0, r.err
        assert "step triage: Triage the request" in r.out and "Depth 3." in r.out
        assert "outcomes: quick, full" in r.out and "research" not in r.out

        r = await _run(cli_env, "graph", "report", rid, "research", "ok")
        assert r.code == 1 and "on step 'triage', not 'research'" in r.err
        r = await _run(cli_env, "graph", "report", rid, "triage", "full")
        assert r.code == 0 and "next step: research" in r.out, r.err
        r = await _run(
            cli_env, "graph", "report", rid, "research", "needs_input",
            "--question", "scope:How wide?:narrow|wide",
        )  # fmt: skip
        assert r.code == 0 and "waits for a person's answers" in r.out, r.err
        r = await _run(cli_env, "graph", "show", rid)
        assert r.code == 3 and "scope: How wide? [narrow | wide]" in r.out
        r = await _run(cli_env, "graph", "answer", rid, "--answer", "scope=sideways")
        assert r.code == 1 and "not an option" in r.err
        r = await _run(cli_env, "graph", "answer", rid, "--answer", "scope=wide")
        assert r.code == 0 and "answered by lead" in r.out, r.err
        r = await _run(cli_env, "graph", "show", rid)
        assert "Scope: wide" in r.out and "visit 2" in r.out
        await _run(cli_env, "graph", "report", rid, "research", "ok")
        r = await _run(
            cli_env, "graph", "report", rid, "finish", "ok", "--evidence", '{"summary": "ok"}'
        )
        assert r.code == 2 and "summary" in r.out  # the gate's min_length
        r = await _run(
            cli_env, "graph", "report", rid, "finish", "ok", "--evidence", '{"summary": "all done"}'
        )
        assert r.code == 0 and "the run completed" in r.out, r.err
        r = await _run(cli_env, "graph", "show", rid, "--mermaid")
        assert r.code == 0 and r.out.startswith("flowchart TD")
        assert "class s0 taken" in r.out and "-- full -->" in r.out
