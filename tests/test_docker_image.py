"""The phasegate image (Dockerfile, .dockerignore, deploy/image-check.sh) and
docs/docker.md, without a Docker engine.

What a build would do is done here where it can be: the build context is computed from
.dockerignore as Docker reads it and a wheel is built from exactly those files; the
image's self-check runs against an install; git runs the way the verify checks run it, on
a repository another uid owns, with and without the git config the image gives its verify
user. The Dockerfile's instructions themselves are checked as text.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from compose_helpers import BASE, SEALED, build_context, code_env_names, image_users

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
IMAGE_CHECK = ROOT / "deploy" / "image-check.sh"
VENV_BIN = Path(sys.executable).parent
SHIPPED = ("spec_execution_v1", "test_generation_v3", "production_code_v2")


def run_lines() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    text = DOCKERFILE.replace("\\\n", " ")
    return [ln[4:] for ln in text.splitlines() if ln.startswith("RUN ")]


def dockerfile_cmd() -> list[str]:
    """The last CMD instruction, exec or shell form, as argv."""
    cmds = re.findall(r"^CMD\s+(.+)$", DOCKERFILE, re.MULTILINE)
    assert cmds, "Dockerfile has no CMD"
    line = cmds[-1].strip()
    return yaml.safe_load(line) if line.startswith("[") else shlex.split(line)


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_runs_the_installed_worker() -> None:
    assert re.search(r"^FROM python:3\.11-slim-bookworm$", DOCKERFILE, re.MULTILINE)
    assert re.search(r"^COPY \. \.", DOCKERFILE, re.MULTILINE), "the repository is copied"
    # The installed console script, not a file of the build context: the image runs
    # the wheel (library as package data), as a user's install would.
    assert dockerfile_cmd() == ["phasegate", "worker"]
    assert re.search(r"^USER phasegate$", DOCKERFILE, re.MULTILINE)


def test_image_installs_what_the_shipped_checks_run_and_checks_itself() -> None:
    """git (git_changed, the base commit) from apt, pytest (test_generation_v3's
    `python3 -m pytest` check) from pip, then the package; the self-check runs last,
    after the source tree is gone, so it sees only what was installed."""
    runs = run_lines()
    apt = next(r for r in runs if "apt-get install" in r)
    assert re.search(r"apt-get install -y --no-install-recommends git\b", apt)
    assert "apt-get update" in apt and "rm -rf /var/lib/apt/lists" in apt
    assert any(re.search(r"pip install -r \S+ \"pytest>=8\"", r) for r in runs)
    gate = (ROOT / "library/test_generation_v3/phases/4/gate-definition.yaml").read_text()
    assert '["python3", "-m", "pytest"' in gate, "the check this image is built for"
    install = next(r for r in runs if "pip install ." in r)
    steps = [s.strip() for s in install.split("&&")]
    assert steps[0] == "pip install ."
    assert "install -m 0755 deploy/image-check.sh /usr/local/bin/phasegate-image-check" in steps
    assert steps[-3:] == ["cd /", "rm -rf /src", "phasegate-image-check"], (
        "the check runs last, after the source tree is removed"
    )


def test_users_and_data_folder() -> None:
    users = image_users()
    assert users == {"phasegate": 10001, "phasegate-verify": 10002}
    trust = re.findall(r"git config --file (\S+) --add safe\.directory '\*'", DOCKERFILE)
    assert trust == ["/home/phasegate-verify/.gitconfig"], "only the verify user trusts"
    assert re.search(r"mkdir -p /data && chown phasegate:phasegate /data && chmod 1777", DOCKERFILE)
    assert re.search(r"^WORKDIR /data$", DOCKERFILE, re.MULTILINE)


# --------------------------------------------------------------------------- context


def test_build_context_holds_the_package_and_no_local_state() -> None:
    sent = set(build_context())
    needed = {"pyproject.toml", "README.md", "__init__.py", "worker.py", "temporal.py"}
    needed |= {"py.typed", "deploy/image-check.sh"}
    packages = ("activities", "client", "domain", "testing", "workflows", "library")
    for folder in packages:
        needed |= {
            p.relative_to(ROOT).as_posix()
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }
    assert needed <= sent, sorted(needed - sent)[:10]
    assert not [f for f in sent if f.startswith((".venv/", ".git/", ".phasegate/", "build/"))]


def test_dockerignore_keeps_secrets_out_at_any_depth(tmp_path: Path) -> None:
    shutil.copy(ROOT / ".dockerignore", tmp_path)
    files = [
        "pyproject.toml", "library/x/metadata.json", "deploy/image-check.sh",
        ".env", "deploy/.env", "certs/ca.pem", "deploy/certs/worker/tls.key", "a/b/tls.pem",
        "x/lead.key", ".venv/bin/python", ".git/config", "client/__pycache__/a.pyc",
        "phasegate.egg-info/PKG-INFO", ".hypothesis/examples/1",
    ]  # fmt: skip
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    assert build_context(tmp_path) == sorted(
        [".dockerignore", "deploy/image-check.sh", "library/x/metadata.json", "pyproject.toml"]
    )


def test_wheel_built_from_the_build_context_holds_the_whole_library(tmp_path: Path) -> None:
    """`pip install .` in the image builds from the files Docker sends: the wheel made
    from exactly those holds every file of the shipped library."""
    context = tmp_path / "context"
    sent = build_context()
    for rel in sent:
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, context / rel)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(context)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    names = set(zipfile.ZipFile(next((tmp_path / "dist").glob("phasegate-*.whl"))).namelist())
    library = {f"phasegate/{rel}" for rel in sent if rel.startswith("library/")}
    assert len(library) > 50 and library <= names, sorted(library - names)[:10]
    for wf in SHIPPED:
        assert f"phasegate/library/{wf}/metadata.json" in names


# --------------------------------------------------------------------------- self-check


def _bin_with(tmp_path: Path, **tools: str) -> str:
    """A PATH of one folder holding the named tools (name -> target or script body)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name, target in tools.items():
        if target.startswith("#!"):
            (folder / name).write_text(target)
            (folder / name).chmod(0o755)
        else:
            (folder / name).symlink_to(target)
    return str(folder)


@pytest.mark.parametrize("missing", [None, "git", "pytest", "library"])
def test_image_check_names_what_is_missing(tmp_path: Path, missing: str | None) -> None:
    tools = {
        "git": shutil.which("git") or "/usr/bin/git",
        "grep": shutil.which("grep") or "/bin/grep",
        "python3": str(VENV_BIN / "python3"),
        "phasegate": str(VENV_BIN / "phasegate"),
    }
    if missing == "git":
        del tools["git"]
    if missing == "pytest":
        tools["python3"] = "#!/bin/sh\necho 'No module named pytest' >&2; exit 1\n"
    if missing == "library":  # an install whose wheel lost test_generation_v3
        listed = "TYPE NAME\nspec_execution_v1  Spec\nproduction_code_v2  Prod\n"
        tools["phasegate"] = f"#!/bin/sh\nprintf '{listed}'\n"
    done = subprocess.run(
        ["/bin/sh", str(IMAGE_CHECK)], env={"PATH": _bin_with(tmp_path, **tools)},
        capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False,
    )  # fmt: skip
    if missing is None:
        assert done.returncode == 0, done.stderr
        assert "git, pytest and the shipped library are installed" in done.stdout
        return
    assert done.returncode == 1
    expected = {
        "git": "git is not installed: git_changed checks cannot run",
        "pytest": "pytest is not installed for python3",
        "library": "the shipped workflow test_generation_v3 is not in the installed package",
    }[missing]
    assert expected in done.stderr, done.stderr


# --------------------------------------------------------------------------- git


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")
@pytest.mark.parametrize("trusted", [False, True])
def test_git_changed_on_a_workspace_another_uid_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trusted: bool
) -> None:
    """The sealed verify worker (uid 10002) checks a workspace the agent owns. git
    refuses such a repository, so git_changed fails, unless the user's git config trusts
    it: the Dockerfile's own command, run here, makes the same check pass."""
    from phasegate.activities.verify import VerifyActivities
    from phasegate.domain.verify import VerifyRequest

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for argv in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "base"]):
        subprocess.run(["git", *ident, *argv], cwd=work, check=True, capture_output=True)
    (work / "new.py").write_text("x = 1\n")
    subprocess.run(["chown", "-R", "4242:4242", str(work)], check=True)
    if trusted:
        [command] = re.findall(r"git config --file \S+ --add safe\.directory '\*'", DOCKERFILE)
        argv = shlex.split(command)
        argv[argv.index("--file") + 1] = str(home / ".gitconfig")
        subprocess.run(argv, check=True)
    monkeypatch.setenv("HOME", str(home))
    request = VerifyRequest(workspace=str(work), checks=[{"kind": "git_changed"}])
    [result] = VerifyActivities().run_verify_checks(request).results
    if trusted:
        assert result.passed, result.message
        assert result.excerpt == "new.py"
    else:
        assert not result.passed and "dubious ownership" in result.message, result.message


# --------------------------------------------------------------------------- docs


def test_docs_commands_parse_and_variables_exist() -> None:
    """Every `phasegate ...` line in docs/docker.md is a valid command, and every
    variable it names is read by phasegate, by the compose files, or by an image."""
    from phasegate.client.cli import build_parser

    text = (ROOT / "docs" / "docker.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.DOTALL)
    lines = [ln.split(" #")[0].strip() for b in blocks for ln in b.splitlines()]
    commands = [shlex.split(ln)[1:] for ln in lines if ln.startswith("phasegate ")]
    assert len(commands) >= 5
    parser = build_parser()
    for argv in commands:
        parser.parse_args(argv)
    named = set(re.findall(r"\b((?:PHASEGATE|TEMPORAL)_[A-Z_]+)\b", text))
    compose = set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)", BASE.read_text() + SEALED.read_text()))
    unknown = named - code_env_names() - compose
    assert not unknown, f"docs/docker.md names variables nothing reads: {sorted(unknown)}"
