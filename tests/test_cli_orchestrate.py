"""``phasegate orchestrate`` / ``plan show`` end to end: the real CLI in a subprocess
against the shared dev server, a worker (own task queue) in this process, the demo
models and the scripted coding agent.

Also the issue and profile files the CLI reads (no server needed): every error
names ``file:line`` and the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import cli_argv
from ports import free_port
from temporalio.service import RPCError

from phasegate.client import keys
from phasegate.client.cli._issue_files import load_profile, read_issue
from phasegate.client.cli.orchestrate import default_subcommand
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.errors import OrchestrationError, PhasegateError

REPO = Path(__file__).resolve().parent.parent
ISSUES = REPO / "examples" / "issues"


@dataclass
class Run:
    code: int
    out: str
    err: str


async def _cli(env: dict[str, str], *args: str, cwd: Path = REPO, timeout: float = 90) -> Run:
    proc = await asyncio.create_subprocess_exec(
        *cli_argv(),
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


def _env(settings=None, client=None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env["PYTHONUNBUFFERED"] = "1"
    if settings is None:
        env["TEMPORAL_ADDRESS"] = f"127.0.0.1:{free_port()}"  # nothing there
    else:
        env.update(
            TEMPORAL_ADDRESS=client.service_client.config.target_host,
            PHASEGATE_TASK_QUEUE=settings.task_queue,
            PHASEGATE_HOME=settings.home,
        )
    env.update(extra)
    return env


def _profile(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


async def _terminate(client, *ids: str) -> None:
    for wid in ids:
        with contextlib.suppress(RPCError):  # already closed
            await client.get_workflow_handle(wid).terminate("test over")


# ---------------------------------------------------------------- end to end


async def test_typo_fix_end_to_end_with_json_and_plan_show(env, settings_for, run_worker, tmp_path):
    settings = settings_for()  # unsigned approvals allowed: the child's plan approved by name
    work = tmp_path / "todo"
    work.mkdir()
    (work / "README.md").write_text("Install: `pip instal todo-api`\n")
    cli_env = _env(settings, env.client)
    oid = "orch-cli-typo"
    async with run_worker(settings):
        first = await _cli(
            cli_env, "orchestrate", str(ISSUES / "typo-fix.md"), "--profile", "demo",
            "--workdir", str(work), "--id", oid, "--json", "--no-wait",
        )  # fmt: skip
        # waits for a person: the developer's session asks for its plan's approval
        assert first.code == 3, first.err
        doc = json.loads(first.out)  # stdout: one JSON document; progress went to stderr
        assert doc["orchestration_id"] == oid and doc["status"] == "running"
        assert [s["agent"] for s in doc["plan"]["steps"]] == ["developer", "reviewer"]
        assert doc["plan"]["current"] == 0
        assert {h["kind"] for h in doc["history"]} >= {"started", "plan", "step_started"}
        child = doc["child_sessions"][0]
        assert child == f"{oid}-dev-0-1"
        assert "plan (rules): developer → reviewer" in first.err
        assert f"`phasegate phase {child}`" in first.err
        assert f"phasegate approve {child} --as" in first.err
        assert "waiting for a person (--no-wait)" in first.err

        shown = await _cli(cli_env, "plan", "show", oid)
        assert shown.code == 0, shown.err
        assert "▶ 0 developer [running]" in shown.out and f"session {child}" in shown.out

        approved = await _cli(cli_env, "approve", child, "--as", "lead", "--comment", "ok")
        assert approved.code == 0, approved.err
        done = await _cli(cli_env, "orchestrate", "watch", oid)
        assert done.code == 0, done.out + done.err
        assert "✓ developer_0 done: session" in done.out
        assert "✓ reviewer_0 done: approved" in done.out
        assert done.out.rstrip().splitlines()[-1].startswith("completed: 3 outputs")

        shown, as_json, not_orch, missing, listed = await asyncio.gather(
            _cli(cli_env, "plan", "show", oid),
            _cli(cli_env, "plan", "show", oid, "--json"),
            _cli(cli_env, "plan", "show", child),
            _cli(cli_env, "plan", "show", "orch-nobody"),
            _cli(cli_env, "orchestrate", "list", "--json"),
        )
    assert "— completed" in shown.out.splitlines()[0]
    assert "✓ 0 developer [done]" in shown.out and "✓ 1 reviewer  [done]" in shown.out
    assert "reviewer_0" in shown.out and "usage: 1 model requests" in shown.out
    final = json.loads(as_json.out)
    assert final["status"] == "completed" and final["plan"]["current"] is None
    assert [o["key"] for o in final["outputs"]] == ["planner_0", "developer_0", "reviewer_0"]
    assert final["outputs"][1]["output"]["completed"] is True
    assert final["history"][-1]["kind"] == "completed"
    assert not_orch.code == 1 and f"{child} is not an orchestration" in not_orch.err
    assert "phasegate status" in not_orch.err
    assert missing.code == 1 and "no orchestration orch-nobody" in missing.err
    assert (work / ".phasegate" / "orchestrations").is_dir()  # it worked in --workdir
    # `orchestrate list`: the orchestrations on this task queue (not its child session).
    rows = json.loads(listed.out)
    assert listed.code == 0 and [r["session_id"] for r in rows] == [oid], listed.err
    assert rows[0]["status"] == "completed" and rows[0]["execution_status"] == "completed"


# ---------------------------------------------------------------- signed gates


GATED = """\
name: gated
models: {analyst: demo, architect: demo, reviewer: demo}
approval_required: [architect]
developer: {mode: mcp}
"""


async def test_signed_gates_approve_reject_and_replan(
    env, settings_for, run_worker, tmp_path, alice
):
    settings = settings_for(
        allow_unsigned_approvals=False, approver_keys_file=alice.model_dump_json()
    )
    profile = _profile(tmp_path, GATED)
    work = tmp_path / "work"
    work.mkdir()
    forger_dir = tmp_path / "forger"
    keys.new_key("alice", directory=forger_dir)  # a key of the right name, not the deployment's
    cli_env = _env(settings, env.client, PHASEGATE_CONFIG_DIR=str(tmp_path))
    forged_env = {**cli_env, "PHASEGATE_CONFIG_DIR": str(forger_dir)}
    issue = str(ISSUES / "clear-feature.md")
    a, b = "orch-cli-gate-a", "orch-cli-gate-b"
    view = None
    try:
        async with run_worker(settings):
            oc = OrchestrationClient(env.client, settings.task_queue)
            started = await asyncio.gather(
                *(_cli(cli_env, "orchestrate", issue, "--profile", str(profile), "--workdir",
                       str(work), "--id", oid, "--no-wait") for oid in (a, b))
            )  # fmt: skip
            for run, oid in zip(started, (a, b), strict=True):
                assert run.code == 3, run.out + run.err
                assert "waiting for a person: gate 1 (approval of architect)" in run.out
                assert f"phasegate orchestrate approve {oid} --as alice" in run.out

            unsigned = await _cli(cli_env, "orchestrate", "approve", a, "--as", "mallory")
            assert unsigned.code == 1 and "not signed" in unsigned.err, unsigned.err
            forged = await _cli(forged_env, "orchestrate", "approve", a, "--as", "alice")
            assert forged.code == 1 and "signature" in forged.err, forged.err
            assert (await oc.state(a)).awaiting is not None  # neither touched the gate

            ok = await _cli(cli_env, "orchestrate", "approve", a, "--as", "alice",
                            "--comment", "design first")  # fmt: skip
            assert ok.code == 0, ok.err
            assert "approved gate 1 (approval of architect) by alice (signed)" in ok.out

            no_reason = await _cli(
                cli_env, "orchestrate", "approve", b, "--as", "alice", "--reject"
            )
            assert no_reason.code == 1 and "--comment" in no_reason.err
            rejected = await _cli(cli_env, "orchestrate", "approve", b, "--as", "alice",
                                  "--reject", "--comment", "not this quarter")  # fmt: skip
            assert rejected.code == 0, rejected.err
            failed = await _cli(cli_env, "orchestrate", "watch", b)
            assert failed.code == 1
            assert "alice rejected gate 1" in failed.err and "not this quarter" in failed.err
            with pytest.raises(OrchestrationError, match="alice rejected gate 1") as caught:
                await oc.result(b)
            assert caught.value.code == "orchestration_failed"

            # a waits in the developer step (an outside agent drives it): ask for a new plan
            for _ in range(100):
                view = await oc.state(a)
                if view.child_sessions:
                    break
                await asyncio.sleep(0.1)
            assert view.plan.steps[0].approved_by == "alice"
            assert (await oc.plan(a)).steps[0].approved_by == "alice"
            refused = await _cli(cli_env, "orchestrate", "replan", a, "--reason", "x",
                                 "--as", "mallory")  # fmt: skip
            assert refused.code == 1 and "not signed" in refused.err
            replan = await _cli(cli_env, "orchestrate", "replan", a, "--as", "alice",
                                "--reason", "the design was wrong: rethink the flag")  # fmt: skip
            assert replan.code == 0 and "replan requested by alice (signed)" in replan.out
            for _ in range(100):
                view = await oc.state(a)
                if view.run_chain_length == 2 and view.plan.steps:
                    break
                await asyncio.sleep(0.1)
            assert view.run_chain_length == 2
            history = await oc.history(a)
            assert [h.kind for h in history].count("replan") == 1
            assert any(h.kind == "replan_requested" and h.actor == "alice" for h in history)
    finally:
        await _terminate(env.client, a, *(view.child_sessions if view else []))


async def test_a_profile_the_worker_refuses_fails_with_every_problem(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for()
    profile = _profile(tmp_path, "models: {analyst: rules}\ndeveloper: {mode: command}\n")
    async with run_worker(settings):
        run = await _cli(
            _env(settings, env.client), "orchestrate", str(ISSUES / "unclear-bug.md"),
            "--profile", str(profile), "--workdir", str(tmp_path),
        )  # fmt: skip
    assert run.code == 1, run.out
    assert "the profile cannot run" in run.err
    assert "models.analyst is 'rules'" in run.err
    assert "developer.mode is 'command' but names no agent" in run.err


# ---------------------------------------------------------------- files (no server)


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("name: x\nmodels:\n  analyst: demo\n  coder: demo\n", ":4:", "models.coder"),
        ("name: x\nmax_replans: 40\n", ":2:", "max_replans: Input should be less than"),
        ("name: x\ndeveloper:\n  modle: command\n", ":3:", "'modle' is not a field"),
        ("name: [x\n", ":2:", "not valid YAML"),
        ("- a\n- b\n", ":1:", "a profile is a mapping"),
    ],
)
async def test_bad_profiles_name_file_line_and_field(tmp_path, text, where, words):
    path = _profile(tmp_path, text)
    run = await _cli(_env(), "orchestrate", str(ISSUES / "typo-fix.md"), "--profile", str(path))
    assert run.code == 1
    assert f"error: {path}{where}" in run.err and words in run.err, run.err
    assert "hint:" in run.err


async def test_bad_issue_files_and_profile_names(tmp_path):
    (tmp_path / "untitled.md").write_text("just a body\n")
    (tmp_path / "bad-id.md").write_text("---\ntitle: T\nid: 'a b'\n---\nbody\n")
    (tmp_path / "typo.md").write_text("---\ntitel: T\n---\n# T\n")
    runs = await asyncio.gather(
        _cli(_env(), "orchestrate", str(tmp_path / "untitled.md"), "--profile", "demo"),
        _cli(_env(), "orchestrate", str(tmp_path / "bad-id.md"), "--profile", "demo"),
        _cli(_env(), "orchestrate", str(tmp_path / "typo.md"), "--profile", "demo"),
        _cli(_env(), "orchestrate", str(tmp_path / "missing.md")),
        _cli(_env(), "orchestrate", str(ISSUES / "typo-fix.md"), "--profile", "nosuch"),
    )
    assert all(r.code == 1 for r in runs)
    untitled, bad_id, typo, missing, profile = (r.err for r in runs)
    assert f"{tmp_path / 'untitled.md'}:1: the issue has no title" in untitled
    assert f"{tmp_path / 'bad-id.md'}:3: id: issue id must be" in bad_id
    assert f"{tmp_path / 'typo.md'}:2: unknown front matter field 'titel'" in typo
    assert "no such issue file" in missing
    assert "--profile: 'nosuch'" in profile and "default, demo" in profile


def test_issue_files_front_matter_heading_and_labels(tmp_path):
    a = read_issue(ISSUES / "typo-fix.md")
    assert (a.id, a.labels) == ("typo-fix", ["docs", "typo"])
    assert a.title == "Fix typo in README installation section"
    assert a.body.startswith("The install command") and "Labels" not in a.body
    b = read_issue(ISSUES / "unclear-bug.md")
    assert (b.id, b.labels) == ("TODO-212", ["bug", "needs-investigation"])
    assert "```" in b.body and b.title.startswith("Uploads sometimes fail")
    c = read_issue(ISSUES / "clear-feature.md")
    assert c.title == "Add a --json flag to the list command" and c.body.startswith("`todo list`")
    (tmp_path / "my issue #7.md").write_text("intro\n\n# Late title\nLabels: x\nbody\n")
    d = read_issue(tmp_path / "my issue #7.md")
    # the file name makes the id; a Labels line below text stays text
    assert (d.id, d.title, d.labels) == ("my-issue-#7", "Late title", [])
    assert "Labels: x" in d.body
    (tmp_path / "fenced.md").write_text("```\n# not a title\n```\n# Real\n")
    assert read_issue(tmp_path / "fenced.md").title == "Real"


def test_profiles_shipped_and_working_dir(tmp_path, monkeypatch):
    demo, source = load_profile("demo", cwd=tmp_path)
    assert source.name == "demo.yaml" and demo.models["reviewer"] == "demo"
    assert demo.working_dir == str(tmp_path.resolve())
    assert (demo.developer.mode, demo.developer.agent) == ("command", "scripted")
    default, _ = load_profile(None, workdir="sub", cwd=tmp_path)
    assert default.name == "default" and default.working_dir == str(tmp_path / "sub")
    nested = tmp_path / "conf"
    nested.mkdir()
    own = _profile(nested, '{"working_dir": "../repo", "max_replans": 1}', "p.json")
    mine, _ = load_profile(str(own), cwd=REPO)
    assert mine.working_dir == str(tmp_path / "repo") and mine.max_replans == 1
    with pytest.raises(PhasegateError, match="is neither a profile file"):
        load_profile("nosuch")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["orchestrate", "I.md"], ["orchestrate", "run", "I.md"]),
        (["--address", "h:1", "orchestrate", "--profile", "demo", "I.md"],
         ["--address", "h:1", "orchestrate", "run", "--profile", "demo", "I.md"]),
        (["orchestrate", "approve", "ID"], ["orchestrate", "approve", "ID"]),
        (["orchestrate", "--help"], ["orchestrate", "--help"]),
        (["status", "orchestrate"], ["status", "orchestrate"]),
    ],
)  # fmt: skip
def test_orchestrate_without_a_subcommand_runs_the_issue(argv, expected):
    assert default_subcommand(argv) == expected
