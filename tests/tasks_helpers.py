"""Helpers shared by the tasks.md parser tests (test_tasks_parser_*.py).

Fixtures live in ``tests/fixtures/tasks/``; they are read as bytes and decoded so
that line endings reach the parser exactly as written.
"""

from __future__ import annotations

from pathlib import Path

from phasegate.activities.tasks_md import parse_tasks_md
from phasegate.domain.spec import ParsedSpec, SpecPhase, SpecTask

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


def load(name: str) -> str:
    return (FIXTURES / name).read_bytes().decode("utf-8")


def parse(name: str) -> ParsedSpec:
    return parse_tasks_md(load(name), source=name)


def outline(spec: ParsedSpec) -> list[tuple[int, str, list[tuple[str, str, str]]]]:
    """(number, name, [(id, name, status)]) per phase: the shape most tests compare."""
    return [(p.number, p.name, [(t.id, t.name, t.status) for t in p.tasks]) for p in spec.phases]


def task(spec: ParsedSpec, task_id: str) -> SpecTask:
    return next(t for p in spec.phases for t in p.tasks if t.id == task_id)


def phase(spec: ParsedSpec, number: int) -> SpecPhase:
    return next(p for p in spec.phases if p.number == number)
