"""The sealed prefetch: a session's next phase (and, where its plan says, the phases
after it that fit the request's ``ahead_bytes``) rendered for its history to hold sealed.

Registered on the session worker. Its result, a
:class:`~phasegate.domain.session.sealed.SealedPhase`, is encrypted by the worker's
data converter (``phasegate.sealing``) before it reaches the server. A render error is
returned inside the sealed result, not raised: an activity failure's message is stored
in clear, and a template error can quote the phase it could not render. The workflow
treats any prefetch without a phase as a cache miss and renders the phase at the
advance, where an error is reported to whoever advances.
"""

from __future__ import annotations

import logging

from temporalio import activity
from temporalio.exceptions import ApplicationError

from phasegate.activities.definitions import DefinitionActivities
from phasegate.domain.session.plan import RenderPhaseRequest
from phasegate.domain.session.sealed import SealedPhase

__all__ = ["SealedPrefetch"]

_log = logging.getLogger("phasegate.sealing")


class SealedPrefetch:
    """The ``prefetch_sealed_phase`` activity over a worker's definitions."""

    def __init__(self, definitions: DefinitionActivities) -> None:
        self._definitions = definitions

    @activity.defn(name="prefetch_sealed_phase")
    def prefetch_phase(self, req: RenderPhaseRequest) -> SealedPhase:
        """Phase ``req.index`` for the calling session, to be sealed; never raises."""
        info = activity.info()
        sealed = SealedPhase(
            namespace=info.namespace, workflow_id=info.workflow_id or "", index=req.index
        )
        try:
            if req.ahead_bytes:
                phases = self._definitions.phases_ahead(req)
                sealed.phase, sealed.ahead = phases[0], phases[1:]
            else:
                sealed.phase = self._definitions.render_phase(req)
        except ApplicationError as exc:  # a phasegate error, as render_phase reports it
            sealed.problem = exc.message
        except Exception as exc:  # noqa: BLE001 - a fault: logged here, a miss there
            _log.exception("prefetch of phase %d failed", req.index)
            sealed.problem = f"{type(exc).__name__} while rendering"
        return sealed
