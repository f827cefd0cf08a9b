"""The phasegate workers: every workflow and activity, on two task queues.

- the **main** worker polls ``settings.task_queue``: the ``GatedSession`` workflow and
  the definition, render, retrieval and webhook activities;
- the **verify** worker polls ``<task_queue>-verify``
  (:func:`~phasegate.domain.settings.verify_task_queue`): only ``run_verify_checks``,
  at most ``settings.verify_concurrency`` at once, in its own threads. A backlog of
  test runs waits on the server (where no heartbeat timeout runs) instead of inside a
  worker, and never delays an advance, a render or a query.

``phasegate worker`` (or ``python -m phasegate.worker``) runs both in one process;
``--verify-only`` and ``--no-verify`` split them, e.g. to run the checks as another OS
user or in another container. It connects to ``TEMPORAL_ADDRESS`` (default
localhost:7233) with the standard Temporal client settings, serves Prometheus metrics
with ``--metrics-port`` (see :mod:`phasegate.activities.metrics`), and stops cleanly on
SIGINT/SIGTERM.

With both in one process, a gate whose checks only read the workspace (no command:
``domain.verify.READ_KINDS``) runs them as a local activity of the main worker
(``run_checks_here``), without the verify queue's round trip; a main worker alone
(``--no-verify``, the sealed deployment) leaves every check to the verify queue.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
from temporalio.client import Client
from temporalio.worker import (
    PollerBehaviorAutoscaling,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from phasegate.activities._verify_local import LocalChecks
from phasegate.activities.agent_prompts import AgentPrompts
from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.developer import DeveloperActivities
from phasegate.activities.metrics import MeteredVerify
from phasegate.activities.model_providers import ModelProviders
from phasegate.activities.notify import notify_webhook
from phasegate.activities.orchestration import OrchestrationActivities
from phasegate.activities.provenance import CallerCheck, ProvenanceActivities
from phasegate.activities.rag import RagActivities
from phasegate.activities.sealed_prefetch import SealedPrefetch
from phasegate.activities.step_handlers import StepHandlerActivities
from phasegate.activities.task_files import TaskFileActivities
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.errors import PhasegateError
from phasegate.domain.rag import RetrievalQuery, RetrievedChunk
from phasegate.domain.settings import Settings, verify_task_queue
from phasegate.domain.signing import ApproverKey
from phasegate.domain.trust import reserved_actor
from phasegate.domain.verify import VerifyReport, VerifyRequest
from phasegate.sealing import ring_of, sealing_client
from phasegate.temporal import connect, load_settings, metrics_runtime, shutdown_tracing
from phasegate.workflows import GatedSession, Orchestration, StepGraph

__all__ = ["WORKFLOWS", "PhasegateWorkers", "build_worker", "main", "run_worker"]

MAIN_ACTIVITY_THREADS = 16
"""Threads (and so concurrent activities) of ``phasegate worker``'s main worker."""

WORKFLOWS: Sequence[type] = (GatedSession, Orchestration, StepGraph)


class _LazyRetriever:
    """The RAG activities' index used directly by the render activity (same process)."""

    def __init__(self, rag: RagActivities) -> None:
        self._rag = rag

    def search(self, q: RetrievalQuery) -> list[RetrievedChunk]:
        return self._rag.retrieve_context(q)


def load_approver_keys(
    value: str | None, variable: str = "PHASEGATE_APPROVER_KEYS"
) -> list[ApproverKey]:
    """Signed approvers (or operators) named by the deployment.

    ``value`` is JSON (a list of ``{name, public_key}`` or one such object, as
    ``phasegate keys export NAME`` prints) or the path of a file holding either.
    """
    if not value:
        return []
    text, where = value, variable
    if not value.lstrip().startswith(("[", "{")):
        where = f"{variable}={value}"
        try:
            text = Path(value).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise PhasegateError(
                f"cannot read the key file: {getattr(exc, 'strerror', None) or exc}",
                where=where,
                hint=f"set {variable} to a JSON list of {{name, public_key}}, one exported "
                "object (phasegate keys export NAME), or the path of a file holding either",
            ) from None
    try:
        data = json.loads(text)
        items = [data] if isinstance(data, dict) else data
        if not isinstance(items, list):
            raise TypeError(f"expected a list or an object, got {type(data).__name__}")
        keys = [ApproverKey.model_validate(item) for item in items]
    except (ValueError, TypeError) as exc:
        raise PhasegateError(
            f"cannot load keys: {str(exc).splitlines()[0]}",
            where=where,
            hint="a JSON list of {name, public_key} or one such object "
            "(phasegate keys export NAME prints one)",
        ) from None
    for key in keys:  # a key signs as its name: never one of phasegate's own actors
        if reason := reserved_actor(key.name):
            raise PhasegateError(
                reason, where=where, hint="rename the key (phasegate keys new NAME) and export it"
            )
    return keys


class PhasegateWorkers:
    """The Temporal workers of one process, started and drained together.

    ``async with build_worker(...) as workers:`` runs them until the block ends;
    ``workers.task_queues`` names the queues they poll. Executors the object made
    (the verify worker's threads) are shut down on exit.
    """

    def __init__(
        self, workers: list[Worker], owned: list[concurrent.futures.Executor] | None = None
    ) -> None:
        if not workers:
            raise PhasegateError(
                "no worker to run",
                where="phasegate worker --verify-only / --no-verify",
                hint="pass at most one of --verify-only and --no-verify",
            )
        self.workers = workers
        self._owned = list(owned or [])
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def task_queues(self) -> list[str]:
        """The task queues polled, main first."""
        return [w.task_queue for w in self.workers]

    async def __aenter__(self) -> Self:
        stack = contextlib.AsyncExitStack()
        try:
            for executor in self._owned:
                stack.callback(executor.shutdown, wait=True, cancel_futures=True)
            for worker in self.workers:
                await stack.enter_async_context(worker)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, *exc: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()


def build_worker(
    client: Client,
    settings: Settings,
    *,
    executor: concurrent.futures.Executor,
    main: bool = True,
    verify: bool = True,
) -> PhasegateWorkers:
    """phasegate's workers for ``settings``: the main one and the verify one (see the
    module docstring); ``main=False`` or ``verify=False`` leaves one out.

    Args:
        client: Connected with :func:`phasegate.temporal.connect` (its runtime carries
            the metrics, its interceptors the tracing).
        settings: Task queue, library, keys, ``verify_concurrency``.
        executor: Runs the main worker's activities. A ``ThreadPoolExecutor``'s size
            also caps how many it accepts at once, so none waits inside the worker.
        main: Run the workflows and the definition/render/retrieval/notify activities.
        verify: Run the verify checks, on their own queue and threads.
    """
    workers: list[Worker] = []
    owned: list[concurrent.futures.Executor] = []
    checks = MeteredVerify(VerifyActivities(allowed_commands=settings.command_allowlist()))
    if main:
        # With the verify worker in this process, the session worker sees the workspace
        # as it does: checks that only read run here, as a local activity (_verify_local).
        here = checks.run_verify_checks if verify else None
        workers.append(_main_worker(client, settings, executor, here))
    if verify:
        threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=settings.verify_concurrency, thread_name_prefix="phasegate-verify"
        )
        owned.append(threads)
        workers.append(
            Worker(
                client,
                task_queue=verify_task_queue(settings.task_queue),
                # The workspace's other writer: the task files (task state's projection).
                activities=[
                    checks.run_verify_checks,
                    *TaskFileActivities(target_roots=settings.target_roots).activities,
                ],
                activity_executor=threads,
                # One slot per thread: a check the worker accepts starts (and heartbeats)
                # at once; the rest wait on the server, where only schedule-to-start runs.
                max_concurrent_activities=settings.verify_concurrency,
                interceptors=[caller_check(client, settings)],
            )
        )
    return PhasegateWorkers(workers, owned)


WORKFLOW_TASKS_AT_ONCE = 64
"""Workflow tasks the main worker holds at once (each gets a thread while it runs). At
32, a burst of new sessions kept ≈ 21 in the worker and got ready at 27–33/s; at 64,
37.9/s (each task 0.55 s p50 in the worker, 1.0 s p95); at 96, 39.5–40.8/s but 0.85 s
p50 (``bench/scale_sessions.py --sessions 3000``): the GIL, not the slots, is the limit
past 64, and longer activations near the 2 s deadlock detector are the risk."""


def workflow_runner(settings: Settings) -> WorkflowRunner:
    """How this worker runs workflow code: directly (the default), or in the SDK's sandbox
    (``PHASEGATE_WORKFLOW_SANDBOX=1``).

    The sandbox re-imports each workflow module for every workflow instance and re-enters
    its import and call restrictions for every payload of every activation: ~30% of a raw
    update's round trip here and most of a new instance's cost (``bench/``). It guards only
    the workflow modules themselves: ``domain``, where every decision is made, is passed
    through and unguarded anyway. What guards determinism is the suite: it replays every
    recorded history in the sandbox and walks a session, an orchestration and a step graph
    on a sandboxed worker (``tests/test_sandbox.py``), so code that would break in it (a
    clock, a random number, I/O in a workflow) fails there.
    """
    return SandboxedWorkflowRunner() if settings.workflow_sandbox else UnsandboxedWorkflowRunner()


def caller_check(client: Client, settings: Settings) -> CallerCheck:
    """The interceptor that runs activities only for phasegate's own workflow runs."""
    # @workflow.defn without a name: each workflow's type is its class name.
    return CallerCheck(client, [w.__name__ for w in WORKFLOWS], settings.task_queue)


def _main_worker(
    client: Client,
    settings: Settings,
    executor: concurrent.futures.Executor,
    checks_here: Callable[[VerifyRequest], VerifyReport] | None,
) -> Worker:
    # With a seal key ring (PHASEGATE_SEAL_KEYS) sessions seal their prefetch (sealing.py).
    client = sealing_client(client, settings.seal_keys_file)
    rag = RagActivities(settings.rag_db, settings.library_paths, settings.standards_dirs)
    definitions = DefinitionActivities(
        settings.library_paths,
        settings.home,
        retriever=_LazyRetriever(rag),
        context_tokens=settings.context_tokens,
        context_k=settings.context_k,
        approver_keys=load_approver_keys(settings.approver_keys_file),
        allow_unsigned_approvals=settings.allow_unsigned_approvals,
        operator_keys=load_approver_keys(settings.operator_keys_file, "PHASEGATE_OPERATOR_KEYS"),
        allow_unsigned_controls=settings.unsigned_controls,
        spec_roots=settings.spec_roots,
        target_roots=settings.target_roots,
        prefetch=settings.prefetch,
        sealed_prefetch=ring_of(client.data_converter) is not None,
        prefetch_ahead_bytes=settings.prefetch_ahead_bytes,
        test_command=settings.test_command,
        allowed_commands=settings.command_allowlist(),
    )
    # Reading checks (and the phase they let the session enter) on this worker, when it
    # runs them: activities/_verify_local.py.
    here = LocalChecks(checks_here, definitions.render_phase)
    # This worker's own prompts and model providers (two workers in a process differ).
    models = ModelProviders.from_settings(settings)
    prompts = AgentPrompts(
        settings.library_paths,
        retriever=_LazyRetriever(rag),
        context_tokens=settings.context_tokens,
        context_k=settings.context_k,
    )
    orchestration = OrchestrationActivities(
        default_models={str(agent): model for agent, model in settings.models.items()},
        check_model=models.check,
        approver_keys=load_approver_keys(settings.approver_keys_file),
        allow_unsigned_approvals=settings.allow_unsigned_approvals,
        target_roots=settings.target_roots,
        # Where a coding agent the worker runs reaches this cluster (the client's own).
        temporal_address=client.service_client.config.target_host,
        library_paths=settings.library_paths,
        developer_commands=settings.developer_commands,
    )
    # Temporal's own consistency check reads the same attribute.
    threads = getattr(executor, "_max_workers", None)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=list(WORKFLOWS),
        activities=[
            definitions.load_session,
            definitions.render_phase,
            definitions.render_phases,
            SealedPrefetch(definitions).prefetch_phase,
            rag.retrieve_context,
            notify_webhook,
            orchestration.orchestration_setup,
            orchestration.verify_plan,
            orchestration.store_output,
            prompts.render_agent_prompt,
            # write_dev_spec, run_coding_agent: the worker's own coding agents, target roots
            *DeveloperActivities.from_settings(
                settings, temporal_address=client.service_client.config.target_host
            ).activities,
            ProvenanceActivities(client, settings.task_queue).check_carry,
            here.run_checks_here,
            here.check_and_render_here,
            *_graph_activities(settings, models),
        ],
        activity_executor=executor,
        max_concurrent_activities=threads if isinstance(threads, int) else None,
        # Local activities (the definition's load, reading checks) share those threads:
        # at most as many at once as there are (the SDK's default is 100).
        max_concurrent_local_activities=threads if isinstance(threads, int) else None,
        # Registers the agents' model-request activities (Orchestration.__pydantic_ai_agents__);
        # the model ids in them resolve with this worker's providers, and the agents'
        # prompts render there with this worker's prompts.
        plugins=[PydanticAIPlugin(), models.plugin(), prompts.plugin()],
        interceptors=[caller_check(client, settings)],
        workflow_runner=workflow_runner(settings),
        # Pollers follow the backlog (a fixed 5 left one on the non-sticky queue, where
        # every new session's first task waits). Workflow tasks in hand at once are
        # capped: they run one at a time under the GIL anyway, and the SDK's default (a
        # thread each, up to 500) let a burst of new sessions starve one activation past
        # the 2 s deadlock detector, failing its workflow task.
        workflow_task_poller_behavior=PollerBehaviorAutoscaling(),
        activity_task_poller_behavior=PollerBehaviorAutoscaling(),
        max_concurrent_workflow_tasks=WORKFLOW_TASKS_AT_ONCE,
    )


def _graph_activities(settings: Settings, models: ModelProviders) -> list[Any]:
    """A step graph run's activities: its handlers, as far as this worker allows them."""
    handlers = StepHandlerActivities(
        function_modules=settings.graph_function_modules,
        approver_keys=load_approver_keys(settings.approver_keys_file),
        allow_unsigned_answers=settings.allow_unsigned_approvals,
        default_models={str(agent): model for agent, model in settings.models.items()},
        check_model=models.check,
        library_paths=settings.library_paths,
    )
    return [handlers.prepare, handlers.render_step, handlers.run_function]


async def run_worker(
    settings: Settings | None = None,
    *,
    main: bool = True,
    verify: bool = True,
    metrics_host: str = "0.0.0.0",
) -> None:
    """Connect, run until SIGINT/SIGTERM, then drain and shut down.

    With ``settings.metrics_port``, Prometheus metrics of the Temporal runtime and
    phasegate's counters are served on ``http://metrics_host:port/metrics``.
    """
    settings = settings or load_settings()
    runtime = None
    if settings.metrics_port is not None:
        runtime = metrics_runtime(settings.metrics_port, host=metrics_host)
    client = await connect(settings, runtime=runtime)
    try:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        with concurrent.futures.ThreadPoolExecutor(max_workers=MAIN_ACTIVITY_THREADS) as executor:
            workers = build_worker(client, settings, executor=executor, main=main, verify=verify)
            async with workers:
                _announce(settings, workers, metrics_host)
                await stop.wait()
            print("phasegate worker: stopped", flush=True)
    finally:
        shutdown_tracing()  # flush spans: main() leaves with os._exit


def _announce(settings: Settings, workers: PhasegateWorkers, metrics_host: str) -> None:
    """Log and print what the process serves; the queue line last (scripts wait for it)."""
    verify_queue = verify_task_queue(settings.task_queue)
    roles = [
        f"{q!r} (verify checks, {settings.verify_concurrency} at once)"
        if q == verify_queue
        else f"{q!r} (sessions)"
        for q in workers.task_queues
    ]
    logging.getLogger("phasegate").info(
        "worker on %s, task queues %s, library %s",
        settings.temporal_address,
        ", ".join(workers.task_queues),
        ", ".join(settings.library_paths),
    )
    if settings.metrics_port is not None:
        url = f"http://{metrics_host}:{settings.metrics_port}/metrics"
        print(f"phasegate worker: metrics on {url}", flush=True)
    print(
        f"phasegate worker: task queue {' and '.join(roles)} on "
        f"{settings.temporal_address} (Ctrl-C to stop)",
        flush=True,
    )


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run_worker())
    # The worker has drained and shut down. Skip interpreter finalisation, which the
    # Temporal core's native threads can abort ("PyGILState_Release ... must be current",
    # temporalio/sdk-python#300); nothing is left to clean up.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
