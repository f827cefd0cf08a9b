"""The phasegate demo (`make demo`): one spec_execution_v1 session, then one
orchestration, end to end, offline.

Uses the Temporal server already running (TEMPORAL_ADDRESS, a profile, or a
`phasegate dev` found through .phasegate/dev.json; the demo's worker then takes
a task queue of its own), else starts the embedded dev server (SQLite under
.phasegate/, on 7233/8233 when free, else on free ports), runs a worker
in-process, and plays the coding agent and the human lead against the session:
read phase 0, try to peek ahead (refused), submit incomplete evidence
(problems listed), submit valid evidence, get the plan approved, then work
through every phase of examples/specs/todo-api/tasks.md (in a copy under
.phasegate/demo-work/, writing the files it reports) until completion.

Then an orchestration works examples/issues/typo-fix.md with the shipped demo
profile: the rules planner, the offline demo models and phasegate's scripted
coding agent (run by the worker) driving the developer's gated session, whose plan
the lead approves with a signed decision. No model is called, nothing leaves the
machine.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.client.cli._issue_files import load_profile, read_issue
from phasegate.client.cli._orchestrate_render import entry_line, render_plan
from phasegate.client.devserver import DatabaseInUse, DevServer, choose_port
from phasegate.client.orchestrations import OrchestrationClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.orchestration.messages import OrchestrationView
from phasegate.domain.session.messages import GateView, PhaseView, SequenceViolation, SessionOptions
from phasegate.domain.settings import Settings
from phasegate.domain.signing import ApproverKey
from phasegate.temporal import connect, load_settings
from phasegate.testing import complete_evidence, example_evidence
from phasegate.worker import build_worker

SPEC = REPO / "examples" / "specs" / "todo-api"
ISSUE = REPO / "examples" / "issues" / "typo-fix.md"
BOLD, DIM, GREEN, RED, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[31m", "\033[0m") if sys.stdout.isatty() else ("",) * 5
)


def say(text: str = "") -> None:
    print(text, flush=True)


def step(title: str) -> None:
    say(f"\n{BOLD}== {title}{RESET}")


def _listening(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "localhost", int(port)), timeout=0.3):
            return True
    except OSError:
        return False


def evidence_for(view: PhaseView, workspace: Path) -> dict[str, Any]:
    """What a diligent agent submits: the phase's documented example, completed from
    its gate (task ids done, every required field) - phasegate.testing's scripted agent."""
    evidence = complete_evidence(example_evidence(view), view)
    if "spec_path" in evidence:
        evidence["spec_path"] = str(workspace)
    return evidence


def do_the_work(evidence: dict[str, Any], workspace: Path, phase: int) -> list[str]:
    """Write the files the evidence reports as changed: the gate's verify check looks
    for each one in the workspace, so an agent that only claims them is refused."""
    written = []
    for rel in evidence.get("files_changed", []):
        path = workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(f"# phase {phase}: written by the demo agent\n")
        written.append(rel)
    return written


def show_gate(gate: GateView) -> None:
    for name, f in gate.fields.items():
        req = "required" if f.required else "optional"
        say(f"   - {name} ({f.type}, {req}) {DIM}{f.description}{RESET}")
    if gate.requires_approval:
        say(f"   + approval by: {', '.join(gate.approvers) or 'any approver'}")


def lead_key(key_dir: Path) -> ApproverKey:
    """The lead's public key, created on first use (the private key stays in ``key_dir``)."""
    step("The lead creates a signing key (phasegate keys new lead)")
    lead = (
        keys.public_key("lead", directory=key_dir)
        if (keys.keys_dir(key_dir) / "lead.key").is_file()
        else keys.new_key("lead", directory=key_dir)
    )
    say(f"lead's public key: {lead.public_key}  (private key 0600 under {keys.keys_dir(key_dir)})")
    say(
        "the worker names the lead as approver "
        '(PHASEGATE_APPROVER_KEYS="$(phasegate keys export lead)"); a session cannot add keys'
    )
    return lead


async def walk(pg: PhasegateClient, ui_url: str | None, key_dir: Path, home: Path) -> str:
    sid = f"demo-{uuid.uuid4().hex[:8]}"
    ws = (home / "demo-work" / sid).resolve()
    shutil.copytree(SPEC, ws)  # the agent works in a copy, never in the repository
    step(
        f"Start a spec_execution_v1 session over a copy of examples/specs/todo-api ({_shown(str(ws))})"
    )
    sid = await pg.start(
        "spec_execution_v1",
        str(ws),
        options=SessionOptions(spec_path=str(ws)),
        session_id=sid,
    )
    status = await pg.status(sid)
    say(f"session {sid}: {status.total_phases} phases, now on phase {status.current_phase}")

    view = await pg.phase(sid)
    assert isinstance(view, PhaseView)
    step(f"Phase 0 as the agent sees it: {view.name}")
    say("\n".join(view.content.splitlines()[:8]) + f"\n{DIM}   ...{RESET}")
    say(f"tasks: {', '.join(f'{t.number}. {t.name}' for t in view.tasks)}")
    say("gate:")
    show_gate(view.gate)

    step("The agent tries to read phase 1 before finishing phase 0")
    peek = await pg.phase(sid, 1)
    assert isinstance(peek, SequenceViolation)
    say(f"{RED}refused{RESET}: {peek.error} - {peek.message}")

    step("The agent claims phase 0 is done with incomplete evidence")
    result = await pg.submit(sid, 0, {"spec_path": str(ws), "phases_found": 0})
    say(f"passed: {result.passed}")
    for p in result.problems:
        say(f"   {RED}x{RESET} {p.field}: {p.message}")

    step("The agent submits complete evidence")
    result = await pg.submit(sid, 0, evidence_for(view, ws))
    say(f"passed: {result.passed}; awaiting approval: {result.awaiting_approval}")

    step("The agent tries to approve its own plan, claiming to be the lead")
    try:
        await pg.decide(sid, approver="lead", decision="approve")
    except PhasegateError as exc:
        say(f"{RED}refused{RESET}: {exc}")

    step("The lead approves the plan with a signed decision (phasegate approve --as lead)")
    comment = "plan looks right"
    binding = (await pg.status(sid)).approval_binding  # the evidence the lead approves
    say(f"signing for evidence sha256:{(binding or {}).get('evidence_sha256', '')[:16]}…")
    nonce, signature = keys.sign_decision(
        "lead",
        session_id=sid,
        phase=0,
        decision="approve",
        comment=comment,
        directory=key_dir,
        binding=binding,
    )
    status = await pg.decide(
        sid, approver="lead", decision="approve", comment=comment, nonce=nonce, signature=signature
    )
    say(
        f"approved by lead; session now on phase {status.current_phase}: {status.current_phase_name}"
    )

    while status.status == "active":
        view = await pg.phase(sid)
        assert isinstance(view, PhaseView)
        step(f"Phase {view.phase} (tasks.md phase {view.label}): {view.name}")
        for t in view.tasks:
            task = await pg.task(sid, view.phase, t.id)
            lines = task.content.splitlines()  # type: ignore[union-attr]
            first = next((ln for ln in lines if ln.strip() and not ln.startswith("#")), "")
            say(f"   task {t.id}: {t.name} {DIM}{first[:60]}{RESET}")
        evidence = evidence_for(view, ws)
        say(f"   the agent writes {', '.join(do_the_work(evidence, ws, view.phase))}")
        result = await pg.submit(sid, view.phase, evidence, submission_id=f"{sid}-{view.phase}")
        mark = f"{GREEN}passed{RESET}" if result.passed else f"{RED}failed{RESET}"
        say(f"checkpoint {mark}; evidence fields: {', '.join(sorted(evidence))}")
        if not result.passed:
            for p in result.problems:
                say(f"   {RED}x{RESET} {p.field}: {p.message}")
            raise SystemExit("demo evidence did not pass; the library and demo disagree")
        status = await pg.status(sid)

    summary = await pg.result(sid)
    step("Done")
    say(
        f"{GREEN}session {summary.status}{RESET}: phases {summary.completed_phases} of {summary.total_phases}"
    )
    if ui_url:
        say(f"Web UI: {ui_url}/namespaces/default/workflows/{sid}")
    return sid


async def orchestrate(client: Any, settings: Settings, ui_url: str | None, key_dir: Path) -> str:
    """One orchestration of examples/issues/typo-fix.md with the shipped demo profile,
    followed as `phasegate orchestrate` follows it; the lead approves the developer's plan."""
    step("An orchestration: agents planned per issue (examples/issues/typo-fix.md, profile demo)")
    issue = read_issue(ISSUE)
    oid = f"demo-orch-{uuid.uuid4().hex[:8]}"
    work = (Path(settings.home) / "demo-work" / oid).resolve()
    work.mkdir(parents=True)
    (work / "README.md").write_text("# todo-api\n\nInstall it with `pip instal todo-api`.\n")
    profile, _ = load_profile("demo", workdir=str(work))
    say(f"issue {issue.id}: {issue.title} (labels: {', '.join(issue.labels)})")
    say(
        f"profile demo: planner 'rules', analyst/architect/reviewer 'demo' {DIM}(offline canned "
        f"outputs: no model is called){RESET}; developer: phasegate's scripted coding agent, run "
        "by the worker, drives a gated session"
    )
    oc = OrchestrationClient(client, settings.task_queue)
    pg = PhasegateClient(client, settings.task_queue)
    await oc.start(issue, profile, orchestration_id=oid)
    seen, approved = -1, set[tuple[str, int]]()
    deadline = time.monotonic() + 180
    while True:
        view = await oc.state(oid)
        history = await oc.history(oid)
        for entry in history:
            if entry.seq > seen:
                seen = entry.seq
                say(f"  {entry_line(entry, limit=160)}")
        for child in view.child_sessions:
            await approve_child(pg, child, approved, key_dir)
        if view.status in ("completed", "failed"):
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"the demo orchestration {oid} did not finish in time")
        await asyncio.sleep(0.3)
    step(f"The plan, outputs and usage (phasegate plan show {oid})")
    say(render_plan(view, history, tail=0))
    if view.status != "completed":
        raise SystemExit(f"the demo orchestration failed: {view.failure}")
    show_changes(view, work)
    if ui_url:
        say(f"Web UI: {ui_url}/namespaces/default/workflows/{oid}")
    return oid


async def approve_child(pg: PhasegateClient, child: str, approved: set[Any], key_dir: Path) -> None:
    """The lead signs the developer session's plan when it waits for approval."""
    try:
        status = await pg.status(child)
    except PhasegateError:
        return  # still loading its definition
    if status.status != "awaiting_approval" or (child, status.current_phase) in approved:
        return
    approved.add((child, status.current_phase))
    say(
        f"  {BOLD}the lead approves the developer session's plan{RESET} "
        f"(phasegate approve {child} --as lead): signed, phase {status.current_phase}"
    )
    nonce, signature = keys.sign_decision(
        "lead",
        session_id=child,
        phase=status.current_phase,
        decision="approve",
        comment="plan looks right",
        directory=key_dir,
        binding=status.approval_binding,
    )
    await pg.decide(
        child,
        approver="lead",
        decision="approve",
        phase=status.current_phase,
        comment="plan looks right",
        nonce=nonce,
        signature=signature,
    )


def show_changes(view: OrchestrationView, work: Path) -> None:
    """What the developer's session left in the workspace (the gates checked it)."""
    files = sorted(
        str(p.relative_to(work))
        for p in work.rglob("*")
        if p.is_file() and ".phasegate" not in p.relative_to(work).parts
    )
    spec = work / ".phasegate" / "orchestrations"
    say(f"workspace {_shown(str(work))}: {', '.join(files)}")
    say(f"the developer's tasks.md (from the plan): {_shown(str(next(spec.rglob('tasks.md'))))}")


def start_server(settings: Settings) -> DevServer:
    """The demo's own dev server: 7233/8233 when free (else free ports), on
    .phasegate/temporal.db unless another server holds that file (then in memory)."""
    home = Path(settings.home)
    home.mkdir(parents=True, exist_ok=True)
    db: str | None = str((home / "temporal.db").resolve())
    ui_port = choose_port(None, settings.ui_port, "PHASEGATE_UI_PORT")
    for attempt in (1, 2):
        server = DevServer(
            port=choose_port(None, 7233, "--port"),
            ui_port=ui_port,
            db=db,
            log_file=str(home / "temporal.log"),
            owner="make demo",
        )
        where = db or "in memory"
        print(
            f"starting the embedded Temporal dev server on {server.address} ({where}) ...", end=""
        )
        started = time.monotonic()
        try:
            server.start(timeout=60, progress=_dots())
        except DatabaseInUse as exc:
            if attempt == 2:
                raise
            say(f"\n{DIM}{exc.message}: this run keeps its data in memory instead{RESET}")
            db = None
            continue
        say(f" ready in {time.monotonic() - started:.1f} s")
        return server
    raise AssertionError("unreachable")


def _shown(path: str) -> str:
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return path


def _dots() -> Callable[[float], None]:
    """Progress for waits over a second: one dot a second."""
    shown = [0]

    def tick(elapsed: float) -> None:
        if int(elapsed) > shown[0]:
            shown[0] = int(elapsed)
            print(".", end="", flush=True)

    return tick


async def main() -> int:
    # TEMPORAL_ADDRESS, a Temporal profile, or a running `phasegate dev` (<home>/dev.json)
    settings = load_settings()
    server: DevServer | None = None
    if _listening(settings.temporal_address):
        # A running server has its own workers: this run's worker gets a queue of its own,
        # so only it (with the lead's key) handles the demo session.
        settings = settings.model_copy(update={"task_queue": f"demo-{uuid.uuid4().hex[:6]}"})
        say(f"using the Temporal server running at {settings.temporal_address}")
        ui_url = settings.ui_url or (
            f"http://localhost:{settings.ui_port}"
            if _listening(f"127.0.0.1:{settings.ui_port}")
            else None
        )
    elif "TEMPORAL_ADDRESS" in os.environ:
        raise SystemExit(f"nothing answers at TEMPORAL_ADDRESS={settings.temporal_address}")
    else:
        server = start_server(settings)
        settings = settings.model_copy(update={"temporal_address": server.address})
        ui_url = server.ui_url
    key_dir = Path(settings.home) / "demo-config"
    lead = lead_key(key_dir)
    settings = settings.model_copy(update={"approver_keys_file": lead.model_dump_json()})
    try:
        client = await connect(settings)
        pg = PhasegateClient(client, settings.task_queue)
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            async with build_worker(client, settings, executor=pool):
                say(
                    f"worker running on task queue {settings.task_queue!r} at {settings.temporal_address}"
                )
                await walk(pg, ui_url, key_dir, Path(settings.home))
                await orchestrate(client, settings, ui_url, key_dir)
    finally:
        if server is not None:
            server.stop()
    if server is None:
        say(
            "\nThe session and the orchestration stay on that server: `.venv/bin/phasegate list` "
            "shows the session, `.venv/bin/phasegate plan show ID` the orchestration."
        )
    elif server.db:
        say(
            f"\nThe session and the orchestration stay in {_shown(server.db)}. To look again:\n"
            "  .venv/bin/phasegate dev        # terminal 1: server + worker; prints the Web UI\n"
            "  .venv/bin/phasegate list       # terminal 2 (same folder)\n"
            "  .venv/bin/phasegate plan show ORCHESTRATION_ID"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
