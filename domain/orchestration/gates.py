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

from phasegate.domain.orchestration.messages import AwaitingDecision, StepRecord
from phasegate.domain.signing import ApproverKey, check_signed_decision
from phasegate.domain.trust import reserved_actor

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

    def log(self, now: datetime, kind: str, **fields: str) -> None:
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
    ) -> str | None:
        """Why a decision is refused (with what to do), or None. Never raises."""
        if self.awaiting is None:
            return "nothing is waiting for a decision (see `phasegate plan show ID`)"
        if gate != self.awaiting.gate:
            return f"gate {gate} is not the open one: gate {self.awaiting.gate} is waiting"
        return self._check_signed(
            gate, approver, decision, comment, nonce, signature, self.approval_binding(),
            how=f"phasegate orchestrate {'approve' if decision == 'approve' else 'approve --reject'} "
            f"{self.orchestration_id} --as NAME",
        )  # fmt: skip

    def replan_gate(self) -> int:
        """The number a signed replan request names (the next gate number)."""
        return self.gate_seq + 1

    def check_replan(
        self, *, actor: str, reason: str, nonce: str | None, signature: str | None
    ) -> str | None:
        if self.status in ("completed", "failed"):
            return f"the orchestration has {self.status}; start a new one"
        if self.pending_replan is not None:
            return f"a replan is already pending: {self.pending_replan}"
        if self.replanned_count >= self.profile.max_replans:
            return (
                f"no replans left (max_replans {self.profile.max_replans}, "
                f"{self.replanned_count} used): reject the open gate or start a new orchestration"
            )
        return self._check_signed(
            self.replan_gate(), actor, "approve", reason, nonce, signature, self.replan_binding(),
            how=f"phasegate orchestrate replan {self.orchestration_id} --reason R --as NAME",
        )  # fmt: skip

    def replan_binding(self) -> dict[str, str]:
        """What a signed replan request binds (``state`` shows it as ``replan_binding``):
        the replan it would be, so a captured request cannot be replayed later."""
        return {
            "evidence_sha256": digest({"replan": self.replanned_count}),
            "first_run_id": self.first_run_id,
        }

    def _check_signed(
        self,
        gate: int,
        approver: str,
        decision: str,
        comment: str,
        nonce: str | None,
        signature: str | None,
        binding: dict[str, str] | None,
        *,
        how: str,
    ) -> str | None:
        reserved = reserved_actor(approver)  # whatever the worker accepts, signed or not
        if reserved:
            return reserved
        allowed = self.approvers()
        if not self.keys:
            if not self.unsigned_ok:
                return (
                    "no approver key can decide here: name keys on the worker "
                    "(PHASEGATE_APPROVER_KEYS) or allow unsigned approvals"
                )
            if self.profile.approvers and approver not in self.profile.approvers:
                return f"{approver!r} is not an approver of this orchestration ({allowed})"
            return None
        problem = check_signed_decision(
            keys=self.keys,
            session_id=self.orchestration_id,
            phase=gate,
            decision=decision,
            approver=approver,
            comment=comment,
            nonce=nonce,
            signature=signature,
            used_nonces=frozenset(self.used_nonces),
            binding=binding,
        )
        if problem is not None:
            problem = problem.replace("this session requires", "this orchestration requires")
            return f"{problem} (sign it with `{how}`)"
        return None

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
        if nonce:
            self.used_nonces = [*self.used_nonces, nonce][-MAX_NONCES:]
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

    def apply_replan_nonce(self, nonce: str | None) -> None:
        if nonce:
            self.used_nonces = [*self.used_nonces, nonce][-MAX_NONCES:]
        self.gate_seq += 1
