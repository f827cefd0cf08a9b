"""The ``workflow.patched`` changes of ``GatedSession``, and the engine level that retires
them for new sessions.

Each patch a run reaches for the first time records a marker and, through the SDK's core,
upserts the ``TemporalChangeVersion`` search attribute: a visibility write the server
makes for every session, at start and again in every run after continue-as-new. A
session whose load (a local activity of its own worker, recorded in its history) declared
``SessionPlan.engine`` >= 1 (kept in ``SessionState.engine``) takes the paths of
:data:`ENGINE_1` without asking; sessions loaded by older code (engine 0) ask, as their
histories expect. A patch added later is asked in every session until an engine level
takes it in.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from phasegate.domain.session.state import SessionState

__all__ = [
    "CHECKS_HERE",
    "ENGINE_1",
    "FIRST_PREFETCH_HERE",
    "LOAD_HERE",
    "RENDER_WITH_CHECKS",
    "RENDER_WITH_CHECKS_UNPREFETCHED",
    "SIGNAL_RETIRED",
    "SIGNS_EVIDENCE",
    "patched",
]

SIGNAL_RETIRED = "checkpoint-signal-retired"
# Reading checks as a local activity of the session's worker (activities/_verify_local).
CHECKS_HERE = "verify-reads-on-session-worker"
# ... which also render the phase a passing checkpoint enters (no prefetch of it): v1 in
# every session, v2 only where prefetch is off (a prefetch keeps the render and its big
# payload off the advance's path, which a render in the checks' activity cannot).
RENDER_WITH_CHECKS = "render-with-reading-checks"
RENDER_WITH_CHECKS_UNPREFETCHED = "render-with-reading-checks-v2"
# The definition loads as a local activity of the session's worker (asked in every
# session: the engine level is known only once it has loaded).
LOAD_HERE = "load-on-session-worker"
# ... and so does a run's first prefetch (an advance's stays on the task queue: a local
# activity would hold back the workflow task that answers the agent).
FIRST_PREFETCH_HERE = "first-prefetch-on-session-worker"
# Approvals sign the evidence they approve (decided with the loaded plan).
SIGNS_EVIDENCE = "approvals-sign-evidence"

ENGINE_1 = frozenset(
    {
        SIGNAL_RETIRED,
        CHECKS_HERE,
        RENDER_WITH_CHECKS_UNPREFETCHED,
        FIRST_PREFETCH_HERE,
        SIGNS_EVIDENCE,
    }
)


def patched(state: SessionState | None, patch: str) -> bool:
    """``workflow.patched(patch)``, answered without a marker where the session's engine
    level includes ``patch``."""
    if state is not None and state.engine >= 1 and patch in ENGINE_1:
        return True
    return workflow.patched(patch)
