"""The README is the CLI's: each ```yaml block loads as a gate, each command it shows
parses, `phasegate --help` and the README name the same commands, and the exit codes it
documents are the CLI's constants and what its walkthrough's commands return."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from phasegate.client import cli
from phasegate.domain.gates import load_gate

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_gate_examples_load() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        gate = load_gate(yaml.safe_load(block), source="README.md")
        assert gate.fields
    assert any(load_gate(yaml.safe_load(b), source="README").verify for b in blocks)


# ---------------------------------------------------------------- README, --help, exit codes


REPO = README.parent
_PHASEGATE = re.compile(r"(?:^|[\s(=$])(?:\S*/)?phasegate\s+(?!\w*\.)")


def _blocks(text: str) -> list[str]:
    """The README's shell blocks, continuation lines joined."""
    blocks = re.findall(r"```(?:sh|console|bash)\n(.*?)```", text, re.DOTALL)
    return [b.replace("\\\n", " ") for b in blocks]


def _commands(text: str) -> list[list[str]]:
    """Every ``phasegate ...`` command in the shell blocks, as argv after ``phasegate``
    (synopsis lines with ``[optional]`` parts and elided ``…`` ones aside)."""
    found = []
    for block in _blocks(text):
        for line in (ln.removeprefix("$ ").strip() for ln in block.splitlines()):
            line = re.split(r"\s#\s|\s{2,}#", line)[0]
            for match in _PHASEGATE.finditer(line):
                rest = re.split(r"\||&&|;|\)|\s>|\s2>", line[match.end() :])[0]
                words = shlex.split(rest)
                if words and not any(w[0] == "[" or "…" in w or "..." in w for w in words):
                    found.append(words)
    return found


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_readme_commands_parse() -> None:
    """Every command the README shows is one the CLI takes, as written."""
    commands = _commands(README.read_text(encoding="utf-8"))
    assert len(commands) >= 40, commands
    parser = cli.build_parser()
    for argv in commands:
        words = cli.tasks.legacy_words(cli.orchestrate.default_subcommand(argv))
        try:
            parser.parse_args(words)
        except SystemExit:
            pytest.fail(f"the README's `phasegate {shlex.join(argv)}` does not parse")


def test_readme_lists_every_command_help_lists() -> None:
    """ "`phasegate --help` lists every command: ..." names exactly the CLI's commands
    and, where it names subcommands, all of them."""
    text = README.read_text(encoding="utf-8")
    start = text.index("`phasegate --help` lists every command:")
    listing = " ".join(text[start : text.index("Read commands take", start)].split())
    listing = listing.removeprefix("`phasegate --help` lists every command:")
    named: dict[str, set[str]] = {}
    for match in re.finditer(r"`([\w-]+)(?: ([\w-]+))?`(?: \(((?:`[\w-]+`,? ?)+)\))?", listing):
        command, sub, group = match.groups()
        subs = named.setdefault(command, set())
        subs.update({sub} if sub else set())
        subs.update(re.findall(r"`([\w-]+)`", group or ""))
    parser = cli.build_parser()
    commands = _subcommands(parser)
    assert set(named) == set(commands), set(named) ^ set(commands)
    for command, subs in named.items():
        real = set(_subcommands(commands[command]))
        assert subs <= real, (command, subs - real)
        grouped = re.search(rf"`{command}` \(", listing)
        if grouped:  # a list in parentheses names every subcommand
            assert subs == real, (command, real - subs)


def test_readme_exit_codes_are_the_clis() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    codes = re.search(r"Exit codes: 0 (\w+), 1 (\w+), 2 (gate failed) .*?, 3 (refused)", text)
    assert codes, "the README's exit codes sentence changed"
    assert codes.groups() == ("ok", "error", "gate failed", "refused")
    assert (cli.EXIT_OK, cli.EXIT_ERROR, cli.EXIT_GATE_FAILED, cli.EXIT_REFUSED) == (0, 1, 2, 3)


def _walkthrough() -> list[tuple[list[str], int | None]]:
    """Terminal 2 of the README's two-terminal walkthrough: each command with the exit
    code its comment documents (``exit N``; "passes" is 0; none: not documented)."""
    text = README.read_text(encoding="utf-8")
    block = text[text.index("# terminal 2") : text.index("```", text.index("# terminal 2"))]
    steps: list[tuple[list[str], int | None]] = []
    for line in block.replace("\\\n", " ").splitlines():
        code, comment = line.partition("#")[0].strip(), line.partition("#")[2]
        documented = re.search(r"exit (\d)", comment)
        exit_code = int(documented.group(1)) if documented else None
        if exit_code is None and re.match(r"\s*passes\b", comment):
            exit_code = 0
        if not code and steps and exit_code is not None:  # a comment line under its command
            steps[-1] = (steps[-1][0], exit_code)
        elif ".venv/bin/phasegate" in code:
            words = shlex.split(code.split(".venv/bin/phasegate", 1)[1].split("|")[0])
            steps.append((words, exit_code))
    return steps


async def test_readme_walkthrough_exits_as_documented(env, settings_for, run_worker, tmp_path):
    """The two-terminal walkthrough, run against a server and a worker: every exit code
    its comments document is the one the CLI returns."""
    settings = settings_for()
    cli_env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "PHASEGATE_"))}
    cli_env.update(
        TEMPORAL_ADDRESS=env.client.service_client.config.target_host,
        PHASEGATE_TASK_QUEUE=settings.task_queue,
        PHASEGATE_HOME=settings.home,
        PHASEGATE_CONFIG_DIR=str(tmp_path / "config"),
    )

    def run(words: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "phasegate.client.cli", *words],
            cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    steps = _walkthrough()
    documented = [code for _, code in steps if code is not None]
    assert sorted(set(documented)) == [0, 2, 3], steps
    session = ""
    async with run_worker(settings):
        for words, expected in steps:
            if words[0] in ("approve", "watch"):  # the lead's key; a live view
                continue
            words = [session if w == "$S" else w for w in words]
            done = await asyncio.to_thread(run, words)
            assert "Traceback" not in done.stderr, done.stderr
            if words[0] == "start":
                assert done.returncode == 0, done.stderr
                session = json.loads(done.stdout)["session_id"]
                # submit for a phase not reached: refused, exit 3 as for `phase`
                ahead = await asyncio.to_thread(run, ["submit", session, "--phase", "2"])
                assert ahead.returncode == cli.EXIT_REFUSED, ahead.stderr
            elif expected is not None:
                assert done.returncode == expected, (words, done.stdout, done.stderr)
        usage = await asyncio.to_thread(run, ["phase", session, "one"])  # never 2 (gate)
        assert usage.returncode == cli.EXIT_ERROR and usage.stderr.startswith("usage:")
