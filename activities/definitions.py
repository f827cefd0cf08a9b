"""Activities that turn a library definition (and a spec) into rendered phases.

``load_session`` runs once at session start: it finds the workflow, snapshots
the spec (dynamic workflows) and renders phase 0. ``render_phase`` renders one
later phase from the definition reference; the workflow runs it as a local
activity so advancing costs no extra server round trip.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from temporalio import activity

from phasegate.activities._git_head import git_head
from phasegate.activities._phase_context import attach_context
from phasegate.activities._phase_render import (
    render_static_phase,
    session_context,
    task_context,
)
from phasegate.activities._session_commands import find_commands, workflow_uses_commands
from phasegate.activities._spec_phases import (
    PHASE_LIMIT,
    check_phase_size,
    dynamic_context,
    dynamic_gate,
)
from phasegate.activities._task_folder_name import task_folder_for
from phasegate.activities.library import (
    WorkflowDir,
    example_evidence,
    find_workflow,
    load_gate_file,
    static_phase_dir,
    tree_stamp,
)
from phasegate.activities.rag import Retriever
from phasegate.activities.snapshots import SnapshotStore
from phasegate.activities.task_folders import read_source
from phasegate.activities.tasks_md import SPEC_LIMIT
from phasegate.activities.templates import Renderer
from phasegate.domain.commands import SessionCommands, bind_gate
from phasegate.domain.errors import DefinitionError, PhasegateError, SessionError
from phasegate.domain.limits import AHEAD_BYTES, MAX_PHASES_AHEAD
from phasegate.domain.session.messages import DefinitionRef, PhaseDefinition, RenderedTask
from phasegate.domain.session.plan import (
    SESSION_ENGINE,
    LoadSessionRequest,
    PhasesAhead,
    RenderPhaseRequest,
    SessionPlan,
)
from phasegate.domain.signing import ApproverKey
from phasegate.domain.spec import ParsedSpec
from phasegate.domain.tasks.from_spec import known_through, spec_task
from phasegate.domain.trust import narrowed_to_nobody, session_keys
from phasegate.temporal import application_error

_TARGET_HINT = (
    "pass TARGET (MCP: target) as your project's folder, inside the worker's "
    "PHASEGATE_TARGET_ROOTS when it sets any"
)
_WARM_DELAY_SECONDS = 0.05
_STAMP_SECONDS = 1.0

__all__ = ["DefinitionActivities", "example_evidence", "render_static_phase"]


class DefinitionActivities:
    """Loads and renders workflow definitions from ``library_paths``.

    Args:
        library_paths: Library folders searched in order.
        home: phasegate's data folder (spec snapshots live under it).
        spec_roots: Folders a spec may be read from besides the session's target.
        max_spec_bytes: Largest tasks.md read.
        max_phase_bytes: Largest rendered phase (JSON) served; a larger one is refused
            with a ``DefinitionError`` that says to split it.
        test_command: The deployment's test command (``PHASEGATE_TEST_COMMAND``).
        allowed_commands: The deployment's allowed commands (argv prefixes); a session
            whose commands are not all on it is refused at start.
    """

    def __init__(
        self,
        library_paths: list[str],
        home: str,
        *,
        retriever: Retriever | None = None,
        context_tokens: int = 1200,
        context_k: int = 5,
        approver_keys: list[ApproverKey] | None = None,
        allow_unsigned_approvals: bool = False,
        operator_keys: list[ApproverKey] | None = None,
        allow_unsigned_controls: bool | None = None,
        prefetch: bool = True,
        sealed_prefetch: bool = False,
        prefetch_ahead_bytes: int | None = None,
        target_roots: list[str] | None = None,
        spec_roots: list[str] | None = None,
        max_spec_bytes: int = SPEC_LIMIT,
        max_phase_bytes: int = PHASE_LIMIT,
        test_command: str | None = None,
        allowed_commands: list[list[str]] | None = None,
    ) -> None:
        self.test_command = test_command
        self.allowed_commands = allowed_commands
        self.spec_roots = list(spec_roots or [])
        self.max_phase_bytes = max_phase_bytes
        self.allow_unsigned_approvals = allow_unsigned_approvals
        self.allow_unsigned_controls = (
            allow_unsigned_approvals if allow_unsigned_controls is None else allow_unsigned_controls
        )
        self.deployment_keys = list(approver_keys or [])
        self.operator_keys = list(operator_keys or [])
        self.prefetch = prefetch
        self.sealed_prefetch = sealed_prefetch  # the worker's client holds a seal key ring
        # Phases past the next go into history only sealed, unless the deployment says so.
        default_ahead = AHEAD_BYTES if sealed_prefetch else 0
        self.ahead_bytes = default_ahead if prefetch_ahead_bytes is None else prefetch_ahead_bytes
        self.target_roots = list(target_roots or [])
        self.retriever = retriever
        self.context_tokens = context_tokens
        self.context_k = context_k
        self.library_paths = list(library_paths)
        self._rendered: dict[tuple[str, int], tuple[tuple[int, int], PhaseDefinition]] = {}
        self._cache_lock = threading.Lock()
        self._stamps: dict[Path, tuple[float, tuple[int, int]]] = {}
        # Rendered phase (by identity: build_phase serves cached objects) -> with context.
        self._with_context: dict[tuple[str, int], tuple[PhaseDefinition, PhaseDefinition]] = {}
        self._sizes: dict[int, tuple[PhaseDefinition, int]] = {}  # served phase -> JSON size
        self.snapshots = SnapshotStore(home, max_spec_bytes=max_spec_bytes)
        self.renderer = Renderer()
        # Warms this process's caches (compiled templates, gates) for the phase after
        # the one just rendered. Worker memory only: nothing reaches history, so a
        # future phase is never visible before it is reached.
        self._warmer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pg-warm")

    # ---- activities ----------------------------------------------------

    @activity.defn(name="load_session")
    def load_session(self, req: LoadSessionRequest) -> SessionPlan:
        """Resolve the workflow, snapshot the spec if dynamic, render phase 0."""
        try:
            plan = self.plan(req)
        except PhasegateError as exc:
            raise application_error(exc) from None
        plan.first_phase = self.with_context(plan.ref, plan.first_phase)
        if not (self.prefetch and req.options.prefetch):  # else phase 1 is prefetched now
            self._warm(plan.ref, 1)
        return plan

    @activity.defn(name="render_phase")
    def render_phase(self, req: RenderPhaseRequest) -> PhaseDefinition:
        """Render phase ``req.index`` of the session described by ``req.ref``."""
        phase = self._render(req.ref, req.index)
        # Warm the phase after this one only where it will be rendered at its advance (a
        # local activity: prefetch off, or a gate whose reading checks render it). A
        # prefetch (a regular activity) is followed by another prefetch, off the advance's
        # path: a warm-up only moved that work (mostly context retrieval) into the next
        # advance's time, and with many sessions (the context cache holds 64 phases) did
        # it twice.
        if activity.in_activity() and activity.info().is_local:
            self._warm(req.ref, req.index + 1)
        return phase

    @activity.defn(name="render_phases")
    def render_phases(self, req: RenderPhaseRequest) -> PhasesAhead:
        """Phase ``req.index`` and the phases after it that fit ``req.ahead_bytes``."""
        return PhasesAhead(phases=self.phases_ahead(req))

    def phases_ahead(self, req: RenderPhaseRequest) -> list[PhaseDefinition]:
        """Phase ``req.index`` (its render error raised as ``render_phase`` raises it), then
        the phases after it in order while all of them fit ``req.ahead_bytes`` of JSON (at
        most MAX_PHASES_AHEAD in all). A later phase that does not render ends the window:
        its own advance reports the error."""
        phases = [self._render(req.ref, req.index)]
        used = self._size(phases[0])
        last = min(req.ref.total_phases, req.index + MAX_PHASES_AHEAD)
        for index in range(req.index + 1, last):
            try:
                phase = self._render(req.ref, index)
            except Exception as exc:  # noqa: BLE001 - its own advance renders it and reports
                logging.getLogger(__name__).debug("window ends before phase %d: %s", index, exc)
                break
            used += self._size(phase)
            if used > req.ahead_bytes:
                break
            phases.append(phase)
        return phases

    def _render(self, ref: DefinitionRef, index: int) -> PhaseDefinition:
        try:
            wf = find_workflow(ref.workflow_type, self.library_paths)
            phase = self.build_phase(wf, ref, index)
        except PhasegateError as exc:
            raise application_error(exc) from None
        return self.with_context(ref, phase)

    def _size(self, phase: PhaseDefinition) -> int:
        """``phase``'s JSON size, remembered for the cached (shared) phase objects."""
        with self._cache_lock:
            hit = self._sizes.get(id(phase))
        if hit is not None and hit[0] is phase:
            return hit[1]
        size = len(phase.model_dump_json())
        with self._cache_lock:
            if len(self._sizes) > 256:
                self._sizes.clear()
            self._sizes[id(phase)] = (phase, size)
        return size

    def with_context(self, ref: DefinitionRef, phase: PhaseDefinition) -> PhaseDefinition:
        """Attach retrieved docs to the phase and each task. Never from a later phase:
        the retriever filters on the phase number, and the phase's own docs (already its
        content) are left out. Retrieval trouble leaves the context empty, never fails."""
        if self.retriever is None or self.context_k == 0:
            return phase
        with self._cache_lock:
            hit = self._with_context.get((ref.workflow_type, id(phase)))
        if hit is not None and hit[0] is phase:  # the same rendered (cached) phase object
            return hit[1]
        done = self._attach_context(ref, phase)
        with self._cache_lock:
            self._with_context[(ref.workflow_type, id(phase))] = (phase, done)
            while len(self._with_context) > 64:
                del self._with_context[next(iter(self._with_context))]
        return done

    def _attach_context(self, ref: DefinitionRef, phase: PhaseDefinition) -> PhaseDefinition:
        assert self.retriever is not None
        return attach_context(
            self.retriever, ref, phase, self.context_k, self.context_tokens, self.max_phase_bytes
        )

    def _warm(self, ref: DefinitionRef, index: int) -> None:
        if index < ref.total_phases:
            self._warmer.submit(self._warm_now, ref, index)

    def _warm_now(self, ref: DefinitionRef, index: int) -> None:
        # Yield to the answer in flight first: a render holds the GIL for milliseconds, and
        # the advance that asked for this phase is still being completed by the workflow.
        time.sleep(_WARM_DELAY_SECONDS)
        try:
            wf = find_workflow(ref.workflow_type, self.library_paths)
            self.with_context(ref, self.build_phase(wf, ref, index))
        except Exception as exc:  # noqa: BLE001 - best effort; the real render reports errors
            logging.getLogger(__name__).debug("warm-up of phase %s failed: %s", index, exc)

    # ---- plain methods (also used by the CLI and tests) ------------------

    def plan(self, req: LoadSessionRequest) -> SessionPlan:
        self._check_target(req.target)
        wf = find_workflow(req.workflow_type, self.library_paths)
        meta = wf.metadata
        static_count = len(meta.static_phases)
        snapshot_id = spec_source = spec = None
        total = static_count
        if meta.dynamic_phases:
            cfg = meta.dynamic_config
            key = cfg.source_path_key if cfg else "spec_path"
            raw = getattr(req.options, key, None) or (req.options.model_extra or {}).get(key)
            if not raw:
                raise DefinitionError(
                    f"workflow {meta.workflow_type} builds its phases from a spec",
                    where="--spec" if key == "spec_path" else f"--option {key}",
                    hint="start it with --spec (MCP start_session: spec_path) naming the spec's "
                    "tasks.md or its folder"
                    if key == "spec_path"
                    else f"start it with --option {key}=PATH naming the spec's tasks.md or folder",
                )
            spec = read_source(  # a tasks.md, or a .workflow/WFS-* task folder
                str(raw),
                target=req.target,
                extra_roots=self.spec_roots,
                limit=self.snapshots.max_spec_bytes,
                layout=req.options.task_layout,
            )
            self.snapshots.keep(spec)
            spec_source = os.path.realpath(spec.source)
            self._check_not_library(spec_source)
            snapshot_id = spec.sha256
            total = static_count + len(spec.phases)
        if total == 0:
            raise DefinitionError(
                "workflow defines no phases", where=str(wf.path / "metadata.json")
            )
        ref = DefinitionRef(
            workflow_type=meta.workflow_type,
            target=req.target,
            total_phases=total,
            static_phase_count=static_count,
            snapshot_id=snapshot_id,
            spec_source=spec_source,
            base_commit=git_head(req.target),
            interface=req.options.interface,
        )
        if workflow_uses_commands(wf):
            found = find_commands(
                req.target,
                option=req.options.test_command,
                deployment=self.test_command,
                spec=spec,
                allowlist=self.allowed_commands,
            )
            ref = ref.model_copy(update={"commands": found})
            self._check_commands_approved(wf, ref)
        bound = [*self.deployment_keys, *_approver_keys(meta, wf)]
        keys = session_keys(
            bound, req.options.approver_keys, unsigned_allowed=self.allow_unsigned_approvals
        )
        self._check_approvable(wf, ref, keys, req.options.approvers)
        return SessionPlan(
            name=meta.name or meta.workflow_type,
            description=meta.description,
            ref=ref,
            first_phase=self.build_phase(wf, ref, 0),
            approver_keys=keys,
            unsigned_approvals=self.allow_unsigned_approvals,
            # Controls: the operators and the approvers the deployment or the definition
            # trusts, never keys the starter named.
            operator_keys=list(dict.fromkeys([*self.operator_keys, *bound])),
            unsigned_controls=self.allow_unsigned_controls,
            prefetch=self.prefetch,
            sealed_prefetch=self.sealed_prefetch,
            ahead_bytes=self.ahead_bytes,
            task_folder=task_folder_for(
                req.target, spec_source, req.options.task_files, meta.name or meta.workflow_type
            ),
            engine=SESSION_ENGINE,
        )

    def _check_commands_approved(self, wf: WorkflowDir, ref: DefinitionRef) -> None:
        """Commands a starter, a spec or a project named run only once a person has seen
        them: phase 0 lists them, so phase 0 must need an approval."""
        if ref.commands is None or not ref.commands.all():
            return
        phase = self.build_phase(wf, ref, 0)
        if not (phase.requires_approval or phase.gate.approval.required):
            raise DefinitionError(
                "this session would run commands ("
                + "; ".join(ref.commands.listing())[:300]
                + ") but its phase 0 needs no approval, so nobody would see them first",
                where=f"{wf.path / 'metadata.json'}: phase 0",
                hint="set requires_approval on phase 0 (or approval: {required: true} in its "
                "gate-definition.yaml)",
            )

    def _check_target(self, target: str) -> None:
        """A target is a project folder: never the file system's root, and inside the
        worker's ``target_roots`` when it names any (its checks and spec live there)."""
        if not target:
            return
        real = os.path.realpath(target)
        if real == os.path.sep:
            raise DefinitionError(
                "the target is the file system's root", where=target, hint=_TARGET_HINT
            )
        roots = [os.path.realpath(r) for r in self.target_roots]
        if roots and not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            raise DefinitionError(
                f"the target {target} is outside the folders this worker serves "
                f"({', '.join(self.target_roots)})",
                where=target,
                hint=_TARGET_HINT,
            )

    def _check_not_library(self, spec_source: str) -> None:
        """A spec is a project's tasks.md, never a file of the workflow library: read as a
        spec, a library file would serve a later phase's text as the current one."""
        for lib in self.library_paths:
            root = os.path.realpath(lib).rstrip("/") + "/"
            if spec_source.startswith(root):
                raise DefinitionError(
                    "the spec is a file of the workflow library, not a project's tasks.md",
                    where=spec_source,
                    hint="pass --spec (MCP: spec_path) with your project's tasks.md",
                )

    def _check_approvable(
        self,
        wf: WorkflowDir,
        ref: DefinitionRef,
        keys: list[ApproverKey],
        approvers: list[str] | None,
    ) -> None:
        """Refuse, before a session starts, one whose approval gates nobody could pass:
        no keys where only signed approvals count, or ``--approver`` names none of a gate's.

        Static phases are checked one by one; dynamic phases share one gate, checked on
        the first of them. Rendering them here also reports a broken phase up front.
        """
        signed_only = not keys and not self.allow_unsigned_approvals
        if not signed_only and approvers is None:
            return
        indexes = list(range(ref.static_phase_count))
        if ref.total_phases > ref.static_phase_count:
            indexes.append(ref.static_phase_count)
        for index in indexes:
            phase = self.build_phase(wf, ref, index)
            if not (phase.requires_approval or phase.gate.approval.required):
                continue
            gate = phase.approvers or phase.gate.approval.approvers
            where = f"phase {phase.label} ({phase.name}): approval"
            if signed_only:
                raise SessionError(
                    "this phase needs an approval, and this worker accepts only signed "
                    "approvals from keys it names: it names none, so nobody could approve",
                    where=where,
                    hint="name the approvers on the worker: PHASEGATE_APPROVER_KEYS="
                    '"$(phasegate keys export NAME)" phasegate worker (or approver_keys in '
                    "metadata.json), then start the session again",
                )
            if narrowed_to_nobody(gate, approvers):
                raise SessionError(
                    f"--approver {', '.join(approvers or []) or '(none)'} names nobody this "
                    f"phase's gate allows ({', '.join(gate)})",
                    where=where,
                    hint="drop --approver, or name someone the gate lists",
                )

    def build_phase(self, wf: WorkflowDir, ref: DefinitionRef, index: int) -> PhaseDefinition:
        """Phase ``index`` rendered; served from a cache until a file of the workflow changes
        (the spec snapshot never changes: it is addressed by its hash)."""
        key = (ref.model_dump_json(), index)
        stamp = self._stamp(wf.path)
        with self._cache_lock:
            hit = self._rendered.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        phase = self._build_phase(wf, ref, index)
        with self._cache_lock:
            if len(self._rendered) > 256:
                self._rendered.clear()
            self._rendered[key] = (stamp, phase)
        return phase

    def _stamp(self, root: Path) -> tuple[int, int]:
        """``tree_stamp(root)``, reused for :data:`_STAMP_SECONDS` (a library edit shows
        in renders after at most that long; a session's spec is a snapshot anyway)."""
        now = time.monotonic()
        with self._cache_lock:
            seen = self._stamps.get(root)
        if seen is not None and now - seen[0] < _STAMP_SECONDS:
            return seen[1]
        stamp = tree_stamp(root)
        with self._cache_lock:
            self._stamps[root] = (now, stamp)
        return stamp

    def _build_phase(self, wf: WorkflowDir, ref: DefinitionRef, index: int) -> PhaseDefinition:
        if not 0 <= index < ref.total_phases:
            raise DefinitionError(f"phase {index} does not exist (0..{ref.total_phases - 1})")
        session = session_context(ref, index)
        if index < ref.static_phase_count:
            if ref.snapshot_id is not None:  # a static phase may list the spec (phase 0's plan)
                session["spec"] = self._snapshot(ref).model_dump(exclude={"sha256"})
            phase = self._static_phase(wf, session, index)
            if ref.commands is not None:
                gate = bind_gate(phase.gate, ref.commands, None)
                phase = phase.model_copy(update={"gate": gate})
            meta_phase = wf.metadata.static_phases[index]
            where = str(static_phase_dir(wf.path, meta_phase))
        else:
            spec = self._snapshot(ref)
            spec_index = index - ref.static_phase_count
            phase = self._dynamic_phase(wf, session, spec, index, spec_index, ref.commands)
            where = f"{spec.source}:{spec.phases[spec_index].line}"
        check_phase_size(
            phase, self.max_phase_bytes, where=where, spec=index >= ref.static_phase_count
        )
        return phase

    def _snapshot(self, ref: DefinitionRef) -> ParsedSpec:
        assert ref.snapshot_id is not None
        return self.snapshots.get(
            ref.snapshot_id, ref.spec_source, target=ref.target, extra_roots=self.spec_roots
        )

    def _static_phase(
        self, wf: WorkflowDir, session: dict[str, Any], index: int
    ) -> PhaseDefinition:
        phase, issues = render_static_phase(self.renderer, wf, session, index)
        for issue in issues:
            logging.getLogger(__name__).debug("%s", issue)
        return phase

    def _dynamic_phase(
        self,
        wf: WorkflowDir,
        session: dict[str, Any],
        spec: ParsedSpec,
        index: int,
        spec_index: int,
        commands: SessionCommands | None = None,
    ) -> PhaseDefinition:
        cfg = wf.metadata.dynamic_config
        assert cfg is not None
        sp = spec.phases[spec_index]
        base = load_gate_file(wf.path / "phases" / "dynamic" / "gate-definition.yaml")
        ctx = dynamic_context(session, spec, index, spec_index, base, commands)
        content = self.renderer.render(wf.path / cfg.templates["phase"], ctx)
        task_tpl = wf.path / cfg.templates["task"]
        known = known_through(spec, spec_index)
        by_id = {t.id: t for t in sp.tasks}
        rendered = [
            RenderedTask(
                id=t["id"],
                number=t["number"],
                name=t["name"],
                content=self.renderer.render(task_tpl, task_context(ctx, t)),
                status=t["status"],
                optional=t["optional"],
                task=spec_task(by_id[t["id"]], known, spec.source) if t["id"] in by_id else None,
            )
            for t in ctx["phase"]["tasks"]
        ]
        return PhaseDefinition(
            example_evidence=example_evidence(content),
            index=index,
            label=sp.written_number or str(sp.number),  # "N" for spec-kit's Phase N: Polish
            name=sp.name,
            content=content,
            tasks=rendered,
            gate=dynamic_gate(
                base,
                sp,
                source=f"{spec.source}:{sp.line}",
                commands=commands,
                spec_index=spec_index,
            ),
        )


def _approver_keys(meta: Any, wf: WorkflowDir) -> list[ApproverKey]:
    """``approver_keys: [{name, public_key}]`` from metadata.json (phasegate extension)."""
    raw = (meta.model_extra or {}).get("approver_keys") or []
    try:
        return [ApproverKey.model_validate(k) for k in raw]
    except ValueError as exc:
        raise DefinitionError(
            f"invalid approver_keys: {exc}",
            where=f"{wf.path / 'metadata.json'}: approver_keys",
            hint="each entry is {name, public_key} as printed by `phasegate keys export NAME`",
        ) from None
