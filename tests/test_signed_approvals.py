"""Signed approvals on a real session: only a decision signed with an approver's private
key (for this session, this phase, this decision, a fresh nonce) gets past the gate."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli_argv
from fixture_evidence import GOOD_0

from phasegate.client import keys
from phasegate.domain.errors import ApprovalRefused, SessionError
from phasegate.domain.session.messages import SessionOptions

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def keydir(tmp_path: Path) -> Path:
    return tmp_path / "config"


async def _sign(pg, sid: str, name: str, directory, decision: str, comment: str = ""):
    """``(nonce, signature)`` of ``name``'s decision on phase 1, binding what ``status``
    shows as awaiting approval (as `phasegate approve --as NAME` does)."""
    return keys.sign_decision(
        name,
        session_id=sid,
        phase=1,
        decision=decision,
        comment=comment,
        directory=directory,
        binding=(await pg.status(sid)).approval_binding,
    )


async def _awaiting(pg, sid: str) -> None:
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval


async def test_only_valid_signatures_pass(session_env, tmp_path, keydir):
    pg, _ = session_env
    alice = keys.new_key("alice", directory=keydir)
    keys.new_key("mallory", directory=keydir)
    options = SessionOptions(approver_keys=[alice])
    sid = await pg.start("mini_v1", str(tmp_path), options=options)
    other = await pg.start("mini_v1", str(tmp_path), options=options)
    await _awaiting(pg, sid)
    binding = (await pg.status(sid)).approval_binding
    assert binding and binding["evidence_sha256"] and binding["first_run_id"]

    def signed(
        name: str,
        session: str = sid,
        phase: int = 1,
        decision: str = "approve",
        comment="",
        bind: dict | None = binding,
    ):
        nonce, sig = keys.sign_decision(
            name,
            session_id=session,
            phase=phase,
            decision=decision,
            comment=comment,
            directory=keydir,
            binding=bind,
        )
        return {"nonce": nonce, "signature": sig}

    async def refused(reason: str, **kw) -> None:
        kw.setdefault("approver", "alice")
        kw.setdefault("decision", "approve")
        with pytest.raises(ApprovalRefused) as err:
            await pg.decide(sid, phase=1, **kw)
        assert reason in str(err.value), str(err.value)

    await refused("not signed")  # unsigned
    forged = base64.b64encode(os.urandom(64)).decode()
    await refused("does not match", nonce="n" * 24, signature=forged)  # forged signature
    await refused("does not match", **signed("mallory"))  # mallory's key, claiming alice
    await refused("may not approve", approver="mallory", **signed("mallory"))  # not alice
    await refused("does not match", **signed("alice", session=other))  # another session
    await refused("does not match", **signed("alice", phase=0))  # another phase
    await refused("does not match", decision="reject", **signed("alice"))  # another decision
    await refused("does not match", comment="swapped", **signed("alice", comment="orig"))
    await refused("does not match", **signed("alice", bind=None))  # version 1: no evidence
    other_evidence = {**binding, "evidence_sha256": "0" * 64}
    await refused("does not match", **signed("alice", bind=other_evidence))

    good = signed("alice", comment="ship it")
    view = await pg.decide(
        sid, approver="alice", decision="approve", phase=1, comment="ship it", **good
    )
    assert view.current_phase == 2 and view.approvals[-1].approver == "alice"

    # The same signed message again (a replay) is refused on a later approval too.
    status = await pg.status(sid)
    assert status.status == "active"
    with pytest.raises(ApprovalRefused):
        await pg.decide(sid, approver="alice", decision="approve", phase=2, **good)


async def test_decide_as_key_signs_what_awaits_approval(session_env, tmp_path, keydir):
    """``decide(as_key=NAME)`` reads the binding, signs with NAME's key and sends the
    decision as NAME: the call shape of ``OrchestrationClient.decide``."""
    pg, _ = session_env
    alice = keys.new_key("alice", directory=keydir)
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[alice]))
    await _awaiting(pg, sid)
    with pytest.raises(ApprovalRefused):  # the same decision unsigned
        await pg.decide(sid, approver="alice", decision="approve", comment="ok")
    view = await pg.decide(sid, decision="approve", comment="ok", as_key="alice", key_dir=keydir)
    assert view.current_phase == 2
    assert (view.approvals[-1].approver, view.approvals[-1].comment) == ("alice", "ok")


async def test_unknown_key_of_an_allowed_name(session_env, tmp_path, keydir):
    pg, _ = session_env
    bob = keys.new_key("bob", directory=keydir)
    keys.new_key("alice", directory=keydir)  # allowed by the gate, but not a key of the session
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[bob]))
    await _awaiting(pg, sid)
    nonce, sig = await _sign(pg, sid, "alice", keydir, "approve")
    with pytest.raises(ApprovalRefused) as err:
        await pg.decide(
            sid, approver="alice", decision="approve", phase=1, nonce=nonce, signature=sig
        )
    assert "unknown approver" in str(err.value)


async def test_replayed_nonce_refused_across_continue_as_new(session_env, tmp_path, keydir):
    pg, _ = session_env
    alice = keys.new_key("alice", directory=keydir)
    sid = await pg.start(
        "mini_v1",
        str(tmp_path),
        options=SessionOptions(approver_keys=[alice], continue_as_new_after_events=10),
    )
    await _awaiting(pg, sid)
    nonce, sig = await _sign(pg, sid, "alice", keydir, "reject", comment="redo")
    await pg.decide(
        sid,
        approver="alice",
        decision="reject",
        phase=1,
        comment="redo",
        nonce=nonce,
        signature=sig,
    )
    run_with_nonce = (await pg.handle(sid).describe()).run_id  # the nonce is recorded here
    for i in range(3):  # grow history: continue-as-new happens
        await pg.submit(sid, 1, {"plan": ""}, submission_id=f"bad-{i}")
    # The same evidence again, so the signature itself still matches: only the nonce,
    # remembered across continue-as-new, refuses the replay.
    assert (await pg.submit(sid, 1, {"plan": "the plan"})).awaiting_approval
    assert (await pg.handle(sid).describe()).run_id != run_with_nonce
    with pytest.raises(ApprovalRefused) as err:  # the old signed reject, replayed
        await pg.decide(
            sid,
            approver="alice",
            decision="reject",
            phase=1,
            comment="redo",
            nonce=nonce,
            signature=sig,
        )
    assert "nonce already used" in str(err.value)


async def test_cli_approve_signs_with_the_local_key(env, session_env, tmp_path, keydir):
    pg, settings = session_env
    alice = keys.new_key("alice", directory=keydir)
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[alice]))
    await _awaiting(pg, sid)
    base = {
        **os.environ,
        "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
        "PHASEGATE_TASK_QUEUE": settings.task_queue,
        "PHASEGATE_HOME": settings.home,
    }

    def approve(config: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(  # run in a thread: the worker shares this event loop
            [
                *cli_argv(),
                "approve",
                sid,
                "--as",
                "alice",
                "--comment",
                "ok",
            ],
            cwd=REPO,
            env={**base, "PHASEGATE_CONFIG_DIR": str(config)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )

    # An agent without alice's private key: the CLI sends an unsigned decision, refused.
    agent = await asyncio.to_thread(approve, tmp_path / "agent-config")
    assert agent.returncode == 1 and "not signed" in agent.stderr
    assert (await pg.status(sid)).status == "awaiting_approval"
    # alice, holding her key: signed and accepted.
    human = await asyncio.to_thread(approve, keydir)
    assert human.returncode == 0, human.stderr
    assert (await pg.status(sid)).current_phase == 2


async def test_deployment_keys_cannot_be_replaced_by_the_starter(
    env, settings_for, run_worker, tmp_path, keydir
):
    """An agent that starts its own session and names its own key still cannot approve."""
    import json as _json

    from phasegate.client.api import PhasegateClient

    alice = keys.new_key("alice", directory=keydir)
    agent_dir = tmp_path / "agent"
    agent_key = keys.new_key("alice", directory=agent_dir)  # same name, the agent's own key pair
    keys_file = tmp_path / "approvers.json"
    keys_file.write_text(_json.dumps([alice.model_dump()]))
    fixtures = REPO / "tests" / "fixtures" / "library"
    settings = settings_for(fixtures, approver_keys_file=str(keys_file))
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        # The agent names its own key under the approver's name: the start is refused.
        with pytest.raises(SessionError, match="not one this deployment or workflow names"):
            await pg.start(
                "mini_v1",
                str(tmp_path),
                options=SessionOptions(approver_keys=[agent_key], approvers=["alice"]),
            )
        # Naming the deployment's own key only chooses among them; signing needs alice's key.
        sid = await pg.start(
            "mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[alice])
        )
        await _awaiting(pg, sid)
        nonce, sig = await _sign(pg, sid, "alice", agent_dir, "approve")
        with pytest.raises(ApprovalRefused) as err:
            await pg.decide(
                sid, approver="alice", decision="approve", phase=1, nonce=nonce, signature=sig
            )
        assert "does not match" in str(err.value)
        nonce, sig = await _sign(pg, sid, "alice", keydir, "approve")
        view = await pg.decide(
            sid, approver="alice", decision="approve", phase=1, nonce=nonce, signature=sig
        )
        assert view.current_phase == 2


async def test_default_deployment_refuses_name_only_approvals(
    env, settings_for, run_worker, tmp_path, keydir
):
    """Out of the box an agent cannot approve by claiming a name, through the CLI or the SDK."""
    from phasegate.client.api import PhasegateClient

    fixtures = REPO / "tests" / "fixtures" / "library"
    settings = settings_for(fixtures, allow_unsigned_approvals=False)
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        # Nobody could ever approve mini_v1's phase 1 here: refused before it starts
        # (issue 9, item 2), with the fix, instead of failing at approval time.
        with pytest.raises(SessionError) as err:
            await pg.start("mini_v1", str(tmp_path))
        assert "nobody could approve" in str(err.value)
        assert err.value.where and "phase 1" in err.value.where
        assert "PHASEGATE_APPROVER_KEYS" in (err.value.hint or "")
        # A key named at start would let whoever started the session approve it: refused.
        alice = keys.new_key("alice", directory=keydir)
        with pytest.raises(SessionError, match="names none"):
            await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approver_keys=[alice]))
    # Keys the deployment names are how such a deployment runs approval gates.
    settings = settings_for(
        fixtures,
        allow_unsigned_approvals=False,
        approver_keys_file=alice.model_dump_json(),  # one exported object, as JSON text
    )
    async with run_worker(settings):
        pg = PhasegateClient(env.client, settings.task_queue)
        signed_sid = await pg.start("mini_v1", str(tmp_path))
        await _awaiting(pg, signed_sid)
        nonce, sig = await _sign(pg, signed_sid, "alice", keydir, "approve")
        view = await pg.decide(
            signed_sid, approver="alice", decision="approve", phase=1, nonce=nonce, signature=sig
        )
        assert view.current_phase == 2


async def test_approvers_naming_nobody_the_gate_allows_are_refused_at_start(session_env, tmp_path):
    pg, _ = session_env
    with pytest.raises(SessionError) as err:
        await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approvers=["mallory"]))
    assert "names nobody this phase's gate allows (alice)" in str(err.value)
    sid = await pg.start("mini_v1", str(tmp_path), options=SessionOptions(approvers=["alice"]))
    assert (await pg.status(sid)).status == "active"


async def test_a_captured_approval_cannot_approve_other_evidence(session_env, tmp_path, keydir):
    # Review finding (level 2): the agent reads alice's signed approval from history,
    # terminates the session, starts it again under the same id with other evidence and
    # replays the decision. Version 2 binds the evidence and the first run: refused.
    pg, _ = session_env
    alice = keys.new_key("alice", directory=keydir)
    options = SessionOptions(approver_keys=[alice])
    sid = await pg.start("mini_v1", str(tmp_path), options=options)
    await _awaiting(pg, sid)
    binding = (await pg.status(sid)).approval_binding
    nonce, sig = keys.sign_decision(
        "alice", session_id=sid, phase=1, decision="approve", directory=keydir, binding=binding
    )
    await pg.handle(sid).terminate("the agent restarts the session")
    await pg.start("mini_v1", str(tmp_path), options=options, session_id=sid)
    assert (await pg.submit(sid, 0, GOOD_0)).passed
    assert (await pg.submit(sid, 1, {"plan": "rm -rf, never reviewed"})).awaiting_approval
    with pytest.raises(ApprovalRefused, match="does not match"):
        await pg.decide(
            sid, approver="alice", decision="approve", phase=1, nonce=nonce, signature=sig
        )
    assert (await pg.status(sid)).status == "awaiting_approval"
