"""Reserved actor names (issue 14): nobody may approve, control or ask for a replan as
``phasegate`` (the actor of the entries phasegate writes itself), ``phasegate:...``
(``phasegate:deadline``) or an agent output (``reviewer_0``), on any worker, whether
it accepts names (unsigned approvals) or only keys."""

from __future__ import annotations

import asyncio
import base64
import uuid
from datetime import UTC, datetime

import pytest
from orchestration_helpers import HONEST_AGENT
from pydantic import ValidationError
from temporalio.client import WorkflowUpdateFailedError

from phasegate.client import keys
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.errors import SessionError
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import (
    OrchestrationDecision,
    OrchestrationSetup,
    ReplanRequest,
)
from phasegate.domain.orchestration.state import OrchestrationState
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.signing import ApproverKey
from phasegate.domain.trust import SYSTEM_ACTOR, reserved_actor, session_keys

NOW = datetime(2026, 11, 26, tzinfo=UTC)
KEY = base64.b64encode(bytes(range(32))).decode()
RESERVED = [
    "phasegate",
    "PhaseGate",
    " phasegate ",
    "ｐｈａｓｅｇａｔｅ",  # fullwidth: NFKC reads it as phasegate
    "phasegate:deadline",
    "phasegate:anything",
    "reviewer_0",
    "Analyst_12",
    "developer_3",
]
PEOPLE = ["lead", "alice", "phasegate-fan", "reviewer", "the phasegate team", "dev_ops"]


@pytest.mark.parametrize("name", RESERVED)
def test_reserved_names_are_refused_everywhere_a_name_acts(name: str) -> None:
    problem = reserved_actor(name)
    assert problem and "reserved for phasegate's own entries" in problem
    assert "name yourself" in problem
    for build in (
        lambda: OrchestrationDecision(gate=1, approver=name, decision="approve"),
        lambda: ReplanRequest(reason="skip the review", requested_by=name),
    ):
        with pytest.raises(ValidationError, match="reserved for phasegate's own entries"):
            build()


@pytest.mark.parametrize("unsigned_allowed", [True, False])
def test_no_session_binds_a_key_named_as_phasegate(unsigned_allowed: bool) -> None:
    """A starter naming its own key ``phasegate`` (where names are accepted) would sign
    approvals the audit shows as phasegate's; a deployment key is refused the same way."""
    key = ApproverKey(name="phasegate", public_key=KEY)
    lead = ApproverKey(name="lead", public_key=KEY)
    for bound, named in (([], [key]), ([key], None), ([lead, key], [key])):
        with pytest.raises(SessionError) as err:
            session_keys(bound, named, unsigned_allowed=unsigned_allowed)
        assert "reserved for phasegate's own entries" in str(err.value)
        assert err.value.where == "approver_keys"
    assert session_keys([lead], None, unsigned_allowed=unsigned_allowed) == [lead]


@pytest.mark.parametrize("name", PEOPLE)
def test_people_keep_their_names(name: str) -> None:
    assert reserved_actor(name) is None
    assert ReplanRequest(reason="r", requested_by=name).requested_by == name
    key = ApproverKey(name=name, public_key=KEY)
    assert session_keys([], [key], unsigned_allowed=True) == [key]


def test_phasegate_writes_its_own_entries_under_the_reserved_name() -> None:
    assert reserved_actor(SYSTEM_ACTOR)


@pytest.mark.parametrize("unsigned", [True, False])
def test_the_domain_refuses_them_whatever_the_worker_accepts(unsigned: bool) -> None:
    """Even a message built past its model (``model_construct``) is refused by the checks
    every decision and replan goes through, signed or not."""
    state = OrchestrationState(
        orchestration_id="orch-1",
        run_id="run-1",
        issue=Issue(id="7", title="Fix a typo"),
        profile=Profile(working_dir="/tmp"),
        setup=OrchestrationSetup(
            models={"planner": "rules"},
            working_dir="/tmp",
            unsigned_approvals=unsigned,
            approver_keys=[] if unsigned else [ApproverKey(name="lead", public_key=KEY)],
        ),
        carried=None,
        now=NOW,
    )
    for name in ("phasegate", "phasegate:deadline", "reviewer_0"):
        problem = state.check_replan(actor=name, reason="r", nonce=None, signature=None)
        assert problem and "reserved" in problem.message
    if unsigned:
        assert state.check_replan(actor="lead", reason="r", nonce=None, signature=None) is None


async def test_a_replan_claiming_to_be_phasegate_is_refused_on_a_worker_that_accepts_names(
    env, settings_for, run_worker, tmp_path
) -> None:
    """Level 2: the agent's own client sends the update raw (no client-side model)."""
    settings = settings_for()  # allow_unsigned_approvals: names are accepted here
    assert settings.allow_unsigned_approvals
    work = tmp_path / "repo"
    work.mkdir()
    profile = Profile(
        working_dir=str(work),
        models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        approval_required=["developer"],  # waits for a person: the run stays open
        developer=DeveloperProfile(mode="command", command=HONEST_AGENT, timeout_minutes=2),
    )
    oc = OrchestrationClient(env.client, settings.task_queue)
    oid = f"orch-actor-{uuid.uuid4().hex[:8]}"
    async with run_worker(settings):
        await oc.start(
            Issue(id="9", title="Fix a typo", labels=["docs"]), profile, orchestration_id=oid
        )
        for _ in range(300):
            view = await oc.state(oid)
            if view.awaiting is not None:
                break
            await asyncio.sleep(0.1)
        handle = env.client.get_workflow_handle(oid)
        for name in ("phasegate", "phasegate:deadline", "reviewer_0"):
            with pytest.raises(WorkflowUpdateFailedError) as err:
                await handle.execute_update(
                    "request_replan", {"reason": "the reviewer wants a redo", "requested_by": name}
                )
            assert "reserved for phasegate's own entries" in str(err.value.cause)
        with pytest.raises(ValidationError, match="reserved"):  # the client path says why
            await oc.request_replan(oid, "redo", as_key=None, requested_by="phasegate")
        after = await oc.state(oid)
        history = await oc.history(oid)
        # the same update by a person's name is accepted on this worker
        accepted = await handle.execute_update(
            "request_replan", {"reason": "a person asks", "requested_by": "lead"}
        )
        await handle.terminate("test over")
    assert after.pending_replan is None
    assert not any(h.kind == "replan_requested" for h in history)
    assert accepted["pending_replan"] == "lead asked: a person asks"


async def test_a_session_started_with_a_key_named_phasegate_is_refused(session_env, tmp_path):
    """Level 2, signed path: on a worker that accepts names, the agent names its own key
    ``phasegate`` when it starts the session, to sign approvals as phasegate."""
    pg, settings = session_env
    assert settings.allow_unsigned_approvals
    own = keys.new_key("phasegate", directory=tmp_path / "agent-keys")
    with pytest.raises(SessionError) as err:
        await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[own]))
    assert "reserved for phasegate's own entries" in str(err.value)
    assert "approver_keys" in str(err.value)
