"""A step graph run as a pure state machine (the shape of docs/adding-a-workflow-type.md).

``StepGraph`` (the workflow) owns one :class:`GraphState` and only dispatches what
:meth:`GraphState.advance` asks for: render the step it entered, run its handler, wait
for an outside agent's report or a person's answers, continue-as-new, finish. Messages
have ``check_<message>`` (the update validator; changes nothing) and
``apply_<message>``: ``report`` (an outside agent ends its step), ``answer`` (a person
answers the step's questions) and ``handler`` (a worker-run handler's result).

How a step ends decides everything: its outcome takes the step's own edge, else
``_default``, else the run fails saying so; an edge to null ends the run; entering a
step past its visit cap, or iterating past ``max_iterations``, fails the run;
``needs_input`` waits for a person and runs the step again, fresh, with the answers.

Pure: no I/O, no clock (callers pass ``now``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from phasegate.domain.approvals import Deciders, Decision, refusal
from phasegate.domain.errors import (
    PhasegateError,
    SessionNotActive,
    StepSequenceViolation,
)
from phasegate.domain.gate_eval import evaluate_gate
from phasegate.domain.graph import checks, views
from phasegate.domain.graph.args import arg_problem
from phasegate.domain.graph.messages import (
    GraphAnswer,
    GraphSetup,
    GraphStatus,
    GraphSummary,
    GraphView,
    PathEntry,
    Question,
    ReportResult,
    StartGraph,
    StepReport,
    StepView,
)
from phasegate.domain.graph.model import NEEDS_INPUT, STEPS_BEFORE_CONTINUE, Finding, Graph, StepDef
from phasegate.domain.session.checking import with_verify
from phasegate.domain.verify import VerifyRequest, VerifyResult

__all__ = [
    "DEFAULT_VISIT_CAP",
    "STEPS_BEFORE_CONTINUE",
    "Action",
    "ContinueAsNew",
    "Finish",
    "GraphState",
    "HandlerOutcome",
    "RenderStep",
    "RunHandler",
    "WaitAnswer",
    "WaitReport",
]

_READ_KINDS = ("outside", "agent")  # handlers that read a step's rendered actions
DEFAULT_VISIT_CAP = 100  # a step without max_visits is entered at most this often
MAX_PATH = 500  # path entries kept (the total is counted; history holds them all)
MAX_REPORTS = 200  # answers remembered for repeated report ids
MAX_NONCES = 2000
WORKER = "phasegate:worker"  # who ended a step a worker-run handler worked


@dataclass(frozen=True)
class RenderStep:
    """Render the current step's actions (sandboxed Jinja2, an activity)."""

    step: StepDef
    visit: int


@dataclass(frozen=True)
class RunHandler:
    """Run the current step's handler (function, agent, child session or graph)."""

    step: StepDef
    visit: int


@dataclass(frozen=True)
class WaitReport:
    """An outside agent works the step; wait for its ``report_step``."""

    step_id: str


@dataclass(frozen=True)
class WaitAnswer:
    """The step asked a person; wait for the ``answer`` update."""

    step_id: str
    round: int


@dataclass(frozen=True)
class ContinueAsNew:
    pass


@dataclass(frozen=True)
class Finish:
    status: GraphStatus


Action = RenderStep | RunHandler | WaitReport | WaitAnswer | ContinueAsNew | Finish


class HandlerOutcome(BaseModel):
    """What a worker-run handler ended its step with (activity or child result)."""

    outcome: str = Field(max_length=40)
    state: dict[str, Any] = Field(default_factory=dict)
    questions: list[Question] = Field(default_factory=list, max_length=3)
    findings: list[Finding] = Field(default_factory=list, max_length=100)
    summary: str = Field("", max_length=2000)


class GraphState(BaseModel):
    """Everything a run knows; carried whole across continue-as-new."""

    graph: Graph
    sha256: str
    params: dict[str, Any] = Field(default_factory=dict)
    target: str = ""
    setup: GraphSetup = Field(default_factory=GraphSetup)
    approvers: list[str] | None = None
    status: GraphStatus = "running"
    current: str | None = None
    visits: dict[str, int] = Field(default_factory=dict)
    iterations: dict[str, int] = Field(default_factory=dict)
    values: dict[str, Any] = Field(default_factory=dict, description="the step state")
    rendered: str | None = Field(None, description="the current visit's actions, rendered")
    path: list[PathEntry] = Field(default_factory=list)
    path_total: int = Field(0, ge=0)
    questions: list[Question] = Field(default_factory=list)
    question_round: int = Field(0, ge=0)
    answers: dict[str, str] = Field(default_factory=dict)
    findings: list[Finding] = Field(
        default_factory=list, description="the last review's blocking findings"
    )
    reports: dict[str, ReportResult] = Field(default_factory=dict)
    children: dict[str, str] = Field(
        default_factory=dict, description="'step#visit' → the workflow id of its child run"
    )
    used_nonces: list[str] = Field(default_factory=list)
    outcome: str | None = None
    failure: str = ""
    runs: int = Field(1, ge=1)
    render_all: bool = Field(
        True, description="render steps no one reads too (runs from before they were skipped)"
    )
    first_run_id: str = ""
    steps_this_run: int = Field(0, ge=0)
    started_at: datetime | None = None
    updated_at: datetime | None = None

    # ---- starting ----------------------------------------------------------

    @staticmethod
    def start_problems(start: StartGraph) -> list[str]:
        """Why a run cannot start with ``start`` ([]: it can): its parameters must fit
        their declarations. (Whether the graph is the one its digest names is the
        worker's check, :func:`digest_problem`: a digest is computed by code that may
        change, and a recorded history must replay.)"""
        problems: list[str] = []
        for name, value in start.params.items():
            arg = start.graph.params.get(name)
            if arg is None:
                known = ", ".join(start.graph.params) or "none"
                problems.append(f"unknown parameter {name!r} (the graph's: {known})")
            elif reason := arg_problem(arg, value):
                problems.append(f"parameter {name!r}: {reason}")
        for name, arg in start.graph.params.items():
            if arg.required and name not in start.params and arg.default is None:
                problems.append(f"parameter {name!r} is required: pass --param {name}=VALUE")
        if start.graph.step(start.graph.entry) is None:
            problems.append(f"the entry step {start.graph.entry!r} is not a step")
        return problems

    @staticmethod
    def digest_problem(graph: Graph, sha256: str) -> str | None:
        """Why ``graph`` is not the graph ``sha256`` pins, or None."""
        if graph.sha256() == sha256:
            return None
        return (
            "the graph does not match its sha256 (changed after it was pinned): "
            "start it again with `phasegate graph run`"
        )

    @classmethod
    def begin(cls, start: StartGraph, setup: GraphSetup, run_id: str, now: datetime) -> GraphState:
        state = cls(
            graph=start.graph,
            sha256=start.sha256,
            params=start.graph.run_params(start.params),
            target=start.target,
            setup=setup,
            approvers=start.approvers,
            values=start.graph.initial_state(),
            first_run_id=run_id,
            started_at=now,
            updated_at=now,
        )
        state._enter(start.graph.entry, now)
        return state

    # ---- what to do next --------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.status in ("completed", "failed")

    def step(self) -> StepDef | None:
        return self.graph.step(self.current) if self.current else None

    def visit(self) -> int:
        return self.visits.get(self.current or "", 0)

    def advance(self, now: datetime) -> Action:
        """What the workflow does next."""
        step = self.step()
        if self.finished or step is None:
            return Finish(self.status)
        if self.status == "awaiting_input":
            return WaitAnswer(step.id, self.question_round)
        if self.steps_this_run >= self.graph.continue_as_new_after:
            return ContinueAsNew()
        if self.rendered is None and (self.render_all or step.handler.kind in _READ_KINDS):
            return RenderStep(step, self.visit())
        if step.handler.kind == "outside":
            return WaitReport(step.id)
        return RunHandler(step, self.visit())

    def view(self) -> GraphView:
        return views.status_view(self)

    def step_view(self) -> StepView | None:
        return views.step_view(self)

    def summary(self) -> GraphSummary:
        return views.summary(self)

    def apply_child(self, step_id: str, visit: int, workflow_id: str) -> None:
        """A handler started a child run (session or graph) for this visit of the step."""
        self.children[f"{step_id}#{visit}"] = workflow_id
        while len(self.children) > MAX_REPORTS:
            del self.children[next(iter(self.children))]

    def apply_rendered(self, step_id: str, visit: int, text: str) -> None:
        if step_id == self.current and visit == self.visit():
            self.rendered = text

    # ---- report_step -------------------------------------------------------

    def check_report(self, report: StepReport) -> PhasegateError | None:
        """Why an outside agent's report must be refused, or None."""
        if report.report_id and report.report_id in self.reports:
            return None  # a repeat: answered with its first result
        step = self.step()
        if self.finished or step is None:
            return SessionNotActive(f"the graph run is {self.status}; it takes no reports")
        if report.step_id != step.id:
            return StepSequenceViolation(
                f"the run is on step {step.id!r}, not {report.step_id!r}",
                where="step_id",
                hint=f"read the current step (phasegate graph show RUN) and report {step.id!r}",
            )
        if report.visit is not None and report.visit != self.visit():
            return StepSequenceViolation(
                f"the report is for visit {report.visit} of {step.id!r}; this is visit "
                f"{self.visit()} (a stale report)",
                where="visit",
                hint="read the step again and report its current visit",
            )
        if self.status == "awaiting_input":
            return SessionNotActive(
                f"step {step.id!r} waits for a person's answers (round {self.question_round})",
                hint="the person answers with `phasegate graph answer`; then the step runs again",
            )
        if step.handler.kind != "outside":
            return StepSequenceViolation(
                f"step {step.id!r} is worked by its {step.handler.kind} handler, not reported",
                where="step_id",
            )
        return checks.outcome_problem(
            self.graph, self.values, step, report.outcome, report.state, report.questions
        )

    def verify_request(self, report: StepReport, run_key: str) -> VerifyRequest | None:
        """The workspace checks a report must pass besides its gate's fields (the gate's
        ``verify``), or None: no gate, no checks, a repeat, or the fields already fail."""
        step = self.step()
        if (
            step is None
            or step.gate is None
            or not step.gate.verify
            or report.outcome == NEEDS_INPUT
            or (report.report_id is not None and report.report_id in self.reports)
            or not evaluate_gate(step.gate, report.evidence or {}).passed
        ):
            return None
        return VerifyRequest(
            workspace=self.target,
            checks=step.gate.verify,
            evidence=report.evidence or {},
            session_id=run_key,
            target=self.target,
        )

    def apply_report(
        self,
        report: StepReport,
        now: datetime,
        actor: str = "agent",
        verify: list[VerifyResult] | None = None,
    ) -> ReportResult:
        """Record a checked report: the step ends (or asks), unless its evidence fails the
        step's gate or a workspace check (then nothing moves and the problems come back)."""
        if report.report_id and report.report_id in self.reports:
            return self.reports[report.report_id]
        step = self.step()
        assert step is not None
        result = ReportResult(
            accepted=True, step_id=step.id, outcome=report.outcome, report_id=report.report_id
        )
        if step.gate is not None and report.outcome != NEEDS_INPUT:
            verdict = with_verify(evaluate_gate(step.gate, report.evidence or {}), verify or [])
            result.warnings = verdict.warnings
            if not verdict.passed:
                result = result.model_copy(
                    update={"accepted": False, "problems": verdict.problems, "status": self.status}
                )
                self._remember(result)
                self.updated_at = now
                return result
        outcome = self._reviewed(step, report.outcome, report.findings)
        self._end_step(step, outcome, report.state, report.questions, actor, report.summary, now)
        result = result.model_copy(update={"next_step": self.current, "status": self.status})
        self._remember(result)
        return result

    # ---- a worker-run handler ---------------------------------------------

    def apply_handler(self, step_id: str, visit: int, done: HandlerOutcome, now: datetime) -> None:
        """A handler's result: it ends the step like a report would; a result the step
        cannot take (an outcome it does not have, undeclared state) fails the run."""
        step = self.step()
        if step is None or step.id != step_id or visit != self.visit() or self.finished:
            return  # a result for a step the run has left (cannot happen; kept harmless)
        problem = checks.outcome_problem(
            self.graph, self.values, step, done.outcome, done.state, done.questions
        )
        if problem is not None:
            self._fail(f"step {step.id!r}: its {step.handler.kind} handler {problem.message}", now)
            return
        outcome = self._reviewed(step, done.outcome, done.findings)
        self._end_step(step, outcome, done.state, done.questions, WORKER, done.summary, now)

    def apply_handler_failure(self, step_id: str, visit: int, reason: str, now: datetime) -> None:
        """The handler could not run to an outcome: the step ends ``fail`` (its edge, or
        ``_default``; with neither, the run fails with the handler's reason)."""
        step = self.step()
        if step is None or step.id != step_id or visit != self.visit() or self.finished:
            return
        found, _ = step.edge("fail")
        if not found:
            self._fail(f"step {step.id!r}: {reason}", now)
            return
        self._end_step(step, "fail", {}, [], WORKER, reason, now)

    # ---- answer -------------------------------------------------------------

    def check_answer(self, ans: GraphAnswer, run_key: str) -> PhasegateError | None:
        """Why a person's answers must be refused: nothing asked, a stale round, an
        answer off the menu, or not from someone who may answer (the one approval
        policy: a named person on the allowlist, signed where the deployment has keys)."""
        step = self.step()
        if self.status != "awaiting_input" or step is None:
            return SessionNotActive(f"nothing waits for answers: the run is {self.status}")
        if ans.step_id != step.id or ans.round != self.question_round:
            return StepSequenceViolation(
                f"the open questions are round {self.question_round} of step {step.id!r}",
                where="round",
                hint="read them with `phasegate graph show RUN` and answer that round",
            )
        if problem := checks.answers_problem(self.questions, ans.answers):
            return problem
        names = self.approvers or []
        return refusal(
            Deciders(
                keys=self.setup.approver_keys,
                unsigned_ok=self.setup.unsigned_answers,
                names=names,
                scope="graph run",
                gate_noun="question round",
                how=f"phasegate graph answer {run_key or 'RUN'} --as NAME",
            ),
            Decision(
                scope_id=run_key,
                gate=ans.round,
                approver=ans.approver,
                decision="approve",
                comment=ans.comment(),
                nonce=ans.nonce,
                signature=ans.signature,
                binding=self.answer_binding(),
            ),
            used_nonces=self.used_nonces,
        )

    def answer_binding(self) -> dict[str, str]:
        """What a signed answer binds besides the answers: the questions asked and the
        run's first run (so it answers nothing else)."""
        asked = "\n".join(q.model_dump_json() for q in self.questions)
        return {
            "evidence_sha256": hashlib.sha256(asked.encode()).hexdigest(),
            "first_run_id": self.first_run_id,
        }

    def apply_answer(self, ans: GraphAnswer, now: datetime) -> None:
        """Checked answers: the step runs again, fresh (a new visit), with them."""
        if ans.nonce:
            self.used_nonces = [*self.used_nonces, ans.nonce][-MAX_NONCES:]
        step = self.step()
        assert step is not None
        self.answers = dict(ans.answers)
        self._log(step.id, "answered", ans.approver, f"round {ans.round}", now, to=step.id)
        self.status = "running"
        self.questions = []
        self._enter(step.id, now)

    # ---- continue-as-new ------------------------------------------------------

    def carry(self) -> dict[str, Any]:
        return self.model_dump(mode="json") | {"steps_this_run": 0}

    @classmethod
    def from_carry(cls, carried: object) -> GraphState:
        state = cls.model_validate(carried)
        state.runs += 1
        return state

    # ---- internals ---------------------------------------------------------

    def _reviewed(self, step: StepDef, outcome: str, findings: list[Finding]) -> str:
        """A review step's outcome is its schedule's call on the findings: ``iterate``
        while a finding blocks at this iteration (they go back with the loop), else ``ok``."""
        if step.review is None or outcome not in ("ok", "iterate"):
            return outcome
        decided, self.findings = step.review.outcome(self.visit(), findings)
        return decided

    def _end_step(
        self,
        step: StepDef,
        outcome: str,
        values: dict[str, Any],
        questions: list[Question],
        by: str,
        summary: str,
        now: datetime,
    ) -> None:
        self.values.update(values)
        self.updated_at = now
        self.steps_this_run += 1
        if outcome == NEEDS_INPUT:
            self.status = "awaiting_input"
            self.question_round += 1
            self.questions = list(questions)
            self._log(step.id, outcome, by, summary, now, to=step.id)
            return
        self.answers = {}
        if outcome == "iterate":
            self.iterations[step.id] = self.iterations.get(step.id, 0) + 1
            cap = step.max_iterations or step.max_visits or DEFAULT_VISIT_CAP
            if self.iterations[step.id] > cap:
                self._log(step.id, outcome, by, summary, now)
                self._fail(f"step {step.id!r} iterated more than its cap of {cap}", now)
                return
        found, target = step.edge(outcome)
        self._log(step.id, outcome, by, summary, now, to=target)
        if not found:
            self._fail(
                f"step {step.id!r} ended {outcome!r}, and has no edge for it nor a _default",
                now,
            )
        elif target is None:
            self.status, self.outcome, self.current, self.rendered = (
                "completed",
                outcome,
                None,
                None,
            )
        else:
            self._enter(target, now)

    def _enter(self, step_id: str, now: datetime) -> None:
        step = self.graph.step(step_id)
        if step is None:
            self._fail(f"an edge leads to {step_id!r}, which is no step", now)
            return
        self.visits[step_id] = self.visits.get(step_id, 0) + 1
        cap = step.max_visits or DEFAULT_VISIT_CAP
        if self.visits[step_id] > cap:
            self._fail(f"step {step_id!r} was entered more than its cap of {cap} visits", now)
            return
        self.current, self.rendered = step_id, None

    def _fail(self, reason: str, now: datetime) -> None:
        self.status, self.failure, self.rendered, self.updated_at = "failed", reason, None, now

    def _log(
        self, step: str, outcome: str, by: str, summary: str, now: datetime, to: str | None = None
    ) -> None:
        self.path.append(
            PathEntry(
                step=step,
                visit=self.visits.get(step, 0),
                outcome=outcome,
                to=to,
                by=by,
                at=now,
                summary=summary[:300],
            )
        )
        self.path_total += 1
        del self.path[:-MAX_PATH]

    def _remember(self, result: ReportResult) -> None:
        if result.report_id:
            self.reports[result.report_id] = result
            while len(self.reports) > MAX_REPORTS:
                del self.reports[next(iter(self.reports))]
