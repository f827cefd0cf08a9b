"""The developer step's activities attacked as a hostile coding agent would (issue 14).

With a shell in the workspace (level 3) the agent plants symlinks at the names the
worker writes, a FIFO where an output kept by reference is read, and a ``phasegate``
package of its own where the scripted agent starts. With a Temporal client (level 2) it
runs a worker of its own whose workflow schedules phasegate's activities on the
worker's queue with inputs of its choosing (the raw SDK, by activity name). The
worker here registers ``DeveloperActivities`` / ``OrchestrationActivities`` without
phasegate's caller check, so what is tested is that the activities themselves trust
no input. Nothing may change outside the workspace, run a program the worker does not
list, reach the worker's secrets, or hold a worker thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import shutil
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.worker import Worker

from phasegate.activities.developer import (
    CodingAgentRequest,
    DeveloperActivities,
    DevSpecRequest,
    command_ref,
)
from phasegate.activities.orchestration import OrchestrationActivities, StoreOutputRequest
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.agents import Issue, PlanOutput
from phasegate.domain.orchestration.gates import digest
from phasegate.domain.settings import Settings

ISSUE = Issue(id="7", title="Empty config crashes the loader", body="It raises KeyError.")
PLAN = PlanOutput(
    goal="Load empty files",
    plan_markdown="## Phase 1: Loader\n\n- [ ] 1.1 Treat an empty file as no settings\n"
    + "\n".join(f"<!-- note {i} -->" for i in range(100)),
    confidence=0.9,
)
PRECIOUS = "the worker's ~/.bashrc\n"
SETTINGS = Settings.model_fields["developer_commands"].description or ""


def workspace(tmp_path: Path) -> tuple[Path, Path]:
    """A repository the agent works in, and a folder outside it holding a victim file."""
    ws, outside = tmp_path / "repo", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "victim").write_text(PRECIOUS)
    return ws, outside


def refused(call: Callable[[], object], type_: str = "developer_invalid") -> ApplicationError:
    """The error ``call`` fails with: an ApplicationError of ``type_``, never retried."""
    with pytest.raises(ApplicationError) as err:
        call()
    assert err.value.type == type_ and err.value.non_retryable, err.value
    return err.value


def _in_thread(call: Callable[[], object], unblock: Callable[[], None]) -> BaseException | None:
    """Run ``call`` as a worker thread would; what it raised. Fails when it is still
    running after 5 s (then ``unblock`` frees the thread, so the suite goes on)."""
    raised: list[BaseException | None] = [None]

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised[0] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():
        unblock()
        thread.join(5)
        pytest.fail("the activity blocked its worker thread")
    return raised[0]


# ------------------------------------------------------------- planted links (level 3)


def test_links_planted_at_the_temp_and_target_names_are_replaced_not_followed(tmp_path):
    ws, outside = workspace(tmp_path)
    top = ws / ".phasegate" / "orchestrations"
    folder = top / "o-1" / "dev-1"
    folder.mkdir(parents=True)
    pid = os.getpid()  # the worker's: the old temp names were .<name>.<pid>.tmp
    planted = {
        folder / "README.md": outside / "victim",
        folder / "tasks.md": outside / "victim",
        folder / f".README.md.{pid}.tmp": outside / "victim",
        folder / f".tasks.md.{pid}.tmp": outside / "victim",
        top / f"..gitignore.{pid}.tmp": outside / "victim",
        top / ".gitignore": outside / "cron-entry",  # dangling: "does not exist yet"
    }
    for link, target in planted.items():
        link.symlink_to(target)
    spec = DeveloperActivities().write_dev_spec(
        DevSpecRequest(working_dir=str(ws), orchestration_id="o-1", issue=ISSUE, plan=PLAN)
    )
    assert (outside / "victim").read_text() == PRECIOUS
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]  # no cron entry either
    for name in ("README.md", "tasks.md"):  # the links were replaced by the files
        assert not (folder / name).is_symlink() and (folder / name).is_file()
    assert Path(spec.spec_path) == folder / "tasks.md" and spec.tasks == 1
    assert "Empty config crashes the loader" in (folder / "README.md").read_text()


def test_store_output_replaces_a_link_at_its_file_and_ignores_squatted_temp_names(tmp_path):
    ws, outside = workspace(tmp_path)
    outputs = ws / ".phasegate" / "orchestrations" / "o-1" / "outputs"
    outputs.mkdir(parents=True)
    (outputs / "architect_0.json").symlink_to(outside / "victim")
    (outputs / f".architect_0.json.{os.getpid()}.tmp").write_text("squatted")  # O_EXCL'd
    req = StoreOutputRequest(
        working_dir=str(ws), orchestration_id="o-1", key="architect_0", output={"a": 1}
    )
    path = Path(OrchestrationActivities().store_output(req))
    assert path == outputs / "architect_0.json" and not path.is_symlink()
    assert json.loads(path.read_text()) == {"a": 1}
    assert (outside / "victim").read_text() == PRECIOUS


FOLDERS = [".phasegate", ".phasegate/orchestrations", ".phasegate/orchestrations/o-1",
           ".phasegate/orchestrations/o-1/dev-1"]  # fmt: skip


@pytest.mark.parametrize("leads", ["outside", "inside"])
@pytest.mark.parametrize("component", FOLDERS)
def test_a_symlinked_folder_on_the_way_is_refused(tmp_path, component, leads):
    ws, outside = workspace(tmp_path)
    target = outside if leads == "outside" else ws / "src"  # a folder of the repository
    target.mkdir(exist_ok=True)
    link = ws / component
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    before = sorted(p.name for p in target.iterdir())
    req = DevSpecRequest(working_dir=str(ws), orchestration_id="o-1", issue=ISSUE)
    err = refused(lambda: DeveloperActivities().write_dev_spec(req))
    assert f"{link} is a symbolic link" in err.message and "remove the link" in err.message
    if leads == "outside":
        assert "outside the working directory" in err.message
    assert sorted(p.name for p in target.iterdir()) == before  # nothing written through it


def test_a_fifo_or_file_in_place_of_a_folder_is_refused_without_blocking(tmp_path):
    ws, _ = workspace(tmp_path)
    orchestration = ws / ".phasegate" / "orchestrations" / "o-1"
    orchestration.mkdir(parents=True)
    os.mkfifo(orchestration / "dev-1")
    (orchestration / "outputs").write_text("not a folder")
    spec = DevSpecRequest(working_dir=str(ws), orchestration_id="o-1", issue=ISSUE)
    store = StoreOutputRequest(working_dir=str(ws), orchestration_id="o-1", key="k", output={})

    def unblock() -> None:
        os.close(os.open(orchestration / "dev-1", os.O_WRONLY | os.O_NONBLOCK))

    for call in (
        lambda: DeveloperActivities().write_dev_spec(spec),
        lambda: OrchestrationActivities().store_output(store),
    ):
        err = _in_thread(call, unblock)
        assert isinstance(err, ApplicationError) and err.non_retryable, err
        assert "is not a folder" in err.message and "phasegate creates the folder" in err.message


def test_store_output_refuses_a_symlinked_outputs_folder(tmp_path):
    ws, outside = workspace(tmp_path)
    (ws / ".phasegate" / "orchestrations" / "o-1").mkdir(parents=True)
    (ws / ".phasegate" / "orchestrations" / "o-1" / "outputs").symlink_to(outside)
    req = StoreOutputRequest(working_dir=str(ws), orchestration_id="o-1", key="k", output={})
    err = refused(lambda: OrchestrationActivities().store_output(req), "workspace_refused")
    assert "is a symbolic link" in err.message
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


# ---------------------------------------------------- outputs kept by reference (level 3)


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("fifo", "is a named pipe (FIFO), not a regular file"),
        ("symlink", "is a symbolic link, not a regular file"),
        ("huge", "(limit 4 MiB)"),
        ("folder", "is a directory, not a regular file"),
    ],
)
@pytest.mark.parametrize("which", ["plan", "review"])
def test_an_output_file_swapped_for_a_fifo_link_or_huge_file_is_refused_at_once(
    tmp_path, kind, reason, which
):
    ws, _ = workspace(tmp_path)
    output = PLAN.model_dump(mode="json")
    if which == "review":
        output = {"approved": False, "comments": ["add a test"], "severity": "major"}
    store = StoreOutputRequest(
        working_dir=str(ws), orchestration_id="o-1", key=f"{which}_0", output=output
    )
    ref = Path(OrchestrationActivities().store_output(store))
    copy = ws / "same-bytes.json"  # the digest still matches: only the kind of file differs
    shutil.copy(ref, copy)
    ref.unlink()
    if kind == "fifo":
        os.mkfifo(ref)
    elif kind == "symlink":
        ref.symlink_to(copy)
    elif kind == "huge":
        ref.write_bytes(b" " * (5 << 20))
    else:
        ref.mkdir()
    fields = {f"{which}_ref": str(ref), f"{which}_sha256": digest(output)}
    req = DevSpecRequest(working_dir=str(ws), orchestration_id="o-1", issue=ISSUE, **fields)

    def unblock() -> None:  # a writer end releases a thread stuck in open(FIFO)
        os.close(os.open(ref, os.O_WRONLY | os.O_NONBLOCK))

    err = _in_thread(lambda: DeveloperActivities().write_dev_spec(req), unblock)
    assert isinstance(err, ApplicationError), err
    assert err.type == "developer_invalid" and err.non_retryable
    assert reason in err.message and str(ref) in err.message and "replan" in err.message


# ------------------------------------------------------- the coding agent (levels 2, 3)


@workflow.defn(sandboxed=False)
class Borrow:
    """The agent's own workflow, on its own queue: it schedules one of phasegate's
    activities, by name, on phasegate's queue, with an input of its choosing."""

    @workflow.run
    async def run(self, queue: str, activity: str, payload: dict[str, Any]) -> Any:
        return await workflow.execute_activity(
            activity,
            payload,
            task_queue=queue,
            start_to_close_timeout=timedelta(minutes=2),
            retry_policy=RetryPolicy(maximum_attempts=2, initial_interval=timedelta(seconds=0.1)),
        )


@contextlib.asynccontextmanager
async def borrowed_worker(
    client: Client, executor: concurrent.futures.Executor, developer: DeveloperActivities
) -> AsyncIterator[Callable[[str, dict[str, Any]], Any]]:
    """A worker serving phasegate's developer and store_output activities (configured
    like ``developer``), and the agent's own worker running ``Borrow``; yields
    ``borrow(activity, payload)``, which runs one attack and returns its result."""
    queue, own = f"pg-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    store = OrchestrationActivities(target_roots=developer.target_roots).store_output
    async with (
        Worker(
            client,
            task_queue=queue,
            activities=[*developer.activities, store],
            activity_executor=executor,
        ),
        Worker(client, task_queue=own, workflows=[Borrow]),
    ):

        async def borrow(activity: str, payload: dict[str, Any]) -> Any:
            return await client.execute_workflow(
                Borrow.run,
                args=[queue, activity, payload],
                id=f"borrow-{uuid.uuid4().hex}",
                task_queue=own,
            )

        yield borrow


async def refused_remotely(attack: Any, type_: str = "developer_invalid") -> ApplicationError:
    """The refusal a borrowed activity failed with, on its first attempt, for good."""
    with pytest.raises(WorkflowFailureError) as err:
        await attack
    cause = err.value.cause
    assert isinstance(cause, ActivityError), cause
    assert cause.retry_state == RetryState.NON_RETRYABLE_FAILURE, cause
    assert isinstance(cause.cause, ApplicationError) and cause.cause.type == type_, cause.cause
    return cause.cause


async def test_a_foreign_workflow_cannot_make_the_worker_run_a_program_of_its_choosing(
    env, executor, tmp_path
):
    ws, outside = workspace(tmp_path)
    marker = outside / "pwned"
    shell = ["sh", "-c", f"env > {marker}"]
    base = {"working_dir": str(ws), "session_id": "s-1", "task_queue": "phasegate"}
    developer = DeveloperActivities(Settings().coding_agents)
    async with borrowed_worker(env.client, executor, developer) as borrow:
        # As the issue sent it: an argv, and no agent. It never decodes, so nothing runs.
        with pytest.raises(WorkflowFailureError):
            await borrow("run_coding_agent", {**base, "command": shell})
        for name in ("sh", "../../bin/sh", command_ref(shell), command_ref(shell[:1])):
            err = await refused_remotely(borrow("run_coding_agent", {**base, "agent": name}))
            listed = "is not one this worker runs (it runs: claude, codex, scripted)"
            assert listed in err.message, err.message
    assert not marker.exists()
    with pytest.raises(Exception, match="agent"):
        CodingAgentRequest.model_validate({**base, "command": shell})


async def test_every_activity_rechecks_the_working_directory_against_the_target_roots(
    env, executor, tmp_path
):
    served, elsewhere = tmp_path / "served", tmp_path / "elsewhere"
    ws = served / "repo"
    ws.mkdir(parents=True)
    elsewhere.mkdir()
    developer = DeveloperActivities(Settings().coding_agents, target_roots=[str(served)])
    spec = {"orchestration_id": "o-1", "issue": ISSUE.model_dump(mode="json")}
    output = {"orchestration_id": "o-1", "key": "k", "output": {"a": 1}}
    agent = {"agent": "scripted", "session_id": "s", "task_queue": "phasegate"}
    async with borrowed_worker(env.client, executor, developer) as borrow:
        for wd in (str(elsewhere), "/", str(ws / ".." / ".." / "elsewhere")):
            for activity, payload, type_ in (
                ("write_dev_spec", spec, "developer_invalid"),
                ("store_output", output, "workspace_refused"),
                ("run_coding_agent", agent, "developer_invalid"),
            ):
                attack = borrow(activity, {**payload, "working_dir": wd})
                err = await refused_remotely(attack, type_)
                assert "working directory" in err.message, err.message
        assert not list(elsewhere.iterdir())  # nothing written where no session works
        done = await borrow("write_dev_spec", {**spec, "working_dir": str(ws)})
        assert done["spec_path"].startswith(str(ws))  # inside the roots: it works


SHADOW = "open({marker!r}, 'a').write({name!r} + '\\n')\n"  # each workspace file that runs


async def test_a_repository_cannot_shadow_the_scripted_coding_agent(env, executor, tmp_path):
    ws, outside = workspace(tmp_path)
    marker = outside / "shadow-ran"
    for name in (
        "__init__.py",
        "testing/__init__.py",
        "testing/coding_agent.py",
        "agents/__init__.py",
        "agents/scripted.py",
    ):
        (ws / "phasegate" / name).parent.mkdir(parents=True, exist_ok=True)
        (ws / "phasegate" / name).write_text(SHADOW.format(marker=str(marker), name=name))
    # The attack is real: a plain `python -m` in the repository runs the repository's code.
    plain = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "phasegate.agents.scripted",
        "--help",
        cwd=ws,
        env={"PATH": os.environ["PATH"]},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.wait_for(plain.wait(), timeout=60)
    assert "agents/scripted.py" in marker.read_text().split()
    marker.unlink()
    agents = {
        **Settings().coding_agents,  # scripted: {python} -m phasegate.agents.scripted
        "legacy": ["{python}", "-m", "phasegate.testing.coding_agent", "{prompt}"],
    }
    address = env.client.service_client.config.target_host
    developer = DeveloperActivities(agents, temporal_address=address)
    async with borrowed_worker(env.client, executor, developer) as borrow:
        for name in ("scripted", "legacy"):
            run = await borrow(
                "run_coding_agent",
                {
                    "agent": name,
                    "working_dir": str(ws),
                    "session_id": f"none-{name}",
                    "task_queue": "phasegate",
                    "timeout_minutes": 1,
                },
            )
            assert f"coding-agent: honest agent, session none-{name}" in run["output_tail"]
            assert run["exit_code"] == 2, run  # phasegate's agent ran: no such session
    assert not marker.exists(), f"workspace code ran as the worker: {marker.read_text()}"


SESSION = ("PHASEGATE_SESSION", "PHASEGATE_TASK_QUEUE", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE",
           "ANTHROPIC_API_KEY")  # fmt: skip
DUMP = (  # the agent: its whole environment, and whether Python runs isolated
    "import json, os, sys\n"
    "json.dump({**os.environ, '-I': sys.flags.isolated}, open(sys.argv[1], 'w'))\n"
)


async def test_a_coding_agent_sees_only_the_environment_it_is_allowed(
    env, executor, tmp_path, monkeypatch
):
    ws, outside = workspace(tmp_path)
    dumped = outside / "env.json"
    secrets = {
        "AWS_SECRET_ACCESS_KEY": "aws-secret-0123456789",
        "AWS_ACCESS_KEY_ID": "AKIA0123456789",
        "GOOGLE_APPLICATION_CREDENTIALS": str(outside / "gcp.json"),
        "AZURE_CLIENT_SECRET": "azure-secret-0123456789",
        "PHASEGATE_APPROVER_KEYS": str(outside / "approvers.json"),
        "PHASEGATE_SIGNING_KEY": str(outside / "keys" / "lead.key"),  # a fake signing key
        "PHASEGATE_ALLOW_UNSIGNED_APPROVALS": "1",
        "TEMPORAL_API_KEY": "temporal-api-key-0123456789",
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(outside / "client.key"),
        "OPENAI_API_KEY": "sk-openai-not-declared-0123",
        "PYTHONPATH": str(ws),
        "PYTHONSTARTUP": str(ws / "startup.py"),
    }
    for name, value in {**secrets, "ANTHROPIC_API_KEY": "sk-ant-declared-0123"}.items():
        monkeypatch.setenv(name, value)
    dump = {"command": [sys.executable, "-c", DUMP, str(dumped)], "env": ["ANTHROPIC_API_KEY"]}
    monkeypatch.setenv("PHASEGATE_DEVELOPER_COMMANDS", json.dumps({"dump": dump}))
    settings = Settings.from_env(os.environ, default_library=str(tmp_path / "lib"))
    address = env.client.service_client.config.target_host
    developer = DeveloperActivities.from_settings(settings, temporal_address=address)
    async with borrowed_worker(env.client, executor, developer) as borrow:
        run = await borrow(
            "run_coding_agent",
            {"agent": "dump", "working_dir": str(ws), "session_id": "s-9", "task_queue": "tq"},
        )
    assert run["exit_code"] == 0, run
    seen = json.loads(dumped.read_text())
    assert seen.pop("-I") == 1  # isolated: PYTHONPATH and the working directory ignored
    assert {k: seen.get(k) for k in SESSION} == {
        "PHASEGATE_SESSION": "s-9",
        "PHASEGATE_TASK_QUEUE": "tq",
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": "default",
        "ANTHROPIC_API_KEY": "sk-ant-declared-0123",  # declared by the agent's entry
    }
    assert seen["PATH"] == os.environ["PATH"]
    assert not set(secrets) & set(seen), set(secrets) & set(seen)
    leaked = [v for v in secrets.values() if len(v) > 1 and any(v in str(x) for x in seen.values())]
    assert not leaked, leaked
    base = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TMPDIR", "TZ", "SHELL"}
    assert {k for k in seen if not k.startswith("LC_")} <= base | set(SESSION), sorted(seen)


def test_an_agent_entry_cannot_declare_the_workers_own_settings():
    bad = {"dump": {"command": ["x"], "env": ["PHASEGATE_APPROVER_KEYS"]}}
    with pytest.raises(PhasegateError) as err:
        Settings.from_env({"PHASEGATE_DEVELOPER_COMMANDS": json.dumps(bad)}, default_library="lib")
    assert err.value.where == "PHASEGATE_DEVELOPER_COMMANDS"
    assert "'PHASEGATE_APPROVER_KEYS'" in err.value.message and "remove it" in err.value.message
    # An argv entry (the configuration written before) keeps working; claude keeps its key.
    old = {"claude": ["claude", "-p", "{prompt}"]}
    agents = Settings.from_env(
        {"PHASEGATE_DEVELOPER_COMMANDS": json.dumps(old)}, default_library="lib"
    ).coding_agents
    assert agents["claude"].env == ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
    assert '"env"' in SETTINGS and "isolated (-I)" in SETTINGS  # documented where it is set
