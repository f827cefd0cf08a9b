"""The MCP server through a real MCP client from the SDK: the server runs as a subprocess
(stdio, and once over streamable HTTP) against the shared dev server and an in-process
worker, exactly as Claude Code, Cursor or Codex would start it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fixture_evidence import GOOD_0
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from phasegate.client.api import PhasegateClient
from phasegate.client.mcp import TOOL_NAMES
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.settings import Settings

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "tests" / "fixtures" / "library"
SECRET = "SECRET-FUTURE-CONTENT"
TOKEN_BUDGET = 2000


def _server_env(address: str, settings: Settings) -> dict[str, str]:
    return {
        "TEMPORAL_ADDRESS": address,
        "PHASEGATE_TASK_QUEUE": settings.task_queue,
        "PHASEGATE_LIBRARY": str(LIBRARY),
        "PHASEGATE_HOME": settings.home,
    }


def _address(env: Any) -> str:
    return env.client.service_client.config.target_host


@contextlib.asynccontextmanager
async def _stdio(server_env: dict[str, str]) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "phasegate.client.mcp"],
        env=server_env,
        cwd=str(REPO),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        yield client


def _text(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def _call(client: Client, name: str, args: dict[str, Any]) -> CallToolResult:
    return await client.call_tool(name, args)


async def _ok(client: Client, name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    result = await _call(client, name, args)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return _text(result), result.structured_content


async def _err(client: Client, name: str, args: dict[str, Any]) -> str:
    result = await _call(client, name, args)
    assert result.is_error, _text(result)
    return _text(result)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_eight_small_tools_and_no_way_to_approve_or_answer(env, settings_for, tmp_path):
    settings = settings_for(LIBRARY)
    async with _stdio(_server_env(_address(env), settings)) as client:
        listed = await client.list_tools()
        names = [t.name for t in listed.tools]
        assert sorted(names) == sorted(TOOL_NAMES) and len(names) == 8
        for forbidden in ("approv", "decide", "control", "reject", "pause", "abandon", "answer"):
            assert not any(forbidden in n for n in names)
        # What the server sends for tools/list: descriptions + input schemas, ~4 chars a token.
        wire = json.dumps(
            [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed.tools]
        )
        assert len(wire) / 4 < TOKEN_BUDGET, f"tools/list is ~{len(wire) // 4} tokens"
        assert all(t.description and len(t.description) < 250 for t in listed.tools)

        text, data = await _ok(client, "list_workflows", {})
        by_type = {w["workflow_type"]: w for w in data["workflows"]}
        assert by_type["mini_v1"]["phases"] == 3 and by_type["dyn_v1"]["phases"] == "dynamic"
        assert "| `mini_v1` | Mini test workflow | 3 |" in text

        text = await _err(
            client, "decide_approval", {"session_id": "x", "phase": 1, "decision": "approve"}
        )
        assert "Unknown tool" in text


async def test_whole_session_through_mcp(env, settings_for, run_worker, tmp_path):
    settings = settings_for(LIBRARY)
    pg = PhasegateClient(env.client, settings.task_queue)
    seen: list[str] = []  # everything the agent saw before phase 2 was reached

    async def ok(name: str, args: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        text, data = await _ok(client, name, args)
        seen.append(text + json.dumps(data))
        return text, data

    async with run_worker(settings), _stdio(_server_env(_address(env), settings)) as client:
        text, data = await ok(
            "start_session", {"workflow_type": "mini_v1", "target": str(tmp_path)}
        )
        sid = data["session_id"]
        assert f"`{sid}`" in text and data["session"]["total_phases"] == 3

        text, data = await ok("get_current_phase", {"session_id": sid})
        assert data["status"] == "active" and data["phase"]["phase"] == 0
        assert str(tmp_path) in text and "Read the code" in text and "Write notes" in text
        assert "| `modules_found` | integer | yes | lambda x: x > 0 | How many modules |" in text
        assert "summary" in data["phase"]["gate"]["json_schema"]["required"]

        show = {"session_id": sid, "action": "show"}  # a phase's task text (get_task's)
        text, data = await ok("task", {**show, "phase": 0, "task_id": 1})
        assert "Read the code" in text and data["task"]["number"] == 1

        for phase in (1, 2):  # future phases are refused, without their content
            refusal = await _err(client, "task", {**show, "phase": phase, "task_id": "1"})
            assert "phase_sequence_violation" in refusal and "not available" in refusal
            seen.append(refusal)

        # A failed gate lists each problem as "field: message".
        text, data = await ok(
            "submit_checkpoint", {"session_id": sid, "phase": 0, "evidence": {"modules_found": 0}}
        )
        assert not data["passed"] and "Not passed" in text
        assert "- modules_found: " in text and "- summary: " in text

        args = {"session_id": sid, "phase": 0, "evidence": GOOD_0, "submission_id": "s-1"}
        text, data = await ok("submit_checkpoint", args)
        assert data["passed"] and data["current_phase"] == 1
        assert "## Now on Phase 1: Plan" in text and "alice" in text
        _, again = await ok("submit_checkpoint", args)  # a repeat returns the first result
        assert again == data

        text, data = await ok(
            "submit_checkpoint", {"session_id": sid, "phase": 1, "evidence": {"plan": "do it well"}}
        )
        assert data["passed"] and data["awaiting_approval"]
        assert data["awaiting_approval_from"] == ["alice"]
        assert (
            "awaiting approval by alice — a person must approve; there is no tool for that" in text
        )
        text, data = await ok("get_session_state", {"session_id": sid})
        assert data["status"] == "awaiting_approval" and "awaiting approval by alice" in text
        text, data = await ok("get_current_phase", {"session_id": sid})
        assert "there is no tool for that" in text
        assert not any(SECRET in s for s in seen)

        # The person approves outside MCP, as `phasegate approve` would.
        await pg.decide(sid, approver="alice", decision="approve", comment="ok")

        text, data = await ok("get_current_phase", {"session_id": sid})
        assert data["phase"]["phase"] == 2 and SECRET in text
        assert "phase 0: modules_found, summary" in text  # earlier evidence is listed
        text, data = await ok(
            "submit_checkpoint",
            {"session_id": sid, "phase": 2, "evidence": {"tests_run": 3, "tests_passed": 3}},
        )
        assert data["passed"] and data["completed"] and "completed" in text
        text, data = await ok("get_session_state", {"session_id": sid})
        assert data["status"] == "completed" and "all 3 phases done" in text
        text, data = await ok("get_current_phase", {"session_id": sid})
        assert data["phase"] is None and "complete" in text
    assert (await pg.result(sid)).completed_phases == [0, 1, 2]


async def test_bad_inputs_are_tool_errors(env, settings_for, run_worker, tmp_path):
    settings = settings_for(LIBRARY)
    pg = PhasegateClient(env.client, settings.task_queue)
    async with run_worker(settings), _stdio(_server_env(_address(env), settings)) as client:
        sid = await pg.start("mini_v1", str(tmp_path))
        submit = {"session_id": sid, "phase": 0}

        big = {"blob": "x" * (1024 * 1024 + 1)}
        text = await _err(client, "submit_checkpoint", {**submit, "evidence": big})
        assert "payload_too_large" in text and "256 KiB" in text and "not sent" in text

        assert "dict" in await _err(client, "submit_checkpoint", {**submit, "evidence": "all done"})
        assert "dict" in await _err(client, "submit_checkpoint", {**submit, "evidence": "[1, 2]"})
        text = await _err(client, "submit_checkpoint", {**submit, "phase": -1, "evidence": GOOD_0})
        assert "greater than or equal to 0" in text
        text = await _err(client, "submit_checkpoint", {"session_id": sid})
        assert "phase" in text and "evidence" in text and "required" in text.lower()
        text = await _err(client, "task", {"session_id": sid, "action": "show", "phase": 0})
        assert "needs task_id" in text
        assert "Input should be" in await _err(client, "task", {"session_id": sid, "action": "x"})
        assert "at least 1" in await _err(client, "get_session_state", {"session_id": "  "})
        assert "at most 200" in await _err(client, "get_session_state", {"session_id": "s" * 201})
        text = await _err(client, "get_session_state", {"session_id": "no-such-session"})
        assert "session_not_found" in text and "no-such-session" in text
        text = await _err(client, "submit_checkpoint", {**submit, "phase": 2, "evidence": GOOD_0})
        assert "phase_sequence_violation" in text and SECRET not in text
        text = await _err(
            client, "task", {"session_id": sid, "action": "show", "phase": 0, "task_id": "9"}
        )
        assert "no task '9'" in text
        text = await _err(client, "start_session", {"workflow_type": "nope_v9", "target": ""})
        assert "workflow_not_found" in text and "mini_v1" in text

        # Nothing reached the session, and the server still answers.
        _, data = await _ok(client, "get_session_state", {"session_id": sid})
        assert data["status"] == "active" and data["attempts"] == 0
        _, data = await _ok(client, "submit_checkpoint", {**submit, "evidence": GOOD_0})
        assert data["passed"]


TASKS_SPEC = """# Tasks: greeting

## Phase 1: Build

- [ ] T001 Write the greeting file
  - Acceptance: `greeting.txt` contains `hello`
- [ ] T002 Document it (depends on T001)
"""


async def test_task_tool_claims_and_completes_tasks(env, settings_for, run_worker, tmp_path):
    from phasegate.domain.session.messages import SessionOptions

    settings = settings_for(LIBRARY)
    pg = PhasegateClient(env.client, settings.task_queue)
    (tmp_path / "tasks.md").write_text(TASKS_SPEC)
    async with run_worker(settings), _stdio(_server_env(_address(env), settings)) as client:
        options = SessionOptions(spec_path=str(tmp_path / "tasks.md"))
        sid = await pg.start("tasks_v1", str(tmp_path), options=options)
        call = {"session_id": sid}

        text, data = await _ok(client, "task", {**call, "action": "list"})
        assert "- [ ] `T002` Document it (depends on T001) — waits for T001" in text
        assert data["next_task"] == "T001" and data["tasks"][1]["waiting_for"] == ["T001"]
        assert f'Next: task(action="next", session_id="{sid}") claims T001.' in text

        assert "needs agent" in await _err(client, "task", {**call, "action": "next"})
        text, data = await _ok(client, "task", {**call, "action": "next", "agent": "ann"})
        assert text.startswith("Claimed `T001`: Write the greeting file (phase 0).")
        assert "- `greeting.txt` contains `hello`" in text
        done = f'task(action="done", session_id="{sid}", agent="ann", task_id="T001"'
        assert f"Next: do the work, then {done}" in text
        assert data["task"]["claimed_by"] == "ann" and data["acceptance"]

        # Another agent is refused; the hint names the task tool, not the CLI.
        text = await _err(
            client, "task", {**call, "action": "start", "agent": "bob", "task_id": "T001"}
        )
        assert "task_refused" in text and "claimed by ann" in text
        assert 'task(action="next")' in text and "phasegate task" not in text

        args = {**call, "action": "done", "agent": "ann", "task_id": "T001", "summary": "wrote it"}
        text, data = await _ok(client, "task", args)
        assert text.startswith("**Not completed**: `T001` stays active.")
        assert "- ✗ `greeting.txt` contains `hello` — greeting.txt does not exist" in text
        assert not data["ok"] and data["criteria"][0]["passed"] is False
        assert "Next: fix what failed, then " + done in text

        (tmp_path / "greeting.txt").write_text("hello\n")
        text, data = await _ok(client, "task", {**args, "evidence": {"files": ["greeting.txt"]}})
        assert text.startswith("**Completed** `T001`.") and data["ok"]
        assert "- ✓ `greeting.txt` contains `hello`" in text
        assert f'Next: task(action="next", session_id="{sid}", agent="ann") claims T002.' in text

        text, data = await _ok(client, "task", {**call, "action": "show", "task_id": "T001"})
        assert "## [x] `T001`: Write the greeting file (completed)" in text
        assert data["status"] == "completed" and data["summary"] == "wrote it"


async def test_unreachable_temporal_is_a_tool_error(settings_for):
    settings = settings_for(LIBRARY)
    port = _free_port()  # nothing listens there
    async with _stdio(_server_env(f"127.0.0.1:{port}", settings)) as client:
        text, _ = await _ok(client, "list_workflows", {})  # needs no Temporal
        assert "mini_v1" in text
        text = await _err(client, "get_session_state", {"session_id": "any"})
        assert f"cannot reach Temporal at 127.0.0.1:{port}" in text
        assert "start one with `phasegate server`" in text


async def test_streamable_http(env, settings_for, run_worker, tmp_path):
    settings = settings_for(LIBRARY)
    pg = PhasegateClient(env.client, settings.task_queue)
    port = _free_port()
    log = (tmp_path / "mcp-http.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "phasegate.client.mcp_server",  # the former module path still runs the server
        "--http",
        str(port),
        env={**os.environ, **_server_env(_address(env), settings)},
        cwd=str(REPO),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        async with run_worker(settings):
            sid = await pg.start("mini_v1", str(tmp_path))
            for _ in range(300):
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                assert proc.returncode is None, (tmp_path / "mcp-http.log").read_text()
                await asyncio.sleep(0.05)
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                listed = await client.list_tools()
                assert sorted(t.name for t in listed.tools) == sorted(TOOL_NAMES)
                text, data = await _ok(client, "get_session_state", {"session_id": sid})
                assert data["status"] == "active" and data["current_phase"] == 0
                assert "mini_v1" in text
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


@pytest.mark.parametrize("argv", [["--http", "0"], ["--http", "x"]])
def test_bad_port_is_a_usage_error(argv):
    from phasegate.client.mcp import main

    assert main(argv) == 2


async def test_structured_content_is_what_the_model_should_read(
    env, settings_for, run_worker, tmp_path
):
    """Claude Code hands the model a tool's structuredContent, not its text: it carries
    the text (the next step, the hints) and little besides. Figures: the flagship's
    phase 0 as get_current_phase returns it, against the whole phase view."""
    import shutil

    from phasegate.domain.session.messages import PhaseView

    settings = settings_for(LIBRARY)
    spec = tmp_path / "spec"
    shutil.copytree(REPO / "examples" / "specs" / "todo-api", spec)
    async with run_worker(settings), _stdio(_server_env(_address(env), settings)) as client:
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start(
            "spec_execution_v1", str(spec), options=SessionOptions(spec_path=str(spec))
        )
        result = await _call(client, "get_current_phase", {"session_id": sid})
        text = _text(result)
        data = result.structured_content
        assert data is not None and data["text"] == text  # hints and next step included
        assert "submit_checkpoint" in data["text"]
        sent = len(json.dumps(data))
        view = await pg.phase(sid)
        assert isinstance(view, PhaseView)
        whole = len(json.dumps(view.model_dump(mode="json")))
        print(f"get_current_phase: text {len(text)} chars, structured {sent} chars "
              f"(the whole phase view: {whole})")  # fmt: skip
        assert sent < len(text) + 2500, (sent, len(text))
        assert "content" not in data["phase"] and data["phase"]["gate"]["json_schema"]
