"""The orchestration's decisions: which step runs next, what an output means, when a
person must decide, when to replan and when the run is over.

``workflows/orchestration.py`` maps messages and runs activities; every decision is
made here (STYLE.md 14), in :class:`OrchestrationState`, without a server:

- :meth:`OrchestrationState.advance` says what to do next: plan, run a step, wait for
  a person, replan or finish. Messages have ``check_<message>``/``apply_<message>``.
- :meth:`OrchestrationState.record_output` reduces an agent's output into the state:
  outputs are keyed ``<agent>_<n>``, history is append-only, and an output recorded
  twice (a retried step) changes nothing the second time.
- A complex scope with no architect planned, an output's ``replan_request``, a
  person's (:meth:`apply_replan`) or a failed step asks for a replan: a continue-as-new,
  at most ``max_replans``.
- A reviewer's rejection sends the work back to the developer, at most
  ``max_review_passes`` reviews; an output below ``escalation_threshold`` waits for
  a person; steps of agents in ``approval_required`` wait for a signed approval.

Pure: no I/O, no clock (callers pass ``now``), no randomness.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from phasegate.domain.errors import (
    DefinitionError,
    DeveloperInvalid,
    GateDefinitionError,
    ModelAuth,
    ModelNotFound,
    ModelUnusable,
    TemplateNotFound,
    WorkflowNotFound,
)
from phasegate.domain.orchestration.actions import (
    Action,
    Finish,
    NeedPlan,
    Replan,
    RunStep,
    Wait,
)
from phasegate.domain.orchestration.agents import (
    MODEL_UNREACHABLE,
    STEP_AGENTS,
    AgentOutput,
    AnalysisResult,
    Issue,
    PlannerDecision,
    Profile,
    ReviewResult,
    Scope,
    StepUsage,
)
from phasegate.domain.orchestration.context import ContextSections, sections_for
from phasegate.domain.orchestration.developer import (
    MAX_ORCHESTRATION_ID,
    DeveloperSessions,
    id_problems,
)
from phasegate.domain.orchestration.gates import GateRules, digest, short
from phasegate.domain.orchestration.messages import (
    AwaitingDecision,
    HistoryEntry,
    OrchestrationCarry,
    OrchestrationSetup,
    OrchestrationView,
    OutputRecord,
    PlanView,
    StepRecord,
)
from phasegate.domain.orchestration.planner import fixed_plan, rules_plan
from phasegate.domain.orchestration.views import (
    INLINE_OUTPUT_BYTES,
    compact,
    output_summary,
    plan_view,
    shrink,
    state_view,
)
from phasegate.domain.signing import ApproverKey
from phasegate.domain.trust import SYSTEM_ACTOR

__all__ = [
    "CONFIGURATION_ERRORS",
    "MAX_HISTORY",
    "MAX_ORCHESTRATION_ID",
    "Finish",
    "NeedPlan",
    "OrchestrationState",
    "Replan",
    "RunStep",
    "Wait",
    "digest",
]

MAX_HISTORY = 400  # history entries kept; older ones are counted in history_dropped
# Failures a new plan cannot fix: the worker's configuration (or a server) must change.
CONFIGURATION_ERRORS = frozenset(
    cls.code
    for cls in (
        WorkflowNotFound,
        DefinitionError,
        TemplateNotFound,
        GateDefinitionError,
        DeveloperInvalid,
        ModelUnusable,
        ModelAuth,
        ModelNotFound,
    )
) | {MODEL_UNREACHABLE}


class OrchestrationState(GateRules):
    """Everything one orchestration run knows, and every rule it follows."""

    def __init__(
        self,
        *,
        orchestration_id: str,
        run_id: str,
        issue: Issue,
        profile: Profile,
        setup: OrchestrationSetup,
        carried: OrchestrationCarry | None,
        now: datetime,
    ) -> None:
        self.orchestration_id = orchestration_id
        self.issue = issue
        self.profile = profile
        self.models = dict(setup.models)
        self.keys: list[ApproverKey] = [
            key
            for key in setup.approver_keys
            if not profile.approvers or key.name in profile.approvers
        ]
        self.unsigned_ok = setup.unsigned_approvals
        self.status = "planning"
        self.plan: PlannerDecision | None = None
        self.steps: list[StepRecord] = []
        self.cursor = 0
        self.awaiting: AwaitingDecision | None = None
        self.pending_replan: str | None = None
        self.last_decision = ""
        self.failure = ""
        carry = carried or OrchestrationCarry(
            first_run_id=run_id, replanned_count=0, replan_reason=""
        )
        self.first_run_id = carry.first_run_id
        self.replanned_count = carry.replanned_count
        self.replan_reason = carry.replan_reason
        self.outputs: dict[str, OutputRecord] = {o.key: o for o in carry.outputs}
        self.history: list[HistoryEntry] = list(carry.history)
        self.history_dropped = carry.history_dropped
        self.review_passes = carry.review_passes
        self.gate_seq = carry.gate_seq
        self.used_nonces: list[str] = list(carry.used_nonces)
        self.usage = carry.usage.model_copy()
        self.scope: Scope | None = carry.scope
        self.child_sessions = list(carry.child_sessions)
        self.sessions = DeveloperSessions(carry.developer_sessions, self.child_sessions)
        self.log(
            now,
            "replan" if carried else "started",
            detail=carried.replan_reason if carried else short(issue.title),
        )

    # ----------------------------------------------------------------- history
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
        """Append one history entry (append-only; the oldest are dropped past MAX_HISTORY)."""
        seq = (self.history[-1].seq + 1) if self.history else self.history_dropped
        self.history.append(
            HistoryEntry(
                seq=seq, at=now, kind=kind, agent=agent, key=key, actor=actor, detail=short(detail)
            )
        )
        if len(self.history) > MAX_HISTORY:
            drop = len(self.history) - MAX_HISTORY
            self.history = self.history[drop:]
            self.history_dropped += drop

    # -------------------------------------------------------------------- plan
    def set_plan(
        self,
        decision: PlannerDecision,
        now: datetime,
        *,
        model: str,
        usage: StepUsage | None = None,
    ) -> None:
        """Adopt the planner's decision as this run's plan (recorded as ``planner_<n>``).

        A run that failed while the planner was thinking (a person's replan with none
        left) stays failed.
        """
        if self.status in ("completed", "failed"):
            return
        key = self.next_key("planner")
        data = decision.model_dump(mode="json")
        self.outputs[key] = OutputRecord(
            key=key,
            agent="planner",
            step=-1,
            output=data,
            usage=usage or StepUsage(),
            model=model,
            sha256=digest(data),
            at=now,
        )
        self._add_usage(usage or StepUsage())
        self.plan = decision
        self.steps = [
            StepRecord(index=i, agent=step.agent, reason=step.reason)
            for i, step in enumerate(decision.steps)
        ]
        self.cursor = 0
        if decision.scope and self.scope is None:
            self.scope = decision.scope
        self.status = "running"
        names = " → ".join(step.agent for step in decision.steps)
        self.log(now, "plan", agent="planner", actor=model, detail=f"{names}: {decision.reasoning}")

    def plan_problems(self, decision: PlannerDecision) -> list[str]:
        """What makes a plan unusable whatever the workspace holds."""
        agents = [step.agent for step in decision.steps]
        if "developer" in agents and "reviewer" not in agents[agents.index("developer") :]:
            return ["the plan has no reviewer after the developer: work is never left unreviewed"]
        if "developer" not in agents:
            return [
                (
                    "the plan has no developer step: nothing would change the code "
                    "(an orchestration ends with reviewed work)"
                )
            ]
        return []

    def refuse_plan(self, problems: list[str], now: datetime, *, code: str = "") -> None:
        """No usable plan: replan while replans are left, else fail; a planner that
        cannot run on this worker (``code`` in CONFIGURATION_ERRORS) fails at once."""
        detail = "; ".join(problems)
        self.log(now, "plan_refused", agent="planner", detail=detail)
        if code in CONFIGURATION_ERRORS:
            self.fail(f"the planner cannot run on this worker: {detail}", now)
            return
        self._ask_replan(f"the plan failed verification: {detail}", now, by=SYSTEM_ACTOR)

    # ------------------------------------------------------------------ advance
    def advance(self, now: datetime) -> Action:
        """What to do next. May open an approval gate (recorded) before answering."""
        while True:
            if self.status == "completed":
                return Finish(True)
            if self.status == "failed":
                return Finish(False, self.failure)
            if self.pending_replan is not None and self.awaiting is None:
                if self.replanned_count >= self.profile.max_replans:
                    self.fail(
                        f"a replan was needed ({self.pending_replan}) but max_replans "
                        f"({self.profile.max_replans}) is reached",
                        now,
                    )
                    continue
                return Replan(self.carry(self.pending_replan))
            if self.plan is None:
                return NeedPlan()
            if self.awaiting is not None:
                return Wait(self.awaiting)
            if self.cursor >= len(self.steps):
                self.status = "completed"
                self.log(now, "completed", detail=f"{len(self.outputs)} outputs")
                continue
            step = self.steps[self.cursor]
            if step.status == "done":
                self.cursor += 1
                continue
            if self._needs_approval(step):
                self._open_gate(
                    "approval",
                    step,
                    f"run {step.agent}: {step.reason}",
                    {
                        "agent": step.agent,
                        "reason": step.reason,
                        "plan": digest(self.plan.model_dump()),
                    },
                    now,
                )
                continue
            self.status = "running"
            return RunStep(step, self.next_key(step.agent))

    def next_key(self, agent: str) -> str:
        """The key the next output of ``agent`` is recorded under (``developer_1``…)."""
        n = sum(1 for o in self.outputs.values() if o.agent == agent)
        return f"{agent}_{n}"

    def _needs_approval(self, step: StepRecord) -> bool:
        if step.approved_by or step.agent not in self.profile.approval_required:
            return False
        return not (self.profile.auto_approve_trivial and self.scope == "trivial")

    def _open_gate(
        self, kind: str, step: StepRecord, reason: str, subject: Any, now: datetime
    ) -> None:
        self.gate_seq += 1
        self.awaiting = AwaitingDecision(
            gate=self.gate_seq,
            kind=kind,
            step=step.index,
            agent=step.agent,
            reason=short(reason),
            subject_sha256=digest(subject),
            since=now,
        )
        if kind == "approval":
            step.status = "awaiting_approval"
        self.status = "awaiting"
        self.log(now, kind, agent=step.agent, detail=f"gate {self.gate_seq}: waiting: {reason}")

    # ------------------------------------------------------------------ steps
    def start_step(self, step: StepRecord, key: str, now: datetime, *, model: str = "") -> None:
        step.status = "running"
        step.key = key
        self.log(now, "step_started", agent=step.agent, key=key, actor=model, detail=step.reason)

    def open_session(self, step: StepRecord, session_id: str, spec_path: str, prompt: str) -> None:
        """The developer step started its gated session (the step waits on it)."""
        step.child_session = session_id
        self.child_sessions.append(session_id)
        mode = self.profile.developer.mode
        self.sessions.open(session_id, mode=mode, spec_path=spec_path, prompt=prompt)

    def record_output(
        self,
        step: StepRecord,
        key: str,
        output: AgentOutput,
        usage: StepUsage,
        now: datetime,
        *,
        model: str = "",
        ref: str | None = None,
    ) -> bool:
        """Reduce one agent output into the state. False when ``key`` was already recorded."""
        if key in self.outputs:
            return False
        data = output.model_dump(mode="json")
        digest_of_whole = digest(data)
        if ref is not None:  # the whole output is in the file; history keeps a digest
            data = shrink(data, INLINE_OUTPUT_BYTES)
        self.outputs[key] = OutputRecord(
            key=key,
            agent=step.agent,
            step=step.index,
            output=data,
            usage=usage,
            model=model,
            sha256=digest_of_whole,
            ref=ref,
            at=now,
        )
        self._add_usage(usage)
        step.status = "done"
        self.sessions.ended(step.child_session, completed=True)
        self.cursor = step.index + 1
        self.log(now, "step_done", agent=step.agent, key=key, detail=output_summary(output))
        self._react(step, key, output, now)
        return True

    def _add_usage(self, usage: StepUsage) -> None:
        self.usage = StepUsage(
            requests=self.usage.requests + usage.requests,
            input_tokens=self.usage.input_tokens + usage.input_tokens,
            output_tokens=self.usage.output_tokens + usage.output_tokens,
        )

    def _react(self, step: StepRecord, key: str, output: AgentOutput, now: datetime) -> None:
        if isinstance(output, AnalysisResult):
            self.scope = output.scope
            later = {s.agent for s in self.steps[step.index + 1 :]}
            had_architect = any(o.agent == "architect" for o in self.outputs.values())
            if output.scope == "complex" and "architect" not in later and not had_architect:
                self._ask_replan(
                    "the analyst found the scope complex and the plan has no architect",
                    now,
                    by=key,
                )
        if isinstance(output, ReviewResult) and not output.approved:
            self._review_rejected(step, output, now)
        request = getattr(output, "replan_request", None)
        if request:
            self._ask_replan(f"{step.agent} asked: {request}", now, by=key)
        confidence = getattr(output, "confidence", None)
        if (
            self.status != "failed"
            and self.pending_replan is None
            and confidence is not None
            and confidence < self.profile.escalation_threshold
        ):
            self._open_gate(
                "escalation",
                step,
                f"{step.agent} is only {confidence:.2f} confident "
                f"(escalation_threshold {self.profile.escalation_threshold})",
                {"key": key, "output": self.outputs[key].sha256},
                now,
            )

    def _review_rejected(self, step: StepRecord, review: ReviewResult, now: datetime) -> None:
        self.review_passes += 1
        comments = "; ".join(review.comments) or "no comments"
        self.log(
            now,
            "review_rejected",
            agent="reviewer",
            detail=f"pass {self.review_passes}: {review.severity}: {comments}",
        )
        if self.review_passes >= self.profile.max_review_passes:
            self.fail(
                f"the reviewer rejected the change {self.review_passes} times "
                f"(max_review_passes {self.profile.max_review_passes}); last comments: {comments}",
                now,
            )
            return
        insert_at = step.index + 1
        again = [
            StepRecord(
                index=0,
                agent="developer",
                reason=f"address review pass {self.review_passes}: {short(comments, 300)}",
            ),
            StepRecord(index=0, agent="reviewer", reason=f"review pass {self.review_passes + 1}"),
        ]
        self.steps[insert_at:insert_at] = again
        for i, record in enumerate(self.steps):
            record.index = i

    def record_failure(
        self, step: StepRecord, error: str, now: datetime, *, code: str = ""
    ) -> None:
        """A step failed for good: replan while replans are left, else fail the run.

        A failure no plan can fix (``code`` in :data:`CONFIGURATION_ERRORS`: a missing
        workflow definition, a model the worker cannot use) fails the run at once.
        """
        step.status = "failed"
        self.sessions.ended(step.child_session, completed=False)
        self.log(now, "step_failed", agent=step.agent, key=step.key, detail=error)
        if code in CONFIGURATION_ERRORS:
            self.fail(f"the {step.agent} step cannot run on this worker: {error}", now)
            return
        self._ask_replan(f"the {step.agent} step failed: {error}", now, by=SYSTEM_ACTOR)

    def _ask_replan(self, reason: str, now: datetime, *, by: str) -> None:
        if self.pending_replan is not None or self.status in ("completed", "failed"):
            return
        if self.replanned_count >= self.profile.max_replans:
            self.fail(f"{reason}; no replans left (max_replans {self.profile.max_replans})", now)
            return
        self.pending_replan = short(reason)
        self.log(now, "replan_requested", actor=by, detail=reason)

    def apply_replan(
        self, reason: str, actor: str, now: datetime, nonce: str | None = None
    ) -> None:
        """A checked replan request: a new plan after the current step (a new run); an open
        gate is withdrawn and a signed request's nonce spent."""
        self.spend_nonce(nonce)
        if self.awaiting is not None:
            self.awaiting = None
            for step in self.steps:
                if step.status == "awaiting_approval":
                    step.status = "pending"
        self._ask_replan(f"{actor} asked: {reason}", now, by=actor)

    def fail(self, reason: str, now: datetime) -> None:
        if self.status in ("completed", "failed"):
            return
        self.status = "failed"
        self.failure = short(reason, 2000)
        self.awaiting = None
        self.log(now, "failed", detail=reason)

    # ---------------------------------------------------------------- carry
    def carry(self, reason: str) -> OrchestrationCarry:
        """The state the next run starts from, compacted under MAX_CARRY_BYTES."""
        outputs = list(self.outputs.values())
        carry = OrchestrationCarry(
            first_run_id=self.first_run_id,
            replanned_count=self.replanned_count + 1,
            replan_reason=reason,
            outputs=outputs,
            history=self.history,
            history_dropped=self.history_dropped,
            review_passes=self.review_passes,
            gate_seq=self.gate_seq,
            used_nonces=self.used_nonces,
            usage=self.usage,
            scope=self.scope,
            child_sessions=self.child_sessions,
            developer_sessions=self.sessions.carried(),
        )
        return compact(carry)

    def plan_view(self) -> PlanView:
        """Answer of query ``plan``."""
        return plan_view(self)

    def view(self) -> OrchestrationView:
        """Answer of query ``state``."""
        return state_view(self)

    def latest(self, agent: str) -> OutputRecord | None:
        found = [o for o in self.outputs.values() if o.agent == agent]
        return found[-1] if found else None

    # ---- what the workflow asks before it acts (so it decides nothing) --------

    @staticmethod
    def setup_problems(setup: OrchestrationSetup, orchestration_id: str) -> list[str]:
        """Why a run cannot start with ``setup`` under ``orchestration_id`` ([]: it can)."""
        return [*setup.problems, *id_problems(orchestration_id)]

    def planner(self) -> str:
        """Who plans: ``fixed`` (the classic pipeline), ``rules`` (no model) or a model id."""
        if self.profile.orchestration_mode == "fixed":
            return "fixed"
        return self.models.get("planner", "rules")

    def planned_without_model(self) -> PlannerDecision:
        """The plan of the ``fixed`` or ``rules`` planner (see :meth:`planner`)."""
        if self.planner() == "fixed":
            return fixed_plan()
        analysis = self.latest("analyst")
        return rules_plan(
            self.issue,
            analysis=AnalysisResult.model_validate(analysis.output)
            if analysis and analysis.output
            else None,
            replan_reason=self.replan_reason or None,
            done=[o.agent for o in self.outputs.values() if o.agent in STEP_AGENTS],
        )

    def claimed_files(self) -> list[str]:
        """Files the latest analysis says are relevant (a plan is checked against them)."""
        analysis = self.latest("analyst")
        return [str(f) for f in analysis.output.get("relevant_files", [])] if analysis else []

    def rejected_review(self) -> OutputRecord | None:
        """The latest review, if it rejected the work (its comments go back to the developer)."""
        review = self.latest("reviewer")
        return review if review is not None and not review.output.get("approved", True) else None

    def review_comments(self) -> list[str]:
        """The comments of the latest review, if it rejected the work."""
        review = self.rejected_review()
        return [str(c) for c in review.output.get("comments", [])] if review else []

    def context(self, step: StepRecord | None) -> ContextSections:
        """What an agent may be shown for ``step`` (None: the planner); see
        :func:`~phasegate.domain.orchestration.context.sections_for`."""
        return sections_for(self, step)
