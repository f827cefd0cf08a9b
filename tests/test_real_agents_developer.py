"""The typo issue end to end with the real Claude Code CLI as the orchestration's
developer: the worker runs its shipped ``claude`` coding agent (the command and the
permissions phasegate ships), whose model is a scripted fake on Anthropic's streaming
wire format. Through the tools Claude Code allows it, the model reads the phase with
``phasegate phase``, submits with ``phasegate submit``, fixes README.md with Read and
Edit, and is refused ``phasegate approve`` (a person approves phase 0)."""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

from agent_cli_helpers import TOOLS_BIN, cli, json_in
from orchestration_helpers import approving_children, start

from phasegate.activities.tasks_md import read_spec
from phasegate.agents._evidence import complete_evidence, example_evidence
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.session.messages import PhaseView
from phasegate.testing.fake_anthropic import FakeAnthropic, FakeReply, FakeRequest

TYPO = Issue(id="1", title="Fix typo in README: 'recieve' → 'receive'", labels=["docs"])
_SESSION_IN_PROMPT = re.compile(r"gated session \*\*`([^`]+)`\*\*")


class Developer:
    """The model behind Claude Code: one decision per request, from what the tools said."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.stage = "read_phase_0"
        self.denied: list[str] = []

    def _bash(self, command: str) -> FakeReply:
        return FakeReply.tool_call({"command": command, "description": "phasegate"}, name="Bash")

    def _session(self) -> str:
        [spec] = self.work.glob(".phasegate/orchestrations/*/dev-*/tasks.md")
        return spec.read_text() and spec.parent.name

    def _phase(self, text: str) -> PhaseView:
        return PhaseView.model_validate(json_in(text))

    def _submit(self, phase: int, evidence: dict[str, Any], then: str) -> FakeReply:
        """Write the evidence file (Claude Code refuses JSON inline in a command), then
        (next request) ``phasegate submit --file`` it."""
        path = self.work / ".phasegate" / f"evidence-{phase}.json"
        self.pending = f"phasegate submit {self.session} --phase {phase} --file {path}"
        self.after = then
        self.stage = "send"
        content = json.dumps(evidence, indent=2)
        return FakeReply.tool_call({"file_path": str(path), "content": content}, name="Write")

    def _analysis(self, view: PhaseView) -> dict[str, Any]:
        [path] = self.work.glob(".phasegate/orchestrations/*/dev-*/tasks.md")
        spec = read_spec(path)
        evidence = complete_evidence(example_evidence(view), view)
        evidence.update(
            spec_path=str(path),
            phases_found=len(spec.phases),
            tasks_found=sum(len(p.tasks) for p in spec.phases),
            required_files_present=True,
            dependencies_valid=True,
            execution_plan="Phase 1: fix the misspelling in README.md, then check the "
            "file reads right; one task, no dependencies.",
        )
        return evidence

    def __call__(self, request: FakeRequest) -> FakeReply:
        last = request.tool_results[-1] if request.tool_results else ""
        stage = self.stage
        found = _SESSION_IN_PROMPT.search(json.dumps(request.messages[0]).replace('\\"', '"'))
        assert found, "the prompt names the session"
        session = self.session = found.group(1)
        import sys

        print("STAGE", stage, repr(last[:600]), file=sys.stderr, flush=True)
        if stage == "send":
            self.stage = self.after
            return self._bash(self.pending)
        if stage == "read_phase_0":
            self.stage = "submit_0"
            return self._bash(f"phasegate phase {session} --json")
        if stage == "submit_0":
            return self._submit(0, self._analysis(self._phase(last)), "try_approve")
        if stage == "try_approve":  # not a command this agent may run
            self.stage = "wait"
            return self._bash(f"phasegate approve {session} --as lead --comment mine")
        if stage == "wait":
            self.denied.append(last)
            self.stage = "poll"
            return self._bash(f"phasegate status {session} --json")
        if stage == "poll":
            status = json_in(last)
            if status["status"] == "active" and status["current_phase"] == 1:
                self.stage = "read_phase_1"
                return self._bash(f"phasegate phase {session} --json")
            return self._bash(f"phasegate status {session} --json")
        if stage == "read_phase_1":
            self.phase_1 = self._phase(last)
            self.stage = "edit"
            return FakeReply.tool_call({"file_path": str(self.work / "README.md")}, name="Read")
        if stage == "edit":
            self.stage = "submit_1"
            edit = {
                "file_path": str(self.work / "README.md"),
                "old_string": "recieve",
                "new_string": "receive",
            }
            return FakeReply.tool_call(edit, name="Edit")
        if stage == "submit_1":
            view = self.phase_1
            evidence = complete_evidence(example_evidence(view), view)
            evidence.update(
                tasks_completed=[t.id for t in view.tasks],
                files_changed=["README.md"],
                tests_passing=True,
                summary="Fixed 'recieve' to 'receive' in README.md and reread the file.",
            )
            return self._submit(1, evidence, "done")
        self.stage = "finished"
        return FakeReply.text("Fixed the typo in README.md; the session is completed.")


async def test_claude_code_completes_the_typo_issue_as_the_developer(
    env, settings_for, run_worker, tmp_path, monkeypatch
):
    cli("claude")
    work = tmp_path / "repo"
    work.mkdir()
    (work / "README.md").write_text("We recieve mail.\n")
    home = tmp_path / "home"
    home.mkdir()
    settings = settings_for()
    profile = Profile(
        working_dir=str(work),
        models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        developer=DeveloperProfile(mode="command", agent="claude", timeout_minutes=4),
    )
    async with FakeAnthropic() as fake:
        # The worker (in this process) gives its coding agent these: PATH and HOME as
        # every agent gets them, the two variables the shipped claude entry declares.
        venv_bin = str(Path(os.sys.executable).parent)
        monkeypatch.setenv("PATH", os.pathsep.join([str(TOOLS_BIN), venv_bin, os.environ["PATH"]]))
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            model = Developer(work)
            for _ in range(60):
                fake.respond(model)
            handle = await start(env.client, settings.task_queue, TYPO, profile)
            async with approving_children(pg, handle) as approved:
                view = await asyncio.wait_for(handle.result(), 240)
            child = await pg.status(view.child_sessions[0])

    assert not fake.script_errors, fake.script_errors
    assert view.status == "completed", (view.failure, model.stage)
    assert model.stage == "finished"
    assert (work / "README.md").read_text() == "We receive mail.\n"
    assert child.status == "completed" and approved
    assert [a.approver for a in child.approvals] == ["lead"]  # the person, not the agent
    [denied] = model.denied
    assert "requires approval" in denied  # Claude Code refused `phasegate approve`
    dev = next(o for o in view.outputs if o.agent == "developer")
    assert dev.output["completed"] is True
    assert all(r.stream for r in fake.requests)
