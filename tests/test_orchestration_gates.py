"""Orchestration gates on the dev server, sent the way a hostile agent would (raw SDK
calls): signed approvals (forged and unsigned refused), escalation, the review loop
cap, max_replans exhaustion, a phantom developer refused, forged carried state."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
from orchestration_helpers import (
    HONEST_AGENT,
    PHANTOM_AGENT,
    approving_children,
    models,
    scripted,
    start,
)
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError

from phasegate.activities.orchestration import OrchestrationActivities, SetupRequest
from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.orchestration.messages import (
    OrchestrationCarry,
    OrchestrationDecision,
    ReplanRequest,
    StartOrchestration,
)
from phasegate.domain.settings import DEVELOPER_COMMANDS
from phasegate.testing import signed_approver
from phasegate.workflows import Orchestration

BUG = Issue(id="21", title="Export sometimes writes an empty file", labels=["bug"])
TYPO = Issue(id="22", title="Fix typo in the README", labels=["docs"])
ANALYSIS = {"findings": ["the writer closes early"], "scope": "simple", "confidence": 0.9}
PLAN = {"goal": "Fix the export", "plan_markdown": "## Phase 1: Fix\n- [ ] 1.1 Fix it\n",
        "confidence": 0.9}  # fmt: skip
REVIEW_OK = {"approved": True, "comments": [], "severity": "none", "confidence": 0.9}
REVIEW_NO = {"approved": False, "comments": ["tests missing"], "severity": "major",
             "confidence": 0.9}  # fmt: skip


def profile_for(tmp_path: Path, ids: dict[str, str], agent=HONEST_AGENT, **over) -> Profile:
    work = tmp_path / "repo"
    work.mkdir(exist_ok=True)
    return Profile(
        working_dir=str(work),
        models=ids,
        developer=DeveloperProfile(mode="command", command=agent, timeout_minutes=2),
        **over,
    )


async def wait_for(handle, predicate, timeout: float = 30.0):
    for _ in range(int(timeout / 0.1)):
        view = await handle.query(Orchestration.state)
        if predicate(view):
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met; last state: {view.status} {view.awaiting}")


def signed_settings(settings_for, tmp_path: Path):
    """A worker whose only approver is the key ``lead`` (unsigned decisions refused)."""
    lead = keys.new_key("lead", directory=tmp_path / "keys")
    return settings_for(approver_keys_file=lead.model_dump_json(), allow_unsigned_approvals=False)


def agents(**over):
    return {
        "analyst": scripted(ANALYSIS), "architect": scripted(PLAN),
        "reviewer": scripted(REVIEW_OK), **over,
    }  # fmt: skip


def sign(name: str, key_dir: Path, oid: str, gate: int, binding, decision="approve", comment=""):
    return keys.sign_decision(
        name, session_id=oid, phase=gate, decision=decision, comment=comment,
        directory=key_dir, binding=binding,
    )  # fmt: skip


async def test_signed_approval_gate_refuses_forged_and_unsigned_decisions(
    env, settings_for, run_worker, tmp_path
):
    settings = signed_settings(settings_for, tmp_path)
    with models(**agents()) as ids:
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(
                env.client, settings.task_queue, BUG,
                profile_for(tmp_path, ids, approval_required=["developer"]),
            )  # fmt: skip
            view = await wait_for(handle, lambda v: v.awaiting is not None)
            gate, binding = view.awaiting.gate, view.approval_binding
            assert view.awaiting.agent == "developer" and view.status == "awaiting"
            # An agent's unsigned decision, a forged signature, another gate's signature:
            attempts = [
                OrchestrationDecision(gate=gate, approver="lead", decision="approve"),
                OrchestrationDecision(
                    gate=gate,
                    approver="lead",
                    decision="approve",
                    nonce="n" * 20,
                    signature="A" * 86 + "==",
                ),
            ]
            nonce, sig = sign("lead", tmp_path / "keys", handle.id, gate + 1, binding)
            attempts.append(OrchestrationDecision(gate=gate, approver="lead", decision="approve",
                                                  nonce=nonce, signature=sig))  # fmt: skip
            for forged in attempts:
                with pytest.raises(WorkflowUpdateFailedError) as err:
                    await handle.execute_update(Orchestration.decide_approval, forged)
                assert "approval_refused" in repr(err.value.cause) or err.value.cause
            assert (await handle.query(Orchestration.state)).awaiting.gate == gate
            nonce, sig = sign("lead", tmp_path / "keys", handle.id, gate, binding, comment="go")
            good = OrchestrationDecision(gate=gate, approver="lead", decision="approve",
                                         comment="go", nonce=nonce, signature=sig)  # fmt: skip
            await handle.execute_update(Orchestration.decide_approval, good)
            with pytest.raises(WorkflowUpdateFailedError):  # a replayed decision is refused
                await handle.execute_update(Orchestration.decide_approval, good)
            approver = signed_approver("lead", key_dir=tmp_path / "keys")
            async with approving_children(pg, handle, approver):
                view = await handle.result()
    assert view.status == "completed", view.failure
    assert "lead approved gate 1" in view.last_decision


async def test_low_confidence_output_waits_for_a_person(env, settings_for, run_worker, tmp_path):
    unsure = {**ANALYSIS, "confidence": 0.3, "uncertainty_factors": ["no logs"]}
    settings = settings_for()
    with models(
        analyst=scripted(unsure), architect=scripted(PLAN), reviewer=scripted(REVIEW_OK)
    ) as ids:
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(env.client, settings.task_queue, BUG, profile_for(tmp_path, ids))
            view = await wait_for(handle, lambda v: v.awaiting is not None)
            assert view.awaiting.kind == "escalation" and view.awaiting.agent == "analyst"
            assert "0.30" in view.awaiting.reason
            await handle.execute_update(
                Orchestration.decide_approval,
                OrchestrationDecision(gate=view.awaiting.gate, approver="lead", decision="approve"),
            )
            async with approving_children(pg, handle):
                view = await handle.result()
    assert view.status == "completed", view.failure


async def test_review_loop_is_capped_and_fails_with_the_comments(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for()
    reviewer = scripted(REVIEW_NO)
    with models(reviewer=reviewer, analyst=scripted(ANALYSIS), architect=scripted(PLAN)) as ids:
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(
                env.client, settings.task_queue, TYPO,
                profile_for(tmp_path, ids, max_review_passes=2),
            )  # fmt: skip
            async with approving_children(pg, handle):
                with pytest.raises(WorkflowFailureError) as err:
                    await handle.result()
            view = await handle.query(Orchestration.state)
    assert "rejected the change 2 times" in str(err.value.cause)
    assert "tests missing" in str(err.value.cause)
    assert [o.agent for o in view.outputs].count("developer") == 2
    assert len(reviewer.calls) == 2


async def test_phantom_developer_is_refused_and_max_replans_ends_the_run(
    env, settings_for, run_worker, tmp_path
):
    # The deployment lists the phantom as one of its coding agents (a starter cannot).
    settings = settings_for(developer_commands={**DEVELOPER_COMMANDS, "phantom": PHANTOM_AGENT})
    with models(
        reviewer=scripted(REVIEW_OK), analyst=scripted(ANALYSIS), architect=scripted(PLAN)
    ) as ids:
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            handle = await start(
                env.client, settings.task_queue, TYPO,
                profile_for(tmp_path, ids, agent=PHANTOM_AGENT, max_replans=1),
            )  # fmt: skip
            async with approving_children(pg, handle):
                with pytest.raises(WorkflowFailureError) as err:
                    await handle.result()
            view = await handle.query(Orchestration.state)
            child = await pg.status(view.child_sessions[-1])
    reason = str(err.value.cause)
    assert "has not completed" in reason and "max_replans" in reason
    assert view.plan.replanned_count == 1 and len(view.child_sessions) == 2
    assert not any(o.agent == "reviewer" for o in view.outputs)  # never reviewed phantom work
    assert child.status != "completed"
    # The session's verify check found the files the agent claimed but never wrote.
    assert any("files_changed" in str(p) and "do not exist" in str(p) for p in child.last_problems)


async def test_forged_carried_state_is_refused(env, settings_for, run_worker, tmp_path):
    settings = settings_for()
    carry = OrchestrationCarry(first_run_id="x", replanned_count=0, replan_reason="forged")
    async with run_worker(settings):
        handle = await env.client.start_workflow(
            Orchestration.run,
            StartOrchestration(issue=TYPO, profile=profile_for(tmp_path, {}), carried=carry),
            id=f"orch-{uuid.uuid4().hex[:8]}",
            task_queue=settings.task_queue,
        )
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    assert "carried state" in str(err.value.cause)


async def test_bad_profile_fails_at_start_with_every_problem(
    env, settings_for, run_worker, tmp_path
):
    settings = settings_for(allow_unsigned_approvals=False)
    profile = Profile(
        working_dir=str(tmp_path / "missing"),
        models={"analyst": "nosuch:model", "architect": "rules"},
        approval_required=["developer"],
        developer=DeveloperProfile(mode="command"),
    )
    async with run_worker(settings):
        handle = await start(env.client, settings.task_queue, TYPO, profile)
        with pytest.raises(WorkflowFailureError) as err:
            await handle.result()
    reason = str(err.value.cause)
    for expected in ("nosuch", "models.architect is 'rules'", "no model for the reviewer",
                     "not a folder", "nobody could approve", "names no agent"):  # fmt: skip
        assert expected in reason, (expected, reason)


async def test_request_replan_is_signed_bounded_and_counted(
    env, settings_for, run_worker, tmp_path
):
    settings = signed_settings(settings_for, tmp_path)
    with models(**agents()) as ids:
        async with run_worker(settings):
            handle = await start(
                env.client, settings.task_queue, BUG,
                profile_for(tmp_path, ids, approval_required=["analyst"], max_replans=1),
            )  # fmt: skip
            view = await wait_for(handle, lambda v: v.awaiting is not None)
            with pytest.raises(WorkflowUpdateFailedError):  # unsigned: the agent cannot
                await handle.execute_update(
                    Orchestration.request_replan, ReplanRequest(reason="skip", requested_by="lead")
                )
            from phasegate.domain.orchestration.gates import digest

            binding = {"evidence_sha256": digest({"replan": 0}), "first_run_id": view.approval_binding["first_run_id"]}  # fmt: skip
            nonce, sig = sign("lead", tmp_path / "keys", handle.id, view.replan_gate, binding,
                              comment="wrong approach")  # fmt: skip
            await handle.execute_update(
                Orchestration.request_replan,
                ReplanRequest(
                    reason="wrong approach", requested_by="lead", nonce=nonce, signature=sig
                ),
            )
            view = await wait_for(handle, lambda v: v.plan.replanned_count == 1)
            assert "lead asked: wrong approach" in view.plan.replan_reason
            await handle.terminate("test over")


def test_profile_approvers_must_leave_someone_the_developer_session_accepts(tmp_path):
    """Else every developer step would fail at its session's phase 0 and spend replans."""
    setup = OrchestrationActivities(
        library_paths=[str(Path(__file__).parent.parent / "library")],
        allow_unsigned_approvals=True,
        default_models=dict.fromkeys(("analyst", "architect", "reviewer"), "demo"),
    )
    refused = setup.orchestration_setup(
        SetupRequest(profile=Profile(working_dir=str(tmp_path), approvers=["alice"]))
    )
    assert any("nobody the developer's workflow" in p and "lead" in p for p in refused.problems)
    fine = setup.orchestration_setup(
        SetupRequest(profile=Profile(working_dir=str(tmp_path), approvers=["lead"]))
    )
    assert fine.problems == []
