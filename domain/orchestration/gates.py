"""Who may decide for an orchestration, and how a decision or replan request is checked.

A mixin of :class:`~phasegate.domain.orchestration.OrchestrationState`: a decision
names the open gate and, where approvers have keys, is signed exactly like a
session's approval (``domain.signing.canonical_message`` version 2, the
orchestration id as ``session_id`` and the gate number as ``phase``), so the agent
being orchestrated cannot approve for a person. Pure.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import TYPE_CHECKING

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import ApprovalRefused, PhasegateError, ReplanRefused
from phasegate.domain.orchestration.messages import AwaitingDecision, StepRecord
from phasegate.domain.signing import ApproverKey

if TYPE_CHECKING:
    from phasegate.domain.orchestration.agents import Profile

__all__ = ["MAX_NONCES", "GateRules", "digest", "short"]

MAX_NONCES = 500


def digest(value: object) -> str:
    """SHA-256 of ``value``'s canonical JSON: what a signed decision binds."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def short(text: str, limit: int = 1_000) -> str:
    """``text`` cut to ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class GateRules:
    """Decisions on open gates and signed replan requests (state lives in the subclass)."""

    orchestration_id: str
    first_run_id: str
    profile: Profile
    keys: list[ApproverKey]
    unsigned_ok: bool
    awaiting: AwaitingDecision | None
    pending_replan: str | None
    status: str
    gate_seq: int
    replanned_count: int
    used_nonces: list[str]
    last_decision: str
    steps: list[StepRecord]

    def log(
        self,
        now: datetime,
        kind: str,
        *,
        agent: str = "",
        key: str = "",
        actor: str = "",
        detail: str = "",
    ) -> None:
        raise NotImplementedError

    def fail(self, reason: str, now: datetime) -> None:
        raise NotImplementedError

    def approval_binding(self) -> dict[str, str] | None:
        """What a signed decision on the open gate must bind (as ``state`` shows it)."""
        if self.awaiting is None:
            return None
        return {"evidence_sha256": self.awaiting.subject_sha256, "first_run_id": self.first_run_id}

    def check_decision(
        self,
        *,
        gate: int,
        approver: str,
        decision: str,
        comment: str,
        nonce: str | None,
        signature: str | None,
    ) -> ApprovalRefused | None:
        """Why a decision is refused (with what to do), or None. Never raises."""
        if self.awaiting is None:
            return ApprovalRefused(
                "nothing is waiting for a decision",
                hint=f"see `phasegate plan show {self.orchestration_id}`",
            )
        if gate != self.awaiting.gate:
            return ApprovalRefused(
                f"gate {gate} is not the open one: gate {self.awaiting.gate} is waiting",
                where="gate",
            )
        verb = "approve" if decision == "approve" else "approve --reject"
        return self._refusal(
            Decision(
                scope_id=self.orchestration_id,
                gate=gate,
                approver=approver,
                decision=decision,
                comment=comment,
                nonce=nonce,
                signature=signature,
                binding=self.approval_binding(),
            ),
            how=f"phasegate orchestrate {verb} {self.orchestration_id} --as NAME",
        )

    def replan_gate(self) -> int:
        """The number a signed replan request names (the next gate number)."""
        return self.gate_seq + 1

    def check_replan(
        self, *, actor: str, reason: str, nonce: str | None, signature: str | None
    ) -> PhasegateError | None:
        """Why a person's replan request is refused, or None. Never raises."""
        how = f"phasegate orchestrate replan {self.orchestration_id} --reason R --as NAME"
        if self.status in ("completed", "failed"):
            return ReplanRefused(
                f"the orchestration has {self.status}", hint="start a new orchestration"
            )
        if self.pending_replan is not None:
            return ReplanRefused(f"a replan is already pending: {self.pending_replan}")
        if self.replanned_count >= self.profile.max_replans:
            return ReplanRefused(
                f"no replans left (max_replans {self.profile.max_replans}, "
                f"{self.replanned_count} used)",
                hint="reject the open gate or start a new orchestration",
            )
        return self._refusal(
            Decision(
                scope_id=self.orchestration_id,
                gate=self.replan_gate(),
                approver=actor,
                decision="approve",
                comment=reason,
                nonce=nonce,
                signature=signature,
                binding=self.replan_binding(),
            ),
            how=how,
        )

    def replan_binding(self) -> dict[str, str]:
        """What a signed replan request binds (``state`` shows it as ``replan_binding``):
        the replan it would be, so a captured request cannot be replayed later."""
        return {
            "evidence_sha256": digest({"replan": self.replanned_count}),
            "first_run_id": self.first_run_id,
        }

    def _refusal(self, decision: Decision, *, how: str) -> ApprovalRefused | None:
        """The one approval policy (``domain.approvals``) with this orchestration's
        deciders: the keys, else the profile's approvers (or anyone, if unsigned is ok)."""
        deciders = Deciders(
            keys=self.keys,
            unsigned_ok=self.unsigned_ok,
            names=[] if self.keys else list(self.profile.approvers),
            scope="orchestration",
            gate_noun="gate",
            how=how,
        )
        return refusal(deciders, decision, used_nonces=self.used_nonces)

    def approver_names(self) -> list[str]:
        """Who may decide: the keys' names, else the profile's approvers, else anyone."""
        names = sorted({k.name for k in self.keys}) or list(self.profile.approvers)
        return names or ["anyone (unsigned approvals are allowed)"]

    def approvers(self) -> str:
        return ", ".join(self.approver_names())

    def apply_decision(
        self, *, approver: str, decision: str, comment: str, nonce: str | None, now: datetime
    ) -> None:
        """Record a checked decision: approve lets the step run (or the output stand)."""
        gate = self.awaiting
        assert gate is not None
        self.spend_nonce(nonce)
        self.awaiting = None
        self.last_decision = (
            f"{approver} {decision}d gate {gate.gate} ({gate.kind} of {gate.agent})"
        )
        if comment:
            self.last_decision += f": {short(comment, 200)}"
        self.log(
            now,
            gate.kind,
            agent=gate.agent,
            actor=approver,
            detail=f"gate {gate.gate} {decision}d: {comment}",
        )
        if decision == "reject":
            self.fail(
                f"{approver} rejected gate {gate.gate} ({gate.kind} of {gate.agent})"
                + (f": {comment}" if comment else ""),
                now,
            )
            return
        self.status = "running"
        if gate.kind == "approval":
            step = self.steps[gate.step]
            step.approved_by = approver
            step.status = "pending"

    def spend_nonce(self, nonce: str | None) -> None:
        """A signed message was accepted: its nonce is never accepted again."""
        if nonce:
            self.used_nonces = [*self.used_nonces, nonce][-MAX_NONCES:]
        self.gate_seq += 1
