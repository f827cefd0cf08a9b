"""The prefetched next phase as a sealed deployment's history holds it.

Where the worker holds a seal key ring (``PHASEGATE_SEAL_KEYS``), a session prefetches
its next phase as a :class:`SealedPhase`: ``phasegate.sealing``'s payload converter
encrypts it (AES-256-GCM) before it reaches the server, and only a converter holding
the key opens it again. Two properties make the sealing safe whatever converter
touches the value:

- ``phase`` is never serialized: ``model_dump``/JSON of a ``SealedPhase`` leaves it
  out, so Temporal's stock converters (and phasegate's without a key) write no phase
  text anywhere; only the sealing converter, which encrypts it, reads it out;
- a ``SealedPhase`` is *opened* only when the sealing converter decrypted it
  (``_opened_with``, a private attribute no JSON can set). One decoded from anything
  else — a forged answer to the prefetch activity, a payload that does not
  authenticate — holds no phase the session would take (:meth:`SealedPhase.opened_for`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from phasegate.domain.session.messages import PhaseDefinition

__all__ = ["SealedPhase", "in_order"]


def in_order(phases: list[PhaseDefinition], index: int) -> list[PhaseDefinition]:
    """The leading run of ``phases`` numbered ``index``, ``index + 1``, ...: a window
    is taken only up to its first phase out of order (never skipping one)."""
    run: list[PhaseDefinition] = []
    for phase in phases:
        if phase.index != index + len(run):
            break
        run.append(phase)
    return run


class SealedPhase(BaseModel):
    """Result of the sealed prefetch activity: phase ``index`` of one session, or why not."""

    model_config = ConfigDict(extra="ignore")

    namespace: str = ""
    workflow_id: str = ""
    index: int = -1
    phase: PhaseDefinition | None = Field(
        None, exclude=True, description="Never serialized: only sealed (phasegate.sealing)."
    )
    ahead: list[PhaseDefinition] = Field(
        default_factory=list,
        exclude=True,
        description="The phases after ``phase``, in order (SessionPlan.ahead_bytes); sealed "
        "like it.",
    )
    problem: str = Field(
        "", description="Why there is no phase (a render error), or why it was not opened."
    )
    _opened_with: str | None = PrivateAttr(None)

    @property
    def opened_with(self) -> str | None:
        """The id of the key that opened it (None: not decrypted by a key holder)."""
        return self._opened_with

    def mark_opened(self, kid: str) -> SealedPhase:
        """Set by the sealing converter once the payload authenticated under key ``kid``."""
        self._opened_with = kid
        return self

    def opened_for(self, workflow_id: str, index: int) -> PhaseDefinition | None:
        """The phase, if it was sealed by a key holder for phase ``index`` of session
        ``workflow_id``; else None (the session renders the phase itself). The namespace is
        not compared: the SDK's replayer runs histories under a namespace of its own."""
        if self._opened_with is None or self.phase is None:
            return None
        if self.workflow_id != workflow_id:
            return None  # sealed for another session: a replayed payload
        if self.index != index or self.phase.index != index:
            return None  # another phase of this session
        return self.phase

    def opened_run(self, workflow_id: str, index: int) -> list[PhaseDefinition]:
        """Phase ``index`` and the phases after it, as :meth:`opened_for` takes the first
        (empty where it takes nothing); the run stops at a phase out of order."""
        first = self.opened_for(workflow_id, index)
        return [] if first is None else in_order([first, *self.ahead], index)

    def refusal(self) -> str:
        """Why :meth:`opened_for` gave nothing (for the worker's log)."""
        if self._opened_with is None:
            return self.problem or "not sealed by a key holder"
        return self.problem or "sealed for another session or phase"
