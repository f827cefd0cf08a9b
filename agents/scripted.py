"""The scripted coding agent: what ``claude -p PROMPT`` does for phasegate, minus the model.

The worker's ``scripted`` coding agent (``PHASEGATE_DEVELOPER_COMMANDS``), run by an
orchestration's developer step in place of a real coding agent, in demos, tests and
benchmarks::

    python -m phasegate.agents.scripted [--phantom | --phantom-files] [--spec TASKS_MD] [PROMPT]

The worker starts it isolated (``python -I``): the working directory is not on
``sys.path``, so a repository's own ``phasegate/agents/scripted.py`` cannot run in its
place. (``python -m phasegate.testing.coding_agent``, its former name, still works.)

It drives the session named by ``PHASEGATE_SESSION`` through
:class:`~phasegate.client.api.PhasegateClient`, with the settings of the environment
(``TEMPORAL_ADDRESS``, ``TEMPORAL_NAMESPACE``, ``PHASEGATE_TASK_QUEUE``; see
``activities/developer.py`` for the whole environment a developer step gives it):

- **honest** (default): phase by phase, reads the phase, does the work and submits
  what it did. Phase 0 of ``spec_execution_v1`` parses the spec (``--spec``, else
  the ``tasks.md`` path the prompt names, else the newest one under
  ``.phasegate/orchestrations/``) and reports its real counts and plan; each
  implementation phase fetches its tasks one at a time and writes one file per task
  under ``phasegate-work/`` (its ``files_changed``). Other phases get the evidence
  their docs show, completed from the gate's schema. It never approves: at a phase
  awaiting approval it waits for a person (``--approval-wait`` seconds).
- **--phantom**: plans like the honest agent, then claims the first implementation
  phase done without doing it (every task listed, tests "passing", no file changed),
  prints ``all tasks done`` and exits 0 whatever the session answered. The gate
  refuses, and the session's status says why.
- **--phantom-files**: the same phantom, but it sends the phase's documented example
  as is, so its ``files_changed`` names files never written (``src/example.py``, ...):
  the evidence passes the schema, and the gate's ``files_exist`` check refuses it,
  naming each missing file.

Exit codes: 0 the session completed (or the phantom is done), 1 a gate refused honest
evidence, 2 the session or its settings cannot be used, 3 no approval came in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

from phasegate.activities.tasks_md import read_spec
from phasegate.agents._evidence import complete_evidence, example_evidence
from phasegate.client.api import PhasegateClient
from phasegate.domain.errors import PhasegateError
from phasegate.domain.session.messages import PhaseView, SequenceViolation, SessionView
from phasegate.domain.spec import ParsedSpec

__all__ = ["WORK_FOLDER", "main", "run"]

WORK_FOLDER = "phasegate-work"
"""Where the honest agent writes its work, one file per task."""

_DESIGN_DOCS = ("README.md", "specs.md", "srd.md", "design.md")
_SPEC_IN_PROMPT = re.compile(r"[^\s`'\"()<>]*tasks\.md")
_WAITING = ("awaiting_approval", "approval_overdue")


def _say(text: str) -> None:
    print(f"coding-agent: {text}", flush=True)


class _Agent:
    """One run of the scripted agent over one session."""

    def __init__(self, client: PhasegateClient, session_id: str, args: argparse.Namespace) -> None:
        self.pg = client
        self.sid = session_id
        self.args = args
        self.workspace = Path.cwd()
        self.submissions = 0

    async def run(self) -> int:
        while True:
            status = await self._wait_for_approval(await self.pg.status(self.sid))
            if status is None:
                return 3
            if status.status == "completed":
                _say(f"session {self.sid} completed ({status.total_phases} phases)")
                return 0
            if status.status != "active":
                _say(f"session {self.sid} is {status.status}; nothing to do")
                return 2
            view = await self.pg.phase(self.sid, status.current_phase)
            if isinstance(view, SequenceViolation):
                _say(view.message)
                return 2
            phantom = self.args.phantom or self.args.phantom_files
            if phantom and "tasks_completed" in view.gate.fields:
                await self._claim_done(view)
                print("all tasks done", flush=True)
                return 0
            evidence = await self._work(view, status)
            result = await self.pg.submit(
                self.sid, view.phase, evidence, submission_id=f"{self.sid}-ca-{self.submissions}"
            )
            self.submissions += 1
            if not result.passed:
                for problem in result.problems:
                    _say(f"phase {view.phase} refused: {problem.field}: {problem.message}")
                return 1
            _say(f"phase {view.phase} ({view.name}) passed its gate")
            if self.submissions >= self.args.max_submissions:
                _say(f"gave up after {self.submissions} submissions")
                return 1

    async def _wait_for_approval(self, status: SessionView) -> SessionView | None:
        """Wait while a person decides; a coding agent never approves its own work."""
        if status.status not in _WAITING:
            return status
        who = ", ".join(status.awaiting_approval_from) or "an approver"
        _say(f"phase {status.current_phase} awaits approval by {who}; waiting")
        deadline = asyncio.get_running_loop().time() + self.args.approval_wait
        while status.status in _WAITING:
            if asyncio.get_running_loop().time() > deadline:
                _say(f"no decision within {self.args.approval_wait:.0f}s; stopping")
                return None
            await asyncio.sleep(0.3)
            status = await self.pg.status(self.sid)
        return status

    async def _work(self, view: PhaseView, status: SessionView) -> dict[str, Any]:
        """Do the phase's work; returns the evidence of what was done."""
        evidence = complete_evidence(example_evidence(view), view)
        if "spec_path" in view.gate.fields and "phases_found" in view.gate.fields:
            evidence.update(self._analyse(status))
        elif "tasks_completed" in view.gate.fields:
            evidence.update(await self._implement(view))
        return evidence

    def _analyse(self, status: SessionView) -> dict[str, Any]:
        """Phase 0 of spec_execution_v1: read the spec, count, check, plan."""
        spec = read_spec(self._spec_path())
        path = Path(spec.source)  # a folder's tasks.md
        if len(spec.phases) != status.total_phases - 1:
            _say(
                f"warning: {path} has {len(spec.phases)} phases, the session "
                f"{status.total_phases - 1}: is this the session's spec?"
            )
        ids = {t.id for p in spec.phases for t in p.tasks}
        deps_ok = all(d in ids for p in spec.phases for t in p.tasks for d in t.dependencies)
        return {
            "spec_path": str(path),
            "phases_found": len(spec.phases),
            "tasks_found": sum(len(p.tasks) for p in spec.phases),
            "required_files_present": any((path.parent / d).is_file() for d in _DESIGN_DOCS),
            "execution_plan": _plan(spec),
            "dependencies_valid": deps_ok,
        }

    def _spec_path(self) -> Path:
        if self.args.spec:
            return Path(self.args.spec)
        named = _SPEC_IN_PROMPT.findall(self.args.prompt or "")
        for candidate in named:
            path = Path(candidate).expanduser()
            path = path if path.is_absolute() else self.workspace / path
            if path.is_file():
                return path
        found = sorted(
            (self.workspace / ".phasegate" / "orchestrations").glob("*/dev-*/tasks.md"),
            key=lambda p: p.stat().st_mtime,
        )
        if not found:
            raise PhasegateError(
                "cannot find the spec: no tasks.md named in the prompt or under "
                ".phasegate/orchestrations/",
                hint="pass --spec PATH",
            )
        return found[-1]

    async def _implement(self, view: PhaseView) -> dict[str, Any]:
        """An implementation phase: each task fetched, done (a file written) and listed."""
        folder = self.workspace / WORK_FOLDER / f"phase-{view.label}"
        folder.mkdir(parents=True, exist_ok=True)
        changed: list[str] = []
        for task in view.tasks:
            detail = await self.pg.task(self.sid, view.phase, task.number)
            if isinstance(detail, SequenceViolation):
                raise PhasegateError(detail.message, where=f"task {task.id}")
            path = folder / f"{_file_name(task.id)}.md"
            path.write_text(
                f"# {task.id} {task.name}\n\nDone for session {self.sid}, phase {view.phase}.\n",
                encoding="utf-8",
            )
            changed.append(str(path.relative_to(self.workspace)))
            _say(f"task {task.id} done: {changed[-1]}")
        missing = [p for p in changed if not (self.workspace / p).is_file()]
        return {
            "tasks_completed": [t.id for t in view.tasks],
            "files_changed": changed,
            "tests_passing": not missing,
            "summary": f"Did {len(view.tasks)} task(s) of phase {view.label} ({view.name}); "
            f"wrote {', '.join(changed)} and checked each file exists.",
        }

    async def _claim_done(self, view: PhaseView) -> None:
        """The phantom: every task claimed, nothing done; no file changed, or (with
        ``--phantom-files``) the phase's example sent as is, naming files never written."""
        evidence: dict[str, Any] = {
            "tasks_completed": [t.id for t in view.tasks],
            "tests_passing": True,
            "files_changed": [],
            "summary": "all tasks done",
        }
        if self.args.phantom_files:
            evidence = complete_evidence(example_evidence(view), view)
            evidence.setdefault("files_changed", ["src/example.py"])
        try:
            await self.pg.submit(self.sid, view.phase, evidence)
        except PhasegateError:
            pass  # a phantom does not read answers


def _plan(spec: ParsedSpec) -> str:
    steps = [
        f"Phase {p.number} ({p.name}): " + ", ".join(t.id for t in p.tasks) + " in order"
        for p in spec.phases
    ]
    return "; ".join(steps) + ". Each task is checked before the phase's evidence is sent."


def _file_name(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip(".") or "task"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m phasegate.agents.scripted",
        description="Scripted coding agent: completes the session in PHASEGATE_SESSION.",
    )
    parser.add_argument("prompt", nargs="?", default="", help="What the agent is told.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--phantom", action="store_true", help="Claim done without the work.")
    mode.add_argument(
        "--phantom-files",
        action="store_true",
        help="Claim done without the work, listing files that were never written.",
    )
    parser.add_argument("--spec", help="The spec's tasks.md (default: from the prompt).")
    parser.add_argument(
        "--approval-wait", type=float, default=900.0, help="Seconds to wait for a person."
    )
    parser.add_argument("--max-submissions", type=int, default=200)
    return parser


async def _main(args: argparse.Namespace) -> int:
    session_id = os.environ.get("PHASEGATE_SESSION", "").strip()
    if not session_id:
        _say("PHASEGATE_SESSION is not set: which session should I complete?")
        return 2
    try:
        client = await PhasegateClient.connect()
        return await _Agent(client, session_id, args).run()
    except PhasegateError as exc:  # str() holds where and the hint
        _say(str(exc))
        return 2


def main(argv: list[str] | None = None) -> int:
    """Run the agent; returns the exit code (see the module docstring)."""
    args = _parser().parse_args(argv)
    mode = "phantom" if args.phantom or args.phantom_files else "honest"
    _say(f"{mode} agent, session {os.environ.get('PHASEGATE_SESSION', '-')}")
    return asyncio.run(_main(args))


def run() -> NoReturn:
    """Run the agent as a program (``python -m``) and leave with its exit code."""
    code = main()
    # Leave without interpreter shutdown: the SDK's Rust threads can abort it
    # (temporalio/sdk-python#300, "PyGILState_Release"), as `phasegate` does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
