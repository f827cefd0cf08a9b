"""Controls (pause, resume, retry_phase, rollback, abandon) are authorised like approvals.

Each attack is made as a hostile agent holding a Temporal client would make it: the
``control`` update sent straight through ``WorkflowHandle.execute_update``, not through
phasegate's CLI or client. A refused control is refused by the update validator, so
it never reaches history (checked by counting accepted ``control`` updates).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli_argv
from fixture_evidence import GOOD_0
from temporalio.client import WorkflowHandle, WorkflowUpdateFailedError

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError, SessionError
from phasegate.domain.session.messages import ControlRequest, SessionOptions
from phasegate.temporal import phasegate_error
from phasegate.workflows.gated_session import GatedSession

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "library"


@pytest.fixture
def people(tmp_path: Path) -> Path:
    """The people's key directory: lead (operator) and alice (approver)."""
    directory = tmp_path / "people"
    keys.new_key("lead", directory=directory)
    keys.new_key("alice", directory=directory)
    return directory


@pytest.fixture
def agent_keys(tmp_path: Path) -> Path:
    """The agent's own key directory: a key named "lead" and one named "mallory"."""
    directory = tmp_path / "agent"
    keys.new_key("lead", directory=directory)
    keys.new_key("mallory", directory=directory)
    return directory


def _operators_file(tmp_path: Path, people: Path) -> str:
    path = tmp_path / "operators.json"
    path.write_text(json.dumps([keys.public_key("lead", directory=people).model_dump()]))
    return str(path)


async def _refused(handle: WorkflowHandle[Any, Any], req: ControlRequest) -> str:
    """Send ``req`` as a bare Temporal client would; return why the session refused it."""
    with pytest.raises(WorkflowUpdateFailedError) as err:
        await handle.execute_update(GatedSession.control, req)
    return str(phasegate_error(err.value))


def _signed(
    directory: Path, name: str, sid: str, action: str, *, as_: str | None = None, **fields: Any
) -> ControlRequest:
    """A control signed with ``directory``'s key ``name``, sent as actor ``as_`` (default
    ``name``), with ``fields`` (reason, to_phase) as signed."""
    nonce, signature = keys.sign_control(
        name, session_id=sid, action=action, directory=directory, **fields
    )
    return ControlRequest(
        action=action,  # type: ignore[arg-type]
        actor=as_ or name,
        nonce=nonce,
        signature=signature,
        **fields,
    )


async def _accepted_controls(handle: WorkflowHandle[Any, Any]) -> int:
    """How many ``control`` updates the session's history holds."""
    history = await handle.fetch_history()
    return sum(
        1
        for event in history.events
        if event.HasField("workflow_execution_update_accepted_event_attributes")
        and event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
        == "control"
    )


async def test_signed_session_refuses_every_forged_control(
    env, settings_for, run_worker, tmp_path, people, agent_keys
):
    """Operator lead and approver alice (both named by the deployment) may control; nobody
    else, however the request is dressed up."""
    alice = keys.public_key("alice", directory=people)
    settings = settings_for(
        FIXTURES,
        operator_keys_file=_operators_file(tmp_path, people),
        approver_keys_file=alice.model_dump_json(),
    )
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        options = SessionOptions(approver_keys=[alice])
        sid = await pg.start("mini_v1", str(tmp_path), options=options)
        other = await pg.start("mini_v1", str(tmp_path), options=options)
        handle = env.client.get_workflow_handle(sid)
        assert (await pg.submit(sid, 0, GOOD_0)).passed  # on phase 1: rollback to 0 exists

        # Unsigned, each action, "as lead": refused.
        for action, extra in (
            ("pause", {}),
            ("retry_phase", {}),
            ("rollback", {"to_phase": 0}),
            ("abandon", {"reason": "agent gives up"}),
        ):
            req = ControlRequest(action=action, actor="lead", **extra)  # type: ignore[arg-type]
            assert "control is not signed" in await _refused(handle, req)

        # lead's signed pause is accepted and audited as lead.
        await handle.execute_update(
            GatedSession.control, _signed(people, "lead", sid, "pause", reason="review")
        )
        assert (await pg.status(sid)).status == "paused"

        # The agent tries to resume the lead's pause.
        assert "not signed" in await _refused(handle, ControlRequest(action="resume", actor="lead"))
        forged = _signed(agent_keys, "lead", sid, "resume")  # its own key named "lead"
        assert "signature does not match 'lead'" in await _refused(handle, forged)
        as_lead = _signed(agent_keys, "mallory", sid, "resume", as_="lead")
        assert "signature does not match 'lead'" in await _refused(handle, as_lead)
        as_itself = _signed(agent_keys, "mallory", sid, "resume")
        assert "'mallory' holds no key" in await _refused(handle, as_itself)
        deadline = ControlRequest(action="resume", actor="phasegate:deadline")
        assert "reserved" in await _refused(handle, deadline)

        # A real signature, on a different message than the one it was made for.
        pause_sig = _signed(people, "lead", sid, "pause", reason="r")
        swapped_action = pause_sig.model_copy(update={"action": "resume"})
        assert "does not match" in await _refused(handle, swapped_action)
        swapped_session = _signed(people, "lead", other, "resume")
        assert "does not match" in await _refused(handle, swapped_session)
        resume = _signed(people, "lead", sid, "resume", reason="looked fine")
        swapped_reason = resume.model_copy(update={"reason": "agent says fine"})
        assert "does not match" in await _refused(handle, swapped_reason)
        assert (await pg.status(sid)).status == "paused"

        # lead's own resume passes; replayed after the next pause, it is refused.
        await handle.execute_update(GatedSession.control, resume)
        await handle.execute_update(GatedSession.control, _signed(people, "lead", sid, "pause"))
        assert "nonce already used" in await _refused(handle, resume)
        # The session's approver may control it too.
        await handle.execute_update(GatedSession.control, _signed(people, "alice", sid, "resume"))

        # Rollback target and abandon reason are bound by the signature.
        rollback = _signed(people, "lead", sid, "rollback", to_phase=0, reason="redo")
        moved = rollback.model_copy(update={"to_phase": 1})
        assert "does not match" in await _refused(handle, moved)
        await handle.execute_update(GatedSession.control, rollback)
        assert (await pg.status(sid)).current_phase == 0
        result = await pg.control(
            sid,
            ControlRequest(action="abandon", reason="spec withdrawn"),
            key="lead",
            key_dir=people,
        )
        assert result.status == "abandoned"

        view = await pg.status(sid)
        assert [(a.action, a.actor) for a in view.audit] == [
            ("pause", "lead"),
            ("resume", "lead"),
            ("pause", "lead"),
            ("resume", "alice"),
            ("rollback", "lead"),
            ("abandon", "lead"),
        ]
        assert view.audit[-1].detail == "spec withdrawn"
        assert await _accepted_controls(handle) == 6  # nothing refused reached history


async def test_client_control_signs_only_as_its_key(
    env, settings_for, run_worker, tmp_path, people
):
    alice = keys.public_key("alice", directory=people)
    settings = settings_for(FIXTURES, approver_keys_file=alice.model_dump_json())
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        await _client_signs_only_as_its_key(pg, tmp_path, people)


async def test_keys_the_starter_names_never_grant_controls(session_env, tmp_path, people):
    # Unsigned controls allowed, no deployment keys: a starter-named key adds the signature
    # requirement to approvals but is no control key, so it cannot lock others out either.
    pg, _ = session_env
    mine = keys.public_key("alice", directory=people)
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[mine]))
    await pg.control(sid, ControlRequest(action="pause", actor="ops"))
    assert (await pg.status(sid)).audit[-1].actor == "ops"


async def _client_signs_only_as_its_key(pg: PhasegateClient, tmp_path: Path, people: Path):
    sid = await pg.start("mini_v1", str(tmp_path))
    with pytest.raises(SessionError, match="not signed"):
        await pg.control(sid, ControlRequest(action="pause", actor="alice"))
    with pytest.raises(PhasegateError, match="not the signing key"):
        await pg.control(
            sid, ControlRequest(action="pause", actor="lead"), key="alice", key_dir=people
        )
    await pg.control(sid, ControlRequest(action="pause"), key="alice", key_dir=people)
    assert (await pg.status(sid)).audit[-1].actor == "alice"


@pytest.mark.parametrize(
    "policy",
    [
        {"allow_unsigned_controls": False},
        {"allow_unsigned_approvals": False},  # unset: controls follow approvals
    ],
)
async def test_deployment_refusing_unsigned_controls_refuses_all_without_keys(
    env, settings_for, run_worker, tmp_path, policy
):
    settings = settings_for(FIXTURES, **policy)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("fallback_v1", str(tmp_path))  # no approval gate
        handle = env.client.get_workflow_handle(sid)
        for action in ("pause", "retry_phase", "abandon"):
            why = await _refused(handle, ControlRequest(action=action, actor="lead", reason="r"))
            assert "only signed controls" in why
            assert "PHASEGATE_OPERATOR_KEYS" in why and "phasegate keys new NAME" in why
        assert (await pg.status(sid)).status == "active"
        assert await _accepted_controls(handle) == 0


@pytest.mark.parametrize(
    "policy",
    [
        {},  # conftest: unsigned approvals allowed, and controls follow
        {"allow_unsigned_approvals": False, "allow_unsigned_controls": True},
    ],
)
async def test_deployment_allowing_unsigned_controls_accepts_names(
    env, settings_for, run_worker, tmp_path, policy
):
    settings = settings_for(FIXTURES, **policy)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("fallback_v1", str(tmp_path))  # no approval gate
        handle = env.client.get_workflow_handle(sid)
        assert "must name its actor" in await _refused(
            handle, ControlRequest(action="pause", actor="  ")
        )
        assert "reserved" in await _refused(
            handle, ControlRequest(action="pause", actor="phasegate:deadline")
        )
        await handle.execute_update(
            GatedSession.control, ControlRequest(action="pause", actor="ops")
        )
        await pg.control(sid, ControlRequest(action="resume", actor="lead"))
        view = await pg.status(sid)
        assert [(a.action, a.actor) for a in view.audit] == [("pause", "ops"), ("resume", "lead")]


async def test_cli_control_signs_with_the_local_key(
    env, settings_for, run_worker, tmp_path, people
):
    """`phasegate control ... --as lead` signs when lead's key is at hand; an agent without
    it gets the refusal and what the person should run."""
    settings = settings_for(FIXTURES, operator_keys_file=_operators_file(tmp_path, people))
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        sid = await pg.start("fallback_v1", str(tmp_path))  # no approval gate
        base = {
            **os.environ,
            "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
            "PHASEGATE_TASK_QUEUE": settings.task_queue,
            "PHASEGATE_HOME": settings.home,
        }

        def cli(config: Path) -> subprocess.CompletedProcess[str]:
            return subprocess.run(  # in a thread: the worker shares this event loop
                [*cli_argv(), "control", sid, "pause"] + ["--as", "lead", "--reason", "lunch"],
                cwd=REPO,
                env={**base, "PHASEGATE_CONFIG_DIR": str(config)},
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                stdin=subprocess.DEVNULL,
            )

        agent = await asyncio.to_thread(cli, tmp_path / "agent-config")
        assert agent.returncode == 1 and "control is not signed" in agent.stderr
        assert f"phasegate control {sid} pause --as NAME" in agent.stderr
        assert (await pg.status(sid)).status == "active"
        person = await asyncio.to_thread(cli, people)
        assert person.returncode == 0, person.stderr
        assert "pause by lead (signed)" in person.stdout
        view = await pg.status(sid)
        assert view.status == "paused" and view.audit[-1].actor == "lead"
