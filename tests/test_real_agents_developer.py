"""The typo issue end to end with the real Claude Code and Codex CLIs as the
orchestration's developer: the worker runs its shipped ``claude`` / ``codex`` coding
agent (the command and the permissions phasegate ships), whose model is a scripted fake
on the provider's streaming wire format (Anthropic Messages; the Responses API).
Through the tools its CLI allows, the model reads the phase with ``phasegate phase``,
submits with ``phasegate submit``, fixes README.md, and gets nowhere with
``phasegate approve``: Claude Code refuses to run it, and under Codex it runs without
the lead's key, so the worker refuses it; the person approves phase 0, signed."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from agent_cli_helpers import cli, codex_home
from orchestration_helpers import approving_children, start

from phasegate.activities.tasks_md import read_spec
from phasegate.agents._evidence import complete_evidence, example_evidence
from phasegate.client import keys
from phasegate.client.api import PhasegateClient
from phasegate.domain.orchestration.agents import DeveloperProfile, Issue, Profile
from phasegate.domain.session.messages import PhaseView
from phasegate.domain.settings import Settings
from phasegate.testing import Approver, make_settings, signed_approver
from phasegate.testing.fake_anthropic import FakeAnthropic, FakeReply, FakeRequest
from phasegate.testing.fake_openai import FakeOpenAI

TYPO = Issue(id="1", title="Fix typo in README: 'recieve' → 'receive'", labels=["docs"])
_SESSION_IN_PROMPT = re.compile(r"gated session \*\*`([^`]+)`\*\*")


class Developer:
    """The model behind Claude Code: one decision per request, from what the tools said."""

    def __init__(self, work: Path, cli: str, pg: PhasegateClient) -> None:
        self.work, self.cli, self.pg = work, cli, pg
        self.loop = asyncio.get_running_loop()
        self.seen: list[str] = []
        self.stage = "read_phase_0"
        self.denied: list[str] = []

    def _bash(self, command: str) -> FakeReply:
        if self.cli == "codex":
            return FakeReply.tool_call({"cmd": command}, name="exec_command")
        return FakeReply.tool_call({"command": command, "description": "phasegate"}, name="Bash")

    def _write(self, path: Path, content: str) -> FakeReply:
        if self.cli == "codex":
            return self._bash(f"mkdir -p {path.parent} && cat > {path} <<'EOF'\n{content}\nEOF")
        return FakeReply.tool_call({"file_path": str(path), "content": content}, name="Write")

    def _ask(self, coroutine: Any) -> Any:
        """What the model knows from the phase it read (the CLIs cut long tool output,
        so the script asks the session rather than parsing what the CLI printed)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def _phase(self) -> PhaseView:
        status = self._ask(self.pg.status(self.session))
        view = self._ask(self.pg.phase(self.session, status.current_phase))
        assert isinstance(view, PhaseView), view
        return view

    def _submit(self, phase: int, evidence: dict[str, Any], then: str) -> FakeReply:
        """Write the evidence file (Claude Code refuses JSON inside a command), then
        (next request) ``phasegate submit --file`` it."""
        path = self.work / ".phasegate" / f"evidence-{phase}.json"
        self.pending = f"phasegate submit {self.session} --phase {phase} --file {path}"
        self.after = then
        self.stage = "send"
        return self._write(path, json.dumps(evidence, indent=2))

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
        self.seen.append(last)
        stage = self.stage
        found = _SESSION_IN_PROMPT.search(json.dumps(request.messages).replace('\\"', '"'))
        assert found, "the prompt names the session"
        session = self.session = found.group(1)

        if stage == "send":
            self.stage = self.after
            return self._bash(self.pending)
        if stage == "read_phase_0":
            self.stage = "submit_0"
            return self._bash(f"phasegate phase {session}")
        if stage == "submit_0":
            return self._submit(0, self._analysis(self._phase()), "try_approve")
        if stage == "try_approve":  # not a command this agent may run
            self.stage = "wait"
            return self._bash(f"phasegate approve {session} --as lead --comment mine")
        if stage == "wait":
            self.denied.append(last)
            self.stage = "poll"
            return self._bash(f"phasegate status {session}")
        if stage == "poll":
            status = self._ask(self.pg.status(session))
            if status.status == "active" and status.current_phase == 1:
                self.stage = "read_phase_1"
                return self._bash(f"phasegate phase {session}")
            return self._bash(f"phasegate status {session}")
        if stage == "read_phase_1":
            self.phase_1 = self._phase()
            self.stage = "edit"
            if self.cli == "codex":
                return self._bash("cat README.md")
            return FakeReply.tool_call({"file_path": str(self.work / "README.md")}, name="Read")
        if stage == "edit":
            self.stage = "submit_1"
            if self.cli == "codex":
                return self._bash("sed -i 's/recieve/receive/' README.md")
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


def _lead(tmp_path: Path) -> tuple[Settings, Approver]:
    """A worker that takes only signed approvals (the lead's key, which no agent holds)."""
    lead = keys.new_key("lead", directory=tmp_path / "keys")
    keyfile = tmp_path / "approvers.json"
    keyfile.write_text(json.dumps([lead.model_dump(mode="json")]), encoding="utf-8")
    settings = make_settings(tmp_path / "home", approver_keys_file=str(keyfile))
    return settings, signed_approver("lead", key_dir=tmp_path / "keys")


@pytest.mark.parametrize("agent", ["claude", "codex"])
async def test_a_real_coding_agent_completes_the_typo_issue_as_the_developer(
    agent, env, run_worker, tmp_path, monkeypatch
):
    program = cli(agent)
    work = tmp_path / "repo"
    work.mkdir()
    (work / "README.md").write_text("We recieve mail.\n")
    home = tmp_path / "home"
    home.mkdir()
    settings, approve = _lead(tmp_path)
    profile = Profile(
        working_dir=str(work),
        models={"analyst": "demo", "architect": "demo", "reviewer": "demo"},
        developer=DeveloperProfile(mode="command", agent=agent, timeout_minutes=4),
    )
    fake: FakeAnthropic | FakeOpenAI = FakeAnthropic() if agent == "claude" else FakeOpenAI()
    with fake:
        # The worker (in this process) gives its coding agent PATH and HOME, as every
        # agent gets them, and the variables the shipped entry declares.
        venv_bin = str(Path(sys.executable).parent)
        monkeypatch.setenv(
            "PATH", os.pathsep.join([str(program.parent), venv_bin, os.environ["PATH"]])
        )
        monkeypatch.setenv("HOME", str(home))
        if isinstance(fake, FakeAnthropic):
            monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
        else:
            monkeypatch.setenv("CODEX_HOME", str(codex_home(tmp_path / "codex", fake.base_url)))
            monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
        async with run_worker(settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            model = Developer(work, agent, pg)
            for _ in range(60):
                fake.respond(model)
            handle = await start(env.client, settings.task_queue, TYPO, profile)
            async with approving_children(pg, handle, approve) as approved:
                view = await asyncio.wait_for(handle.result(), 240)
            child = await pg.status(view.child_sessions[0])

    assert not fake.script_errors, fake.script_errors
    assert view.status == "completed", (view.failure, model.stage)
    # The agent submitted phase 1; the orchestration stops it once the session completes,
    # so its closing words may or may not have been asked for by then.
    assert model.stage in ("done", "finished"), model.stage
    assert (work / "README.md").read_text() == "We receive mail.\n"
    assert child.status == "completed" and approved
    assert [a.approver for a in child.approvals] == ["lead"]  # the person's signed decision
    [denied] = model.denied  # the agent's own `phasegate approve` was refused
    assert ("requires approval" if agent == "claude" else "approval") in denied, denied
    dev = next(o for o in view.outputs if o.agent == "developer")
    assert dev.output["completed"] is True
    assert all(r.stream for r in fake.requests)
    # What the CLI showed its model: the phases as phasegate prints them, the passes.
    assert any("Phase 0: Spec Analysis" in text for text in model.seen)
    assert sum("checkpoint, attempt 1" in text for text in model.seen) == 2
