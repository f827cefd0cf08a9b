"""activities._git_head reads HEAD from the repository's files: the same answer as
``git rev-parse --verify HEAD`` in every layout git writes, without a process."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from phasegate.activities import _git_head
from phasegate.activities._git_head import git_head


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x", "HOME": str(cwd), "PATH": "/usr/bin:/bin",
    }  # fmt: skip
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def rev_parse(folder: Path) -> str | None:
    out = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--verify", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() if out.returncode == 0 else None


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src" / "deep").mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / "a.txt").write_text("a\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


@pytest.fixture(autouse=True)
def no_git_process(monkeypatch):
    """Every answer below comes from the files: asking git fails the test."""

    def refuse(target: str) -> str | None:
        raise AssertionError(f"asked git for {target}")

    monkeypatch.setattr(_git_head, "_from_git", refuse)


def test_a_branch_from_a_loose_ref_and_from_a_subfolder(repo: Path) -> None:
    assert git_head(str(repo)) == rev_parse(repo)
    assert git_head(str(repo / "src" / "deep")) == rev_parse(repo)


def test_packed_refs_and_a_new_commit_after_packing(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    assert git_head(str(repo)) == rev_parse(repo)
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "two")
    assert git_head(str(repo)) == rev_parse(repo)


def test_a_detached_head(repo: Path) -> None:
    first = rev_parse(repo)
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "two")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    assert git_head(str(repo)) == first == rev_parse(repo)


def test_a_linked_worktree_on_its_own_branch(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(other))
    (other / "c.txt").write_text("c\n")
    git(other, "add", ".")
    git(other, "commit", "-q", "-m", "side")
    assert git_head(str(other)) == rev_parse(other) != rev_parse(repo)
    git(repo, "pack-refs", "--all")
    assert git_head(str(other)) == rev_parse(other)


def test_no_commit_yet_no_repository_no_folder(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert git_head(str(fresh)) is None  # not a repository (tmp_path is in none)
    git(fresh, "init", "-q", "-b", "main")
    assert git_head(str(fresh)) is None == rev_parse(fresh)  # an unborn branch
    assert git_head(str(tmp_path / "missing")) is None
    assert git_head("") is None


def test_what_the_files_do_not_answer_plainly_asks_git(repo: Path, monkeypatch) -> None:
    asked: list[str] = []
    monkeypatch.setattr(_git_head, "_from_git", lambda t: asked.append(t) or "from-git")
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/../../etc\n")
    assert git_head(str(repo)) == "from-git"
    (repo / ".git" / "HEAD").write_text("x" * 5000)
    assert git_head(str(repo)) == "from-git"
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text("ref: refs/heads/other\n")
    assert git_head(str(repo)) == "from-git"
    assert len(asked) == 3


def test_a_fifo_or_a_device_in_git_never_blocks_the_load(repo: Path, monkeypatch) -> None:
    """The workspace's owner controls its .git: a FIFO (whose read would block a worker
    thread for good) or a device is not read, and git is not asked either: no commit."""
    asked: list[str] = []
    monkeypatch.setattr(_git_head, "_from_git", lambda t: asked.append(t) or None)
    head = repo / ".git" / "HEAD"
    head.unlink()
    os.mkfifo(head)
    assert git_head(str(repo)) is None
    head.unlink()
    head.symlink_to("/dev/zero")
    assert git_head(str(repo)) is None
    head.unlink()
    head.write_text("ref: refs/heads/main\n")
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    packed.unlink()
    os.mkfifo(packed)
    assert git_head(str(repo)) is None
    assert asked == []


def test_loops_huge_files_and_other_owners(repo: Path, tmp_path: Path, monkeypatch) -> None:
    """A gitdir symlink loop is no commit; a packed-refs past 64 MiB (a sparse file with
    no newline) is not read but asked of git; a repository another user owns is git's
    call (safe.directory), as before."""
    asked: list[str] = []
    monkeypatch.setattr(_git_head, "_from_git", lambda t: asked.append(t) or "from-git")
    looped = tmp_path / "looped"
    looped.mkdir()
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (looped / ".git").write_text(f"gitdir: {tmp_path / 'loop1'}\n")
    assert git_head(str(looped)) is None
    git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    with open(packed, "r+b") as f:
        f.truncate(65 * 1024 * 1024)
    assert git_head(str(repo)) == "from-git"
    packed.write_text("")
    if os.geteuid() == 0:
        os.chown(repo / ".git", 12345, 12345)
        assert git_head(str(repo)) == "from-git"
        assert len(asked) == 2
