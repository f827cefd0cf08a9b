"""Bounds on what a :class:`~phasegate.domain.session.SessionState` keeps and shows.

Every message a client sends is capped by its model (``domain.messages``), but
a session lives long: attempts, audit entries, remembered answers and
artifacts pile up, and Temporal refuses any payload over its blob limit (2 MB,
lower on phasegate's dev server) and any history over 50 MB. So:

- :func:`carry` hands state to the next run under :data:`CARRY_LIMIT_BYTES`,
  compacting in a fixed order until it fits (attempts to digests, old phase
  texts, remembered answers, logs, then the oldest artifacts' evidence, which
  stays recorded in the history of the run named by ``recorded_in_run``);
- :func:`bounded_artifacts` keeps query answers and the final result under
  :data:`VIEW_EVIDENCE_BYTES` of evidence, newest phases first; the rest show
  their digest and size (query ``artifact`` for one phase's evidence);
- the task list of a phase view is served a page at a time (:data:`TASKS_PAGE`).

Pure, like the rest of ``domain``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from phasegate.domain.session.messages import CheckpointResult, PhaseArtifact

if TYPE_CHECKING:
    from phasegate.domain.session.state import SessionState

__all__ = [
    "CARRY_LIMIT_BYTES",
    "MAX_REMEMBERED_SUBMISSIONS",
    "TASKS_PAGE",
    "VIEW_EVIDENCE_BYTES",
    "bounded_artifacts",
    "canonical",
    "carry",
    "compact_result",
    "elided",
    "evidence_digest",
]

MAX_REMEMBERED_SUBMISSIONS = 500
MAX_ATTEMPT_LOG = 500  # attempts of earlier phases (and overflow), compacted
MAX_CURRENT_ATTEMPTS = 200  # attempts of the current phase kept in state
MAX_NONCES = 5000  # used nonces carried (signatures bind session, phase and message)
MAX_APPROVALS = 500  # decisions carried when the state must shrink
MAX_SUPERSEDED = 50
MAX_RUN_CHAIN = 25
CARRY_LIMIT_BYTES = 1_200_000  # continue-as-new input, under the dev server's blob limit
VIEW_EVIDENCE_BYTES = 512 * 1024  # evidence in one query answer or result
TASKS_PAGE = 100
_AUDIT_HEAD = 20  # audit entries kept from the start when the audit is trimmed


def canonical(data: Any) -> bytes:
    """Data as canonical JSON (sorted keys, compact): what sizes and digests are of."""
    return json.dumps(data, separators=(",", ":"), sort_keys=True, default=str).encode()


def evidence_digest(evidence: Mapping[str, Any]) -> tuple[str, int]:
    """(sha256 hex, bytes) of evidence as canonical JSON."""
    raw = canonical(evidence)
    return hashlib.sha256(raw).hexdigest(), len(raw)


def elided(artifact: PhaseArtifact) -> PhaseArtifact:
    """The artifact without its evidence (digest and size kept)."""
    if artifact.evidence_elided:
        return artifact
    sha, size = artifact.evidence_sha256, artifact.evidence_bytes
    if sha is None or size is None:
        sha, size = evidence_digest(artifact.evidence)
    return artifact.model_copy(
        update={
            "evidence": {},
            "evidence_sha256": sha,
            "evidence_bytes": size,
            "evidence_elided": True,
        }
    )


def bounded_artifacts(
    artifacts: Mapping[str, PhaseArtifact], budget: int = VIEW_EVIDENCE_BYTES
) -> dict[str, PhaseArtifact]:
    """Artifacts with their evidence while it fits ``budget``, newest phase first."""
    out: dict[str, PhaseArtifact] = {}
    spent = 0
    for key in sorted(
        artifacts, key=lambda k: (artifacts[k].phase, artifacts[k].submitted_at), reverse=True
    ):
        artifact = artifacts[key]
        size = artifact.evidence_bytes or len(canonical(artifact.evidence))
        if spent + size <= budget:
            spent += size
            out[key] = artifact
        else:
            out[key] = elided(artifact)
    return {k: out[k] for k in artifacts}


def carry(state: SessionState, limit: int = CARRY_LIMIT_BYTES) -> dict[str, Any]:
    """The state as continue-as-new input, compacted step by step until it fits ``limit``."""
    data = state.model_dump(mode="json")
    for step in _COMPACTION:
        if len(canonical(data)) <= limit:
            return data
        step(state)
        data = state.model_dump(mode="json")
    return data


# ---- compaction steps, mildest first (each asks the owners to shrink) -------------


def _compact_attempts(state: SessionState) -> None:
    state.attempts.compact()
    state.phases.compact_superseded()


def _strip_old_phases(state: SessionState) -> None:
    state.phases.strip_old_phases(keep=3)


def _compact_remembered(state: SessionState) -> None:
    state.answers.compact(keep=100, problems=3)


def _trim_logs(state: SessionState) -> None:
    state.attempts.trim(50)
    state.book.trim()
    if len(state.audit) > 200:
        del state.audit[_AUDIT_HEAD : len(state.audit) - 200 + _AUDIT_HEAD]


def _elide_artifacts(state: SessionState) -> None:
    """The oldest completed phases' evidence first, until the state fits (sizes are
    adjusted per artifact: the whole state is measured once)."""
    size = len(canonical(state.model_dump(mode="json")))
    artifacts = state.phases.artifacts
    for index in sorted(artifacts):
        if size <= CARRY_LIMIT_BYTES:
            return
        before = len(canonical(artifacts[index].model_dump(mode="json")))
        state.phases.elide_artifact(index)
        size -= before - len(canonical(artifacts[index].model_dump(mode="json")))


def _compact_tasks(state: SessionState) -> None:
    """Completed tasks' evidence to digests (it stays in the history of the run that
    took the completion), shorter check excerpts and step outputs."""
    state.tasks.compact(CARRY_LIMIT_BYTES // 4)


def _strip_task_sources(state: SessionState) -> None:
    """Last resort for huge imported boards: the task files' own objects (fields
    phasegate does not model) are dropped; the files keep what phasegate models."""
    state.tasks.drop_raw()


def _clip_task_text(state: SessionState) -> None:
    state.tasks.clip_text()


def _strip_all_phases(state: SessionState) -> None:
    state.phases.strip_old_phases(keep=0)
    state.answers.clear()
    state.attempts.trim(0)


_COMPACTION: tuple[Callable[[SessionState], None], ...] = (
    _compact_attempts,
    _strip_old_phases,
    _compact_remembered,
    _trim_logs,
    _compact_tasks,
    _elide_artifacts,
    _strip_all_phases,
    _strip_task_sources,
    _clip_task_text,
)


def compact_result(result: CheckpointResult, problems: int) -> CheckpointResult:
    """A remembered answer: no next-phase view, few problems, short verify excerpts."""
    return result.model_copy(
        update={
            "next_phase": None,
            "problems": result.problems[:problems],
            "warnings": result.warnings[:problems],
            "verify": [v.model_copy(update={"excerpt": v.excerpt[-300:]}) for v in result.verify],
            "example_evidence": None,
        }
    )
