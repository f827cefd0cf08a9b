"""Control characters an agent writes never reach a person's terminal raw (issue 14,
finding 6): the escaping function itself, the renderers, and the real CLI on the dev
server reading what a hostile agent sent through its own Temporal client (level 2)
or wrote into a tasks.md (level 3)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cli_helpers import cli_argv
from orchestration_helpers import HONEST_AGENT
from ports import free_port

from phasegate.client.api import PhasegateClient
from phasegate.client.cli._orchestrate_render import entry_line, render_plan
from phasegate.client.cli._render import (
    TerminalSafeFormatter,
    one_line,
    render_spec,
    render_status,
    terminal_safe,
)
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import HistoryEntry, OrchestrationView, PlanView
from phasegate.domain.session.messages import ControlRequest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"

# The attack of the report: erase the line, go back to its start, print in green.
ATTACK = "Fix typo\x1b[2K\r\x1b[32mAPPROVED by lead"
SHOWN = "Fix typo\\x1b[2K\\r\\x1b[32mAPPROVED by lead"
# Everything a terminal acts on: C0 (but newline and tab), DEL, C1, bidi controls.
RAW = [chr(c) for c in range(0x20) if chr(c) not in "\n\t"]
RAW += ["\x7f", *map(chr, range(0x80, 0xA0)), *map(chr, range(0x202A, 0x202F))]
RAW += [chr(c) for c in range(0x2066, 0x206A)]


def assert_terminal_safe(text: str) -> None:
    found = sorted({repr(c) for c in text if c in RAW})
    assert not found, f"raw control characters reach the terminal: {found}\n{text!r}"


# ---------------------------------------------------------------- the function


def test_controls_become_visible_escapes() -> None:
    assert terminal_safe(ATTACK) == SHOWN
    assert (
        terminal_safe("bell\x07 nul\x00 bs\x08 del\x7f") == "bell\\x07 nul\\x00 bs\\x08 del\\u007f"
    )
    assert terminal_safe("csi\x9b31m osc\x9d") == "csi\\u009b31m osc\\u009d"
    assert (
        terminal_safe("invoice\u202egnp.exe \u2066x\u2069")
        == "invoice\\u202egnp.exe \\u2066x\\u2069"
    )
    for text in [ATTACK, "".join(RAW)]:
        assert_terminal_safe(terminal_safe(text))


def test_layout_and_unicode_stay_as_they_are() -> None:
    text = "line 1\n\tindented · café ✓ 🚀 👩‍💻 中文 עברית ∑ — done"
    assert terminal_safe(text) == text
    assert terminal_safe("a\r\nb\r\n") == "a\nb\n"  # CRLF is a line end, not an attack
    assert terminal_safe("plain ascii") == "plain ascii"


def test_one_line_fields_cannot_start_a_line() -> None:
    assert one_line("title\n  approvers: lead\tx") == "title\\n  approvers: lead\\tx"
    assert one_line(ATTACK) == SHOWN


def test_json_stays_json_with_the_same_value() -> None:
    data = {"name": ATTACK + "\x7f\x9b\u202e🚀", "n": [1, "é"]}
    for text in (json.dumps(data, ensure_ascii=False, indent=2), json.dumps(data)):
        safe = terminal_safe(text)
        assert_terminal_safe(safe)
        assert json.loads(safe) == data


def test_log_lines_are_terminal_safe() -> None:
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "step failed: %s", (ATTACK,), None
    )
    line = TerminalSafeFormatter("%(levelname)s %(message)s").format(record)
    assert line == f"WARNING step failed: {SHOWN}"


# ---------------------------------------------------------------- renderers


def _entry(kind: str, detail: str, **kw: str) -> HistoryEntry:
    return HistoryEntry(seq=0, at=datetime.now(UTC), kind=kind, detail=detail, **kw)


def test_plan_and_history_lines_escape_what_agents_wrote() -> None:
    view = OrchestrationView(
        orchestration_id="orch-1",
        status="running",
        issue=Issue(id="1", title=ATTACK),
        plan=PlanView(),
        failure="boom\x1b[1A\rsecond line\nthird",
    )
    text = render_plan(view, [_entry("started", ATTACK)], tail=10)
    assert_terminal_safe(text)
    first = text.splitlines()[0]
    assert first == f"orch-1 · issue 1: {SHOWN} — running"
    assert "failed: boom\\x1b[1A\\rsecond line\\nthird" in text  # one line, escaped
    assert entry_line(_entry("step_done", "x\x9b2J")).endswith("x\\u009b2J")


def test_spec_names_are_escaped() -> None:
    from phasegate.activities.tasks_md import parse_tasks_md

    spec = parse_tasks_md(
        f"## Phase 1: Setup\x1b[2K\n\n- [ ] 1.1 {ATTACK}\n- [ ] 1.2 café 🚀\n", source="t.md"
    )
    text = render_spec(spec)
    assert_terminal_safe(text)
    assert "Phase 1: Setup\\x1b[2K" in text and "café 🚀" in text
    assert "Fix typo\\x1b[2K \\x1b[32mAPPROVED by lead" in text  # the parser made \r a space


def test_session_status_escapes_phase_names_comments_and_audit() -> None:
    from phasegate.domain.session.messages import SessionView

    view = SessionView.model_validate(
        {
            "workflow_type": "mini_v1",
            "status": "active",
            "current_phase": 0,
            "current_phase_name": ATTACK,
            "total_phases": 2,
            "feedback": "ok\x1b[31m\nforged line",
        }
    )
    text = render_status("s", view)
    assert_terminal_safe(text)
    assert f"phase 0 (1 of 2): {SHOWN}" in text
    assert "reviewer feedback: ok\\x1b[31m\\nforged line" in text


# ---------------------------------------------------------------- the real CLI


@dataclass
class Run:
    code: int
    out: str
    err: str


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


async def _cli(env: dict[str, str], *args: str, timeout: float = 90) -> Run:
    proc = await asyncio.create_subprocess_exec(
        *cli_argv(), *args, cwd=REPO, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    run = Run(proc.returncode, out.decode(), err.decode())
    assert "Traceback" not in run.err, run.err
    return run


def _online(settings, client) -> dict[str, str]:
    return _env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_LIBRARY=str(FIXTURES / "library"),
        PHASEGATE_HOME=settings.home,
    )


async def test_spec_parse_of_a_planted_tasks_md(tmp_path: Path) -> None:
    """Level 3: the agent writes the spec the person then inspects."""
    spec = tmp_path / "tasks.md"
    spec.write_bytes(
        b"# Tasks\n\n## Phase 1: Setup\x1b[2K\r\x1b[32mAPPROVED by lead\n\n"
        b"- [ ] 1.1 Do it\x1b]0;pwned\x07 now \xe2\x80\xae gnp.exe \xf0\x9f\x9a\x80\n"
        b"- [ ] 1.2 Normal caf\xc3\xa9 task\n"
    )
    env = _env(TEMPORAL_ADDRESS=f"127.0.0.1:{free_port()}")  # no server needed
    text, as_json = await asyncio.gather(
        _cli(env, "spec", "parse", str(tmp_path)), _cli(env, "spec", "parse", str(spec), "--json")
    )
    assert text.code == 0, text.err
    assert_terminal_safe(text.out + text.err)
    assert "Phase 1: Setup\\x1b[2K" in text.out
    assert "Do it\\x1b]0;pwned\\x07 now \\u202e gnp.exe 🚀" in text.out
    assert "Normal café task" in text.out
    assert as_json.code == 0, as_json.err
    assert_terminal_safe(as_json.out)
    parsed = json.loads(as_json.out)  # still JSON, with the exact names
    assert parsed["phases"][0]["name"] == "Setup\x1b[2K"
    assert parsed["phases"][0]["tasks"][0]["name"] == "Do it\x1b]0;pwned\x07 now \u202e gnp.exe 🚀"


async def test_plan_show_and_watch_of_a_hostile_issue_title(
    env, settings_for, run_worker, tmp_path: Path
) -> None:
    """Level 2: the agent starts an orchestration with its own client; the person follows
    it with ``plan show`` and ``orchestrate watch`` while a gate waits for them."""
    settings = settings_for()
    work = tmp_path / "repo"
    work.mkdir()
    profile = Profile(
        working_dir=str(work),
        models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        approval_required=["developer"],
        developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
    )
    oc = OrchestrationClient(env.client, settings.task_queue)
    oid = f"orch-term-{uuid.uuid4().hex[:8]}"
    async with run_worker(settings):
        await oc.start(Issue(id="7", title=ATTACK, labels=["docs"]), profile, orchestration_id=oid)
        for _ in range(300):  # the developer step waits for a person's approval
            view = await oc.state(oid)
            if view.awaiting is not None:
                break
            await asyncio.sleep(0.1)
        assert view.awaiting is not None, view.failure
        cli_env = _online(settings, env.client)
        shown, watched, as_json = await asyncio.gather(
            _cli(cli_env, "plan", "show", oid),
            _cli(cli_env, "orchestrate", "watch", oid, "--no-wait"),
            _cli(cli_env, "plan", "show", oid, "--json"),
        )
        await env.client.get_workflow_handle(oid).terminate("test over")
    assert shown.code == 0, shown.err
    assert_terminal_safe(shown.out + shown.err)
    assert shown.out.splitlines()[0] == f"{oid} · issue 7: {SHOWN} — awaiting"
    assert f"started: {SHOWN}" in shown.out and "approvers:" in shown.out
    assert watched.code == 3, watched.out + watched.err
    assert_terminal_safe(watched.out + watched.err)
    assert f"started: {SHOWN}" in watched.out
    assert json.loads(as_json.out)["issue"]["title"] == ATTACK  # --json stays exact


async def test_status_shows_what_the_agent_sent_escaped(env, settings_for, run_worker, tmp_path):
    """Level 2: evidence, a control's reason: the person's ``status`` and ``watch``."""
    settings = settings_for(FIXTURES / "library")
    pg = PhasegateClient(env.client, settings.task_queue)
    async with run_worker(settings):
        sid = await pg.start("mini_v1", str(tmp_path))
        result = await pg.submit(sid, 0, {"modules_found": 3, "summary": "\x1b[2K\r"})
        assert not result.passed  # too short: a problem quoting the value
        await pg.control(sid, ControlRequest(action="pause", reason=ATTACK, actor="agent"))
        await pg.control(sid, ControlRequest(action="resume", actor="agent"))
        cli_env = _online(settings, env.client)
        status, watched = await asyncio.gather(
            _cli(cli_env, "status", sid), _cli(cli_env, "watch", sid, "--once")
        )
    for run in (status, watched):
        assert run.code == 0, run.err
        assert_terminal_safe(run.out + run.err)
        assert f"pause by agent: {SHOWN}" in run.out
        assert "last problems:" in run.out


@pytest.mark.parametrize("stream", ["out", "err"])
def test_echo_is_the_chokepoint(stream: str, capsys: pytest.CaptureFixture[str]) -> None:
    from phasegate.client.cli import _common as cmd

    (cmd.echo if stream == "out" else cmd.echo_err)(ATTACK)
    captured = capsys.readouterr()
    assert getattr(captured, stream) == SHOWN + "\n"
