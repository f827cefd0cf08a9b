"""The developer step: the spec ``write_dev_spec`` writes, and a coding agent run by
``run_coding_agent`` on a real dev server, driving a real ``spec_execution_v1`` session
over that spec. The test approves phase 0 as a person would (a signed decision with
the lead's key, which the agent does not hold). ``run_coding_agent`` runs inside a tiny
workflow, so its heartbeats, cancellation and timeout are Temporal's, not simulated.
The coding agents are the test worker's own (``DeveloperActivities``), named by the
request; tests/test_trust_developer.py attacks them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import sys
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from phasegate.activities.developer import (
    OUTPUT_TAIL_BYTES,
    CodingAgentRequest,
    CodingAgentRun,
    DeveloperActivities,
    DevSpecRequest,
    dev_tasks_md,
)
from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import Issue, PlanOutput
from phasegate.domain.session.messages import SessionOptions, SessionView
from phasegate.domain.settings import CodingAgent, Settings
from phasegate.testing import make_settings, running_worker, signed_approver
from phasegate.testing.coding_agent import WORK_FOLDER

write_dev_spec = DeveloperActivities().write_dev_spec  # writing a spec needs no agent
SCRIPTED = ["{python}", "-m", "phasegate.agents.scripted"]

ISSUE = Issue(
    id="42",
    title="Empty config file crashes the loader",
    body="Loading an empty `config.toml` raises KeyError.\n\n1. touch config.toml\n2. run it",
    labels=["bug"],
)
TWO_PHASES = """\
## Phase 1: Loader

- [ ] 1.1 Treat an empty file as no settings
- [ ] 1.2 Add a test for the empty file

**Validation Gate:**
- [ ] The empty file loads

## Phase 2: Docs

- [ ] 2.1 Document the defaults
"""
NO_PHASES = """\
# How to fix it

The loader should not assume a table exists.

- Return the defaults for an empty file
- Add a regression test
- Mention it in the changelog
"""

# Starts a grandchild, records both pids, then never ends (until its group is killed).
HANG = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(f"{__import__('os').getpid()} {child.pid}")
print("working", flush=True)
time.sleep(600)
"""


@workflow.defn(sandboxed=False)  # a test driver: the activity is what is under test
class DeveloperStep:
    @workflow.run
    async def run(self, req: CodingAgentRequest) -> CodingAgentRun:
        return await workflow.execute_activity_method(
            DeveloperActivities.run_coding_agent,
            req,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=5),
            retry_policy=RetryPolicy(maximum_attempts=1),
            cancellation_type=workflow.ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
        )


@contextlib.asynccontextmanager
async def developer_worker(
    client: Client,
    executor: concurrent.futures.ThreadPoolExecutor,
    agents: Mapping[str, CodingAgent | Sequence[str]],
    temporal_address: str = "",
) -> AsyncIterator[str]:
    """A worker for the test workflow and the developer activities, running ``agents``;
    yields its queue."""
    queue = f"dev-{uuid.uuid4().hex[:8]}"
    developer = DeveloperActivities(agents, temporal_address=temporal_address)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[DeveloperStep],
        activities=developer.activities,
        activity_executor=executor,
    ):
        yield queue


def lead_settings(tmp_path: Path) -> Settings:
    """A worker that takes only signed approvals, with the lead's public key."""
    lead = keys.new_key("lead", directory=tmp_path / "keys")
    keyfile = tmp_path / "approvers.json"
    keyfile.write_text(json.dumps([lead.model_dump(mode="json")]), encoding="utf-8")
    return make_settings(tmp_path / "home", approver_keys_file=str(keyfile))


@dataclasses.dataclass
class SpecSession:
    """A project, its developer spec, a spec_execution_v1 session over it (its worker
    takes only the lead's signed approvals), and the developer step's task queue."""

    env: WorkflowEnvironment
    wd: Path
    spec_path: str
    tasks: int
    pg: PhasegateClient
    sid: str
    queue: str
    key_dir: Path

    def agent(self, name: str, prompt: str | None = None) -> CodingAgentRequest:
        """The developer worker's coding agent ``name`` (honest, phantom) on this session."""
        return CodingAgentRequest(
            agent=name,
            working_dir=str(self.wd),
            session_id=self.sid,
            prompt=prompt or f"Complete the phasegate session {self.sid}.",
            timeout_minutes=3,
            task_queue=self.pg.task_queue,
        )

    async def run_with_approvals(
        self, req: CodingAgentRequest
    ) -> tuple[CodingAgentRun, list[int], SessionView]:
        """Run the developer step, approving as the lead whenever the session asks; the
        run, the phases approved and the session's status after it."""
        approve = signed_approver("lead", key_dir=self.key_dir, comment="plan looks right")
        done = asyncio.ensure_future((await start_step(self.env, self.queue, req)).result())
        approved: list[int] = []
        while not done.done():
            status = await self.pg.status(self.sid)
            if status.status == "awaiting_approval":
                await approve(self.pg, self.sid, status.current_phase)
                approved.append(status.current_phase)
            await asyncio.wait({done}, timeout=0.3)
        return done.result(), approved, await self.pg.status(self.sid)


async def start_step(
    env: WorkflowEnvironment, queue: str, req: CodingAgentRequest
) -> WorkflowHandle[DeveloperStep, CodingAgentRun]:
    return await env.client.start_workflow(
        DeveloperStep.run, req, id=f"devstep-{uuid.uuid4().hex[:8]}", task_queue=queue
    )


@contextlib.asynccontextmanager
async def session_over_spec(
    env: WorkflowEnvironment,
    executor: concurrent.futures.ThreadPoolExecutor,
    tmp_path: Path,
    plan: PlanOutput,
) -> AsyncIterator[SpecSession]:
    """The developer spec of ``plan`` in a new project, and a spec_execution_v1 session
    started over it, with its worker and the developer step's worker running."""
    wd = tmp_path / "project"
    wd.mkdir()
    req = DevSpecRequest(working_dir=str(wd), orchestration_id="orch-42", issue=ISSUE, plan=plan)
    spec = ActivityEnvironment().run(write_dev_spec, req)
    settings = lead_settings(tmp_path)
    pg = PhasegateClient(env.client, settings.task_queue)
    agents = {
        "honest": [*SCRIPTED, "{prompt}"],
        "phantom": [*SCRIPTED, "--phantom", "--spec", spec.spec_path, "{prompt}"],
    }
    # The test's worker is built from settings, not from its environment: name the address.
    address = env.client.service_client.config.target_host
    async with running_worker(env.client, settings, executor=executor):
        # The spec lies under <working_dir>/.phasegate/: the target's spec rules accept it.
        options = SessionOptions(spec_path=spec.spec_path)
        sid = await pg.start("spec_execution_v1", str(wd), options=options)
        async with developer_worker(env.client, executor, agents, address) as queue:
            yield SpecSession(
                env, wd, spec.spec_path, spec.tasks, pg, sid, queue, tmp_path / "keys"
            )


# --------------------------------------------------------------------------- the spec


def test_a_plan_the_parser_reads_is_the_tasks_md(tmp_path: Path) -> None:
    plan = PlanOutput(goal="Load empty files", plan_markdown=TWO_PHASES, confidence=0.9)
    req = DevSpecRequest(working_dir=str(tmp_path), orchestration_id="o-1", issue=ISSUE, plan=plan)
    spec = write_dev_spec(req)
    path = Path(spec.spec_path)
    assert path == tmp_path / ".phasegate/orchestrations/o-1/dev-1/tasks.md"
    assert (spec.phases, spec.tasks, spec.from_plan) == (2, 3, True)
    assert path.read_text(encoding="utf-8") == TWO_PHASES
    readme = (path.parent / "README.md").read_text(encoding="utf-8")
    assert ISSUE.title in readme and "Loading an empty `config.toml`" in readme
    assert write_dev_spec(req) == spec  # a retried activity writes the same spec

    # A second pass: the plan's tasks are marked done, the comments are the last phase.
    again = req.model_copy(update={"attempt": 2, "review_comments": ["Test the\nwhitespace file"]})
    second = parse_tasks_md(Path(write_dev_spec(again).spec_path).read_text(encoding="utf-8"))
    assert [(p.number, len(p.tasks)) for p in second.phases] == [(1, 2), (2, 1), (3, 1)]
    assert {t.status for p in second.phases[:2] for t in p.tasks} == {"done"}
    assert second.phases[2].tasks[0].name == "Test the whitespace file"


def test_markdown_the_parser_cannot_read_becomes_one_phase_of_its_list_items(
    tmp_path: Path,
) -> None:
    with pytest.raises(Exception, match="no phases found"):
        parse_tasks_md(NO_PHASES)
    plan = PlanOutput(goal="Load empty files", plan_markdown=NO_PHASES, confidence=0.8)
    req = DevSpecRequest(working_dir=str(tmp_path), orchestration_id="o-2", issue=ISSUE, plan=plan)
    spec = write_dev_spec(req)
    assert (spec.phases, spec.tasks, spec.from_plan) == (1, 3, False)
    parsed = parse_tasks_md(Path(spec.spec_path).read_text(encoding="utf-8"))
    assert parsed.phases[0].name == "Load empty files"
    assert [t.name for t in parsed.phases[0].tasks] == [
        "Return the defaults for an empty file",
        "Add a regression test",
        "Mention it in the changelog",
    ]
    # No plan at all (a typo fix): one task, the issue.
    no_plan = write_dev_spec(req.model_copy(update={"plan": None, "orchestration_id": "o/3#x"}))
    assert (no_plan.phases, no_plan.tasks) == (1, 1)
    assert Path(no_plan.spec_path).parent.parent.name.startswith("o-3-x-")  # one safe segment


_LINES = st.sampled_from(
    ["## Phase 3: B", "- [ ] 1.1 x", "- item", "* [x] T001 y", "1. one", "   - nested", "```",
     "# T", "**Validation Gate:**", "", "- [ ]* 2.1 opt", "#### Task 1.1: h", "Phase 2: z"]
)  # fmt: skip
_MARKDOWN = st.lists(_LINES | st.text(max_size=30), max_size=12).map("\n".join)


@hypothesis.settings(max_examples=300, deadline=None)
@given(_MARKDOWN, st.text(min_size=1, max_size=40), st.lists(_MARKDOWN, max_size=4))
def test_any_plan_and_comments_make_a_spec_the_session_accepts(
    markdown: str, goal: str, comments: list[str]
) -> None:
    plan = PlanOutput(goal=goal, plan_markdown=markdown or "-", confidence=0.5)
    text, _ = dev_tasks_md(ISSUE, plan, comments)
    phases = parse_tasks_md(text).phases
    assert phases and sum(len(p.tasks) for p in phases) >= len(phases)  # phase 0's rule
    wanted = [c for c in (" ".join(c.split()).lstrip("#>*-+ ") for c in comments) if c]
    if wanted:
        assert phases[-1].name == "Address the review comments"
        assert len(phases[-1].tasks) == len(wanted), text


def test_the_spec_folder_stays_inside_the_working_directory(tmp_path: Path) -> None:
    wd, outside = tmp_path / "wd", tmp_path / "elsewhere"
    wd.mkdir()
    outside.mkdir()
    (wd / ".phasegate").symlink_to(outside)
    req = DevSpecRequest(working_dir=str(wd), orchestration_id="o", issue=ISSUE)
    with pytest.raises(ApplicationError, match="outside the working directory") as err:
        write_dev_spec(req)
    assert err.value.non_retryable and err.value.type == "developer_invalid"
    assert not list(outside.iterdir())  # nothing created there either


# --------------------------------------------------------------------------- the agent


async def test_honest_agent_completes_the_session(env, executor, tmp_path: Path) -> None:
    plan = PlanOutput(goal="Load empty files", plan_markdown=TWO_PHASES, confidence=0.9)
    async with session_over_spec(env, executor, tmp_path, plan) as s:
        prompt = f"Complete session {s.sid}. The spec is {s.spec_path}."  # found in the prompt
        run, approved, status = await s.run_with_approvals(s.agent("honest", prompt=prompt))
    sid, wd = s.sid, s.wd
    assert run.exit_code == 0 and not run.timed_out, run.output_tail
    assert f"session {sid} completed (3 phases)" in run.output_tail
    assert status.status == "completed" and len(status.completed_phases) == 3
    assert approved == [0] and [a.approver for a in status.approvals] == ["lead"]
    written = sorted(p.relative_to(wd).as_posix() for p in (wd / WORK_FOLDER).rglob("*.md"))
    assert len(written) == s.tasks == 3 and written[0] == f"{WORK_FOLDER}/phase-1/1.1.md"


async def test_phantom_agent_leaves_the_session_incomplete(env, executor, tmp_path: Path) -> None:
    plan = PlanOutput(goal="Load empty files", plan_markdown=NO_PHASES, confidence=0.8)
    async with session_over_spec(env, executor, tmp_path, plan) as s:
        run, approved, status = await s.run_with_approvals(s.agent("phantom"))
    # The agent says it is done and exits 0; the session says otherwise, and why.
    assert run.exit_code == 0 and run.output_tail.rstrip().endswith("all tasks done")
    assert approved == [0]
    assert status.status == "active" and status.current_phase == 1, status.status
    assert [p.phase for p in status.completed_phases] == [0]
    problems = {p.field for p in status.last_problems}
    assert "files_changed" in problems, status.last_problems
    assert not (s.wd / WORK_FOLDER).exists()


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a reaper counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def _pids(path: Path) -> list[int]:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return [int(p) for p in path.read_text().split()]
        await asyncio.sleep(0.05)
    raise AssertionError("the command never started")


async def _all_dead(pids: list[int], within: float = 10.0) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while any(_alive(p) for p in pids):
        assert loop.time() - start < within, f"still running: {[p for p in pids if _alive(p)]}"
        await asyncio.sleep(0.05)
    return loop.time() - start


@contextlib.asynccontextmanager
async def hanging_step(
    env: WorkflowEnvironment,
    executor: concurrent.futures.ThreadPoolExecutor,
    tmp_path: Path,
    timeout_minutes: float = 60,
) -> AsyncIterator[tuple[WorkflowHandle[DeveloperStep, CodingAgentRun], list[int]]]:
    """A developer step whose command (``HANG``) never ends, once its command and the
    command's child run: the step's handle and their pids."""
    pidfile = tmp_path / "pids"
    req = CodingAgentRequest(
        agent="hang",
        working_dir=str(tmp_path),
        session_id="no-session",
        task_queue="unused",
        timeout_minutes=timeout_minutes,
    )
    hang = {"hang": [sys.executable, "-c", HANG, str(pidfile)]}
    async with developer_worker(env.client, executor, hang) as queue:
        handle = await start_step(env, queue, req)
        yield handle, await _pids(pidfile)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_cancelling_the_step_kills_the_agent_and_its_children(
    env, executor, tmp_path: Path
) -> None:
    async with hanging_step(env, executor, tmp_path) as (handle, pids):
        assert all(_alive(p) for p in pids)
        for _ in range(100):  # the activity heartbeats while the agent works
            pending = (await handle.describe()).raw_description.pending_activities
            if pending and pending[0].HasField("last_heartbeat_time"):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no heartbeat recorded")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
        assert isinstance(err.value.cause, CancelledError)
        await _all_dead(pids, within=2.0)  # WAIT_CANCELLATION_COMPLETED: dead when it ends


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
async def test_a_timeout_kills_the_agent_and_is_a_result(env, executor, tmp_path: Path) -> None:
    async with hanging_step(env, executor, tmp_path, timeout_minutes=0.04) as (handle, pids):
        run = await handle.result()  # after 2.4 s
    assert run.timed_out and run.exit_code == -9, run
    assert 2.4 <= run.seconds < 10 and "working" in run.output_tail
    await _all_dead(pids, within=2.0)


async def test_output_is_capped_redacted_and_the_env_is_the_sessions(
    env, executor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEVSTEP_API_KEY", "sk-devstep-0123456789")  # the agent's own key
    monkeypatch.setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", "/etc/worker.key")  # not declared
    monkeypatch.setenv("PHASEGATE_ALLOW_UNSIGNED_APPROVALS", "1")  # the worker's business
    address = env.client.service_client.config.target_host
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)  # as `phasegate worker` would find it
    script = (
        "import json, os, sys\n"
        "print('noise ' * 50_000)\n"
        "keep = ('PHASEGATE_', 'TEMPORAL_')\n"
        "print(json.dumps({k: v for k, v in os.environ.items() if k.startswith(keep)}))\n"
        "print(os.environ['DEVSTEP_API_KEY'], sys.argv[1:])\n"
        "print('END')\n"
    )
    echo = CodingAgent(
        command=[sys.executable, "-c", script, "{session_id}", "-p", "<{prompt}>"],
        env=["DEVSTEP_API_KEY"],  # what the agent's entry declares it needs
    )
    req = CodingAgentRequest(
        agent="echo",
        working_dir=str(tmp_path),
        session_id="sess-7",
        prompt="fix {session_id} {x}",
        task_queue="pg-queue",
    )
    async with developer_worker(env.client, executor, {"echo": echo}) as queue:
        run = await (await start_step(env, queue, req)).result()
    assert run.exit_code == 0
    head, _, kept = run.output_tail.partition("\n")
    assert "earlier bytes omitted" in head and len(kept.encode()) <= OUTPUT_TAIL_BYTES
    lines = kept.splitlines()
    assert lines[-1] == "END"
    assert json.loads(lines[-3]) == {  # the session's, and nothing of the worker's
        "PHASEGATE_SESSION": "sess-7",
        "PHASEGATE_TASK_QUEUE": "pg-queue",
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
    }
    # The key the agent printed is redacted; placeholders are filled once, never re-read.
    assert lines[-2] == "[redacted $DEVSTEP_API_KEY] ['sess-7', '-p', '<fix {session_id} {x}>']"


async def test_a_command_that_cannot_start_fails_the_step_for_good(
    env, executor, tmp_path: Path
) -> None:
    req = CodingAgentRequest(
        agent="missing", working_dir=str(tmp_path), session_id="s", task_queue="q"
    )
    missing = {"missing": ["no-such-coding-agent-xyz", "-p", "{prompt}"]}
    async with developer_worker(env.client, executor, missing) as queue:
        with pytest.raises(WorkflowFailureError) as err:
            await (await start_step(env, queue, req)).result()
    cause = err.value.cause.cause  # ActivityError -> ApplicationError
    assert isinstance(cause, ApplicationError) and cause.type == "developer_invalid"
    assert "coding agent 'missing' cannot start: command not found: no-such-coding-agent-xyz" in (
        cause.message
    )
    assert "PHASEGATE_DEVELOPER_COMMANDS" in cause.message
