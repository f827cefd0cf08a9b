"""The house rules of ARCHITECTURE.md, checked on the source: domain/ stays pure, no
import cycles between phasegate modules, workflows call activities by the function,
and modules and functions stay a readable size (measured after formatting)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("domain", "activities", "workflows", "client", "testing", "agents")
TOP_MODULES = ("__init__.py", "temporal.py", "sealing.py", "worker.py")
# Sizes measured so that squeezing code onto fewer lines does not help: a module as
# ruff formats it with its `# fmt: skip` marks removed, and a function's lines.
MAX_FORMATTED_LINES = 600
MAX_FUNCTION_LINES = 100
LONG_FUNCTIONS: set[str] = set()  # data that reads best whole; named, so a new one is a decision


def _sources() -> Iterator[tuple[str, Path]]:
    for name in TOP_MODULES:
        stem = name.removesuffix(".py")
        yield ("phasegate" if stem == "__init__" else f"phasegate.{stem}"), ROOT / name
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = [pkg, *path.relative_to(ROOT / pkg).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            yield "phasegate." + ".".join(parts), path


MODULES = dict(_sources())


def _module_level_imports(path: Path) -> set[str]:
    """Imports that run when the module is imported (not inside functions or
    ``if TYPE_CHECKING``); ``with workflow.unsafe.imports_passed_through()`` counts."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, (ast.With, ast.Try)):
                visit(node.body)

    visit(tree.body)
    return found


def _all_imports(path: Path) -> set[str]:
    """Every import in the module, lazy ones inside functions included (a lazy import
    hides a cycle from the interpreter, not from the design)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):  # type-only imports are not dependencies: drop them
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _graph() -> dict[str, set[str]]:
    return {
        module: {d for d in _all_imports(path) if d in MODULES and d != module}
        for module, path in MODULES.items()
    }


def test_domain_imports_no_io_or_temporal() -> None:
    banned = ("temporalio", "jinja2", "markdown_it", "httpx", "yaml", "subprocess", "sqlite3")
    for module, path in MODULES.items():
        if not module.startswith("phasegate.domain"):
            continue
        imports = _module_level_imports(path)
        bad = sorted(i for i in imports if i.split(".")[0] in banned)
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"
        outside = sorted(
            i
            for i in imports
            if i.startswith("phasegate.") and not i.startswith("phasegate.domain")
        )
        assert not outside, f"{path.relative_to(ROOT)} reaches out of domain/: {outside}"


def test_no_import_cycles() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)


def test_worker_does_not_import_the_client() -> None:
    imports = _module_level_imports(ROOT / "worker.py")
    assert not [i for i in imports if i.startswith("phasegate.client")]


def test_production_code_never_imports_testing() -> None:
    """STYLE.md 15: test doubles build on the product, never the other way round; what
    the worker runs (the scripted coding agent, the demo models) lives with it."""
    bad = {}
    for module, path in MODULES.items():
        if module.split(".")[:2] == ["phasegate", "testing"]:
            continue
        found = [i for i in _all_imports(path) if i.split(".")[:2] == ["phasegate", "testing"]]
        if found:
            bad[str(path.relative_to(ROOT))] = sorted(found)
    assert not bad, f"production code imports phasegate.testing: {bad}"


def test_workflows_call_activities_by_function() -> None:
    calls = ("execute_activity", "execute_local_activity", "start_activity", "start_local_activity")
    for path in sorted((ROOT / "workflows").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr.startswith(calls)
                and node.args
            ):
                first = node.args[0]
                assert not (isinstance(first, ast.Constant) and isinstance(first.value, str)), (
                    f"{path.name}:{node.lineno} calls activity {first.value!r} by name"
                )


def _formatted_lines(path: Path) -> int:
    """Lines of the module as ruff formats it with every ``# fmt: skip`` removed: what
    squeezing lines onto one cannot shrink."""
    text = path.read_text(encoding="utf-8").replace("  # fmt: skip", "")
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(path), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return len(done.stdout.splitlines())


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES.values()]
    + sorted((ROOT / "tests").glob("*.py"))
    + sorted((ROOT / "tests" / "unit").glob("*.py")),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_modules_stay_cohesive(path: Path) -> None:
    lines = _formatted_lines(path)
    assert lines <= MAX_FORMATTED_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines as formatted; split it by concern"
    )


def test_functions_stay_short() -> None:
    long: list[str] = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_FUNCTION_LINES and f"{module}.{node.name}" not in LONG_FUNCTIONS:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({size})")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: " + ", ".join(long)


_DATA = (ast.Dict, ast.List, ast.Tuple, ast.Set, ast.Constant)


def _is_data(node: ast.expr) -> bool:
    if isinstance(node, _DATA):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"frozenset", "set", "dict", "tuple", "list"}
        and all(_is_data(a) for a in node.args)
    )


def test_fmt_skip_marks_only_data_tables() -> None:
    """`# fmt: skip` keeps a hand-aligned table readable; it never squeezes code."""
    squeezed: list[str] = []
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        marks = {n for n, line in enumerate(text.splitlines(), 1) if line.endswith("# fmt: skip")}
        tables = {
            node.end_lineno
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            and node.value is not None
            and _is_data(node.value)
        }
        squeezed += [f"{path.relative_to(ROOT)}:{n}" for n in sorted(marks - tables)]
    assert not squeezed, "`# fmt: skip` on code, not a data table: " + ", ".join(squeezed)


def test_every_package_is_in_the_wheel() -> None:
    """pyproject lists the packages by hand (the repository root is the package): a new
    folder left out installs nowhere and the installed CLI fails to import."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    skip = {"tests", "bench", "examples", "library", "docs", "deploy", ".venv", ".tools"}
    tops = [d for d in ROOT.iterdir() if d.is_dir() and d.name not in skip]
    found = {"phasegate"} | {
        "phasegate" + "".join("." + part for part in init.parent.relative_to(ROOT).parts)
        for top in tops
        for init in top.rglob("__init__.py")
    }
    assert found <= listed, f"add to pyproject [tool.setuptools] packages: {sorted(found - listed)}"
