"""``run_checks_here``: a gate's reading checks, run as a local activity by the session's
own worker, without the round trip through the verify task queue.

Checks of the :data:`~phasegate.domain.verify.READ_KINDS` kinds run no command of the
workspace: ``file_exists``, ``files_exist``, ``glob_count``, ``json_value``,
``file_contains`` and ``git_changed`` are a few ``stat`` calls, reads and git queries.
Sending them to ``<task_queue>-verify`` as a regular activity costs an advance two
extra server round trips (schedule, then complete, each a workflow task) for work of
a millisecond. Where the session worker sees the workspace as the verify worker does,
the workflow runs them here instead: ``phasegate worker`` running both workers in one
process (same OS user, same filesystem, same environment), the default deployment.

A worker that does not run the verify worker beside it (``--no-verify``, the sealed
deployment's session worker, which holds keys and the library and must not read the
agent's workspace) answers ``None``: the workflow then sends the checks to the verify
queue as before, and stops asking this run. Commands (``command``, ``session_command``)
never come here: they keep the verify queue, its concurrency limit and its isolation.

``check_and_render_here`` does the same and, when every check passed and the workflow
asks for it (the checkpoint then advances at once), renders the phase the session enters,
in the same local activity. The workflow asks in sessions without prefetch, which would
otherwise render that phase in a second local activity at the advance: one local activity
per advance, and a future phase reaches history only once the session enters it. (With
prefetch on, the prefetch keeps the render and its payload off the advance's path, which
measured faster per advance; the merged form does more advances per second at 200
sessions: no prefetch activity and no second workflow task per advance.)

A local activity is scheduled only by the workflow task its own worker runs, so no
foreign workflow can make a worker run it (TEMPORAL_NOTES.md); its input is the same
``VerifyRequest`` the verify activity takes, checked the same way.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio import activity

from phasegate.domain.errors import VerifyInvalid
from phasegate.domain.session.messages import PhaseDefinition
from phasegate.domain.session.plan import ChecksHereRequest, ChecksHereResult, RenderPhaseRequest
from phasegate.domain.verify import VerifyReport, VerifyRequest, reads_only
from phasegate.temporal import application_error

__all__ = ["LocalChecks"]


class LocalChecks:
    """The session worker's runner of reading checks.

    Args:
        run: The ``run_verify_checks`` of the verify worker in this process (its limits,
            its command list, its metrics); ``None`` where this worker does not see the
            workspace as a verify worker would, so every request is answered ``None``.
        render: The main worker's ``render_phase``, for ``check_and_render_here``.
    """

    def __init__(
        self,
        run: Callable[[VerifyRequest], VerifyReport] | None,
        render: Callable[[RenderPhaseRequest], PhaseDefinition] | None = None,
    ) -> None:
        self._run = run
        self._render = render

    @property
    def enabled(self) -> bool:
        """Whether this worker runs reading checks itself."""
        return self._run is not None

    @activity.defn(name="run_checks_here")
    def run_checks_here(self, req: VerifyRequest) -> VerifyReport | None:
        """Run ``req``'s checks here, or answer ``None`` (send them to the verify queue).

        Returns:
            The report, as ``run_verify_checks`` would give it; ``None`` when this worker
            runs no reading checks.

        Raises:
            ApplicationError: Non-retryable ``verify_invalid``: a check in ``req`` runs a
                command (never sent here by phasegate's workflow), or the workspace is
                not a directory.
        """
        if self._run is None:
            return None
        if not reads_only(req.checks):
            raise application_error(
                VerifyInvalid(
                    "only checks that read the workspace run on the session worker",
                    where="checks",
                    hint="commands run on the verify task queue",
                )
            )
        return self._run(req)

    @activity.defn(name="check_and_render_here")
    def check_and_render_here(self, req: ChecksHereRequest) -> ChecksHereResult | None:
        """:meth:`run_checks_here`, then, when every check passed, ``req.render``.

        Returns:
            The report and the rendered phase (``None`` when a check failed, none was
            asked for, or it could not be rendered: the workflow renders it again, which
            reports why); ``None`` when this worker runs no reading checks.
        """
        report = self.run_checks_here(req.checks)
        if report is None:
            return None
        next_phase = None
        if report.passed and req.render is not None and self._render is not None:
            try:
                next_phase = self._render(req.render)
            except Exception:  # noqa: BLE001 - rendered again at the advance, errors and all
                next_phase = None
        return ChecksHereResult(report=report, next_phase=next_phase)
