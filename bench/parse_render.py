"""Parse and render cost of a big spec: a generated 1,000-task tasks.md.

Parse: markdown-it-py tokenising alone (the parser's own ``MarkdownIt``: the
share no change to the parser's own code removes), ``parse_tasks_md``, and
parse + JSON snapshot (``read_spec``, then ``SnapshotStore.keep``), interleaved round
by round so drift hits all three alike. Render: one dynamic phase of ``spec_execution_v1``,
first render (nothing cached) vs cached. All figures come from this one run.
Targets: parse <= 100 ms p50; cached render <= 2 ms p50.

    .venv/bin/python bench/parse_render.py [--tasks 1000] [--runs 21] [--renders 100]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import _common  # noqa: F401  (sys.path)
from _common import median, ms, pct

from phasegate import SHIPPED_LIBRARY
from phasegate.activities import library as library_module
from phasegate.activities.definitions import DefinitionActivities
from phasegate.activities.library import find_workflow
from phasegate.activities.snapshots import SnapshotStore
from phasegate.activities.tasks_md import generate_tasks_md, parse_tasks_md, read_spec
from phasegate.activities.tasks_md._parse import _MD
from phasegate.domain.session.messages import SessionOptions
from phasegate.domain.session.plan import LoadSessionRequest

WORKFLOW = "spec_execution_v1"
PHASE = 5  # a phase built from the spec (phase 0 is the static planning phase)
PARSE_TARGET = 0.100
RENDER_TARGET = 0.002


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_parse(spec: Path, home: Path, runs: int) -> dict[str, list[float]]:
    """Seconds per run of tokenise / parse / parse + snapshot, interleaved."""
    text = spec.read_text(encoding="utf-8")
    snapshots = home / "snapshots"

    def take() -> None:
        SnapshotStore(str(home)).keep(read_spec(spec))

    steps: dict[str, Callable[[], object]] = {
        "tokenise": lambda: _MD.parse(text),
        "parse": lambda: parse_tasks_md(text, source=str(spec)),
        "parse + snapshot": take,
    }
    for step in steps.values():  # warm-up: imports, regex and validator caches
        step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            for old in snapshots.glob("*.json"):  # take() skips the write if the file exists
                old.unlink()
            samples[name].append(_timed(step))
    return samples


def measure_render(spec: Path, target: Path, home: Path, renders: int) -> tuple[float, list[float]]:
    """(first render, cached renders) of dynamic phase ``PHASE``, in seconds."""
    req = LoadSessionRequest(
        workflow_type=WORKFLOW, target=str(target), options=SessionOptions(spec_path=str(spec))
    )
    ref = DefinitionActivities([SHIPPED_LIBRARY], str(home)).plan(req).ref
    assert ref.static_phase_count <= PHASE < ref.total_phases, ref
    # A second fresh instance shares nothing with the planning one but the disk
    # (the spec snapshot is read back from JSON, templates compile again), and the
    # module-level memo of library files (metadata, gates; keyed by mtime) is
    # emptied, so the first render below is really cold.
    library_module._MEMO.clear()
    acts = DefinitionActivities([SHIPPED_LIBRARY], str(home))

    def render() -> None:
        acts.build_phase(find_workflow(WORKFLOW, [SHIPPED_LIBRARY]), ref, PHASE)

    first = _timed(render)
    cached = [_timed(render) for _ in range(renders)]
    return first, cached


def _verdict(value: float, target: float) -> str:
    return "OK" if value <= target else "OVER TARGET"


def main(n_tasks: int, runs: int, renders: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="phasegate-bench-") as tmp_name:
        tmp = Path(tmp_name)
        target, home = tmp / "project", tmp / "home"
        spec = target / "specs" / "001-generated" / "tasks.md"
        spec.parent.mkdir(parents=True)
        spec.write_text(generate_tasks_md(n_tasks), encoding="utf-8")
        size = spec.stat().st_size
        samples = measure_parse(spec, home, runs)
        first, cached = measure_render(spec, target, home, renders)

    figures = {f"{name}_p50": median(s) for name, s in samples.items()}
    figures |= {f"{name}_best": min(s) for name, s in samples.items()}
    figures |= {"render_first": first, "render_cached_p50": median(cached)}
    load = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} CPUs, 1-min load average {load:.2f} (this run included)")
    print(f"parse: {n_tasks:,} tasks ({size / 1024:.0f} KiB), {runs} interleaved runs each")
    for name, s in samples.items():
        print(
            f"  {name:18s} p50 {ms(median(s)):>10}   best {ms(min(s)):>10}   p95 {ms(pct(s, 95)):>10}"
        )
    ratio = figures["parse_p50"] / figures["tokenise_p50"]
    best_ratio = figures["parse_best"] / figures["tokenise_best"]
    print(
        f"  ratio parse/tokenise = {ratio:.2f}x p50, {best_ratio:.2f}x best"
        "   (tokenise = markdown-it-py alone, same configuration)"
    )
    print(f"render: {WORKFLOW} phase {PHASE} ({len(cached)} cached renders)")
    print(f"  first render        {ms(first):>10}   (fresh instance, library memo cleared)")
    print(
        f"  cached render       p50 {ms(median(cached)):>10}   best {ms(min(cached)):>10}"
        f"   p95 {ms(pct(cached, 95)):>10}"
    )
    print(f"  ratio cached/first = {figures['render_cached_p50'] / first:.3f}")
    print("summary")
    print(
        f"  parse {n_tasks:,} tasks p50 {ms(figures['parse_p50'])}  (target <= "
        f"{ms(PARSE_TARGET)}: {_verdict(figures['parse_p50'], PARSE_TARGET)})"
    )
    print(
        f"  cached render p50 {ms(figures['render_cached_p50'])}  (target <= "
        f"{ms(RENDER_TARGET)}: {_verdict(figures['render_cached_p50'], RENDER_TARGET)})"
    )
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=21, help="parse runs per step (>= 15)")
    parser.add_argument("--renders", type=int, default=100, help="cached renders (>= 50)")
    args = parser.parse_args()
    main(args.tasks, max(args.runs, 15), max(args.renders, 50))
