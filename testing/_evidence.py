"""Evidence that passes: the phase's documented example, completed from its gate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from phasegate.agents._evidence import complete_evidence, example_evidence
from phasegate.domain.session.messages import PhaseView

__all__ = [
    "KNOWN_GOOD",
    "SPEC_EXAMPLE_FILES",
    "complete_evidence",
    "example_evidence",
    "known_good",
    "workspace_for",
]


Evidence = Mapping[str, Any] | Callable[[PhaseView], Mapping[str, Any]]


def _documented(view: PhaseView) -> dict[str, Any]:
    return complete_evidence(example_evidence(view), view)


KNOWN_GOOD: dict[str, dict[int | str, Evidence]] = {
    # The examples each phase documents are the contract: the library's tests check
    # they pass their gates, and the suite walks every shipped workflow with them.
    "spec_execution_v1": {"*": _documented},
    "test_generation_v3": {"*": _documented},
    "production_code_v2": {"*": _documented},
}
"""Evidence tables (see :class:`ScriptedAgent`) that pass every shipped workflow."""


def known_good(workflow_type: str) -> dict[int | str, Evidence]:
    """The evidence table for a shipped workflow.

    Raises:
        KeyError: not a shipped workflow (the message lists the shipped ones).
    """
    try:
        return KNOWN_GOOD[workflow_type]
    except KeyError:
        raise KeyError(
            f"{workflow_type!r} is not a shipped workflow; shipped: {', '.join(KNOWN_GOOD)}"
        ) from None


#: The files the dynamic phases of spec_execution_v1 show in their example evidence
#: (``files_changed``); their gate checks each one is a file in the workspace.
SPEC_EXAMPLE_FILES = {
    "src/example.py": "def example() -> int:\n    return 1\n",
    "tests/test_example.py": (
        "from src.example import example\n\n\ndef test_example():\n    assert example() == 1\n"
    ),
}


def workspace_for(workflow_type: str, root: str | Path) -> Path:
    """A workspace the shipped workflow's verify checks accept with its known-good
    evidence: for spec_execution_v1, the files its dynamic phases' example lists
    (:data:`SPEC_EXAMPLE_FILES`; copy the spec in too: a spec is read from inside the
    target); for test_generation_v3, tests that pass (it runs ``python3 -m pytest
    tests``: put an interpreter with pytest first on PATH). Returns the workspace
    folder (created)."""
    ws = Path(root) / f"{workflow_type}-workspace"
    ws.mkdir(parents=True, exist_ok=True)
    if workflow_type == "spec_execution_v1":
        for rel, text in SPEC_EXAMPLE_FILES.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_text(text, encoding="utf-8")
    if workflow_type == "test_generation_v3":
        tests = ws / "tests"
        tests.mkdir(exist_ok=True)
        (tests / "conftest.py").write_text("", encoding="utf-8")
        (tests / "test_repository.py").write_text(
            "def test_add():\n    assert 1 + 1 == 2\n\n\ndef test_list():\n    assert [1][0] == 1\n",
            encoding="utf-8",
        )
    return ws
