"""Verify checks contained (issue 8): each attack is first reproduced without phasegate
(the raw command really does deselect, escape, shadow or leak), then shown refused
through the activity, on a real workspace with real subprocesses and real pytest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from phasegate.activities._verify_run import interpreter_argv, sweep_scratch
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.verify import VerifyRequest, parse_checks
from phasegate.domain.verify_contain import redact

PY = sys.executable
KEY_NOTE = "[redacted: looks like private key material]"
PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
FAILING = "def test_total():\n    assert 1 + 1 == 3, 'total is off by one'\n"
PASSING = "def test_ok(tmp_path):\n    assert tmp_path.exists()\n"


def run(ws: Path, check: dict[str, Any], evidence: dict[str, Any] | None = None, **kw: Any):
    activities = VerifyActivities(max_output_chars=kw.pop("limit", 2000))
    req = VerifyRequest(workspace=str(ws), checks=[check], evidence=evidence or {}, **kw)
    (result,) = activities.run_verify_checks(req).results
    return result


def raw(ws: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The attack without phasegate: the same command, run as is."""
    return subprocess.run(argv, cwd=ws, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A workspace whose suite fails, next to a folder outside it with a passing one."""
    (tmp_path / "ws" / "tests").mkdir(parents=True)
    (tmp_path / "ws" / "tests" / "test_total.py").write_text(FAILING)
    (tmp_path / "ws" / "tests" / "test_ok.py").write_text(PASSING)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "test_elsewhere.py").write_text("def test_fine():\n    pass\n")
    return tmp_path / "ws"


# --------------------------------------------------------------------------- 1. typed arguments


def test_at_file_cannot_feed_pytest_options(ws: Path) -> None:
    """`@args.txt` makes pytest read options: deselect the failing test, write a report
    and clear a directory outside the workspace. Refused, typed or not."""
    victim = ws.parent / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("precious")
    report = ws.parent / "written.xml"
    (ws / "args.txt").write_text(
        f"--deselect=tests/test_total.py::test_total\n--basetemp={victim}\n--junitxml={report}\n"
    )
    attack = raw(ws, [*PYTEST, "@args.txt"])
    assert attack.returncode == 0 and "1 deselected" in attack.stdout  # green, falsely
    assert report.exists() and not (victim / "data.txt").exists()  # and it reached out
    report.unlink()
    (victim / "data.txt").write_text("precious")
    for slot in ("{{ evidence.test_path }}", "{{ evidence.test_path | path }}"):
        r = run(ws, {"kind": "command", "argv": [*PYTEST, slot]}, {"test_path": "@args.txt"})
        assert not r.passed and r.exit_code is None, r.message
        assert r.message.startswith("argv[6]: evidence.test_path = '@args.txt' is refused")
        assert "file of options" in r.message and "send " in r.message
    assert (victim / "data.txt").read_text() == "precious" and not report.exists()


@pytest.mark.parametrize(
    "payload", ["--deselect=tests/test_total.py::test_total", "-k=not test_total", "-x"]
)
def test_option_looking_values_are_refused(ws: Path, payload: str) -> None:
    attack = raw(ws, [*PYTEST, "tests", payload])
    assert attack.returncode in (0, 1)  # pytest took it as an option, not a path
    assert "file or directory not found" not in attack.stdout + attack.stderr
    for slot in ("{{ evidence.p }}", "{{ evidence.p | path }}", "{{ evidence.p | name }}"):
        r = run(ws, {"kind": "command", "argv": [*PYTEST, "tests", slot]}, {"p": payload})
        assert not r.passed and "it starts with '-'" in r.message and "option" in r.message


def test_paths_out_of_the_workspace_do_not_run(ws: Path) -> None:
    """`/abs`, `../` and a symlink run another folder's (passing) tests."""
    outside = ws.parent / "outside"
    (ws / "elsewhere").symlink_to(outside)
    for escape in (str(outside), "../outside", "elsewhere"):
        attack = raw(ws, [*PYTEST, escape])
        assert attack.returncode == 0 and "1 passed" in attack.stdout, escape
    typed = {"kind": "command", "argv": [*PYTEST, "{{ evidence.test_path | path }}"]}
    for escape in (str(outside), "../outside", "elsewhere", "tests/../../outside"):
        r = run(ws, typed, {"test_path": escape})
        assert not r.passed and r.exit_code is None, escape
        assert f"resolves to {outside.resolve()}, outside the workspace" in r.message
        assert "send a path inside the workspace" in r.message
    untyped = {**typed, "argv": [*PYTEST, "{{ evidence.test_path }}"]}
    r = run(ws, untyped, {"test_path": str(outside)})
    assert not r.passed and "it is an absolute path" in r.message
    r = run(ws, untyped, {"test_path": "../outside"})
    assert not r.passed and "it climbs out with '..'" in r.message
    r = run(ws, typed, {"test_path": "tests"})  # inside: runs, and fails honestly
    assert not r.passed and r.exit_code == 1 and "total is off by one" in r.excerpt


def test_typed_path_is_resolved_and_cannot_become_an_option(ws: Path) -> None:
    code = "import sys; print(sys.argv[1:])"
    check = {"kind": "command", "argv": [PY, "-c", code, "{{ evidence.p | path }}"]}
    (ws / "sub").mkdir()
    (ws / "link").symlink_to(ws / "tests")
    assert run(ws, check, {"p": "link"}).excerpt.strip() == "['tests']"
    assert run(ws, check, {"p": "sub/../-k"}).excerpt.strip() == "['./-k']"
    assert run(ws, check, {"p": str(ws / "tests")}).excerpt.strip() == "['tests']"
    in_sub = run(ws, {**check, "cwd": "sub"}, {"p": "../tests"})
    assert in_sub.passed and in_sub.excerpt.strip() == "['../tests']"  # from the cwd
    r = run(ws, check, {"p": ["tests"]})
    assert not r.passed and "not a path" in r.message


def test_name_int_and_control_characters(ws: Path) -> None:
    code = "import sys; print(sys.argv[1:])"
    named = {"kind": "command", "argv": [PY, "-c", code, "-k", "{{ evidence.k | name }}"]}
    assert (
        run(ws, named, {"k": "tests/test_ok.py::test_ok"})
        .excerpt.strip()
        .endswith("'tests/test_ok.py::test_ok']")
    )
    for bad in ("not test_total", "a/../../b", ".hidden", "/etc", "x;y"):
        r = run(ws, named, {"k": bad})
        assert not r.passed and "is refused" in r.message and "send a name" in r.message, bad
    counted = {"kind": "command", "argv": [PY, "-c", code, "--maxfail={{ evidence.n | int }}"]}
    assert run(ws, counted, {"n": 3}).excerpt.strip() == "['--maxfail=3']"
    assert run(ws, counted, {"n": "-1"}).excerpt.strip() == "['--maxfail=-1']"
    for bad in (True, 2.5, "3; rm -rf ~", "1e9"):
        r = run(ws, counted, {"n": bad})
        assert not r.passed and "send a whole number" in r.message, bad
    plain = {"kind": "command", "argv": [PY, "-c", code, "{{ evidence.v }}"]}
    for bad in ("tests\n--deselect=x", "tests\x00x", "a\rb"):
        r = run(ws, plain, {"v": bad})
        assert not r.passed and "control character" in r.message
    # data slots stay data: a leading '-' in a regex or a compared value is fine
    (ws / "v.json").write_text('{"delta": -5}')
    compared = {
        "kind": "json_value",
        "path": "v.json",
        "field": "delta",
        "value": "{{ evidence.d }}",
    }
    assert run(ws, compared, {"d": -5}).passed


def test_typed_templates_load_where_they_fit() -> None:
    raw_checks = [
        {"kind": "command", "argv": ["pytest", "{{ evidence.p | path }}", "-k", "{{evidence.k|name}}"]},
        {"kind": "file_exists", "path": "{{ evidence.p | path }}"},
        {"kind": "git_changed", "paths": ["{{ evidence.p | path }}"]},
        {"kind": "json_value", "path": "c.json", "field": "n", "value": "{{ evidence.n | int }}"},
    ]  # fmt: skip
    assert len(parse_checks(raw_checks, source="g.yaml", known_fields=["p", "k", "n"])) == 4
    for check, where in (
        ({"kind": "command", "argv": ["t"], "stdout_pattern": "{{ evidence.p | path }}"},
         "verify[0].stdout_pattern"),
        ({"kind": "command", "argv": ["t", "{{ evidence.p | upper }}"]}, "verify[0].argv[1]"),
        ({"kind": "command", "argv": ["t", "{{ evidence.p | path | int }}"]}, "verify[0].argv[1]"),
    ):  # fmt: skip
        with pytest.raises(GateDefinitionError) as info:
            parse_checks([check], source="g.yaml")
        assert info.value.where == f"g.yaml: {where}"
        assert "| path" in (info.value.hint or "") or "| name" in (info.value.hint or "")


# --------------------------------------------------------------------------- 2. interpreters


def test_a_workspace_pytest_py_does_not_shadow_pytest(ws: Path) -> None:
    (ws / "pytest.py").write_text("print('1 passed')\nraise SystemExit(0)\n")
    attack = raw(ws, [*PYTEST, "tests"])
    assert attack.returncode == 0 and attack.stdout.strip() == "1 passed"  # no test ran
    check = {"kind": "command", "argv": [*PYTEST, "tests"], "stdout_pattern": r"\d+ passed"}
    r = run(ws, check)
    assert not r.passed and r.exit_code == 1, r.excerpt
    assert "1 failed, 1 passed" in r.excerpt and "total is off by one" in r.excerpt
    boot = interpreter_argv(["python3", "-m", "pytest", "-q"])
    assert boot[:2] == ["python3", "-c"] and boot[3:] == ["-m", "pytest", "-q"]
    for argv, expected in (
        ([PY, "-X", "dev", "-mpytest", "tests"], [PY, "-X", "dev", "-c", boot[2], "-m", "pytest", "tests"]),
        ([PY, "-umpytest"], [PY, "-u", "-c", boot[2], "-m", "pytest"]),
        (["python3.11", "-Werror", "-c", "pass", "x"], ["python3.11", "-Werror", "-c", boot[2], "-c", "pass", "x"]),
    ):  # fmt: skip
        assert interpreter_argv(argv) == expected
    r = run(ws, {"kind": "command", "argv": [PY, "-X", "dev", "-umpytest", "-q", "tests"]})
    assert not r.passed and "1 failed" in r.excerpt


def test_workspace_modules_still_import_but_cannot_stand_in(ws: Path) -> None:
    """`python -m pytest` finds the workspace's own modules (flat layout, no conftest), and
    `-c` code too; a module only the workspace has is not run as an installed one."""
    (ws / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (ws / "tests" / "test_total.py").write_text("from calc import add\n\ndef test_add():\n"
                                                "    assert add(1, 2) == 3\n")  # fmt: skip
    r = run(ws, {"kind": "command", "argv": [*PYTEST, "tests"], "stdout_pattern": "2 passed"})
    assert r.passed, r.excerpt
    (ws / "json.py").write_text("raise SystemExit('shadowed')\n")
    code = "import json, calc, sys; print(json.dumps([calc.add(1, 1)]), sys.argv[1:])"
    r = run(ws, {"kind": "command", "argv": ["python3", "-c", code, "x"]})
    assert r.passed and r.excerpt.strip() == "[2] ['x']", r.excerpt
    (ws / "fakecheck.py").write_text("print('all good')\n")
    assert raw(ws, [PY, "-m", "fakecheck"]).stdout.strip() == "all good"
    r = run(ws, {"kind": "command", "argv": [PY, "-m", "fakecheck"]})
    assert not r.passed and r.exit_code == 1 and "No module named fakecheck" in r.excerpt
    assert interpreter_argv(["python3", "tools/check.py"]) == ["python3", "tools/check.py"]
    assert interpreter_argv(["pytest", "-q"]) == ["pytest", "-q"]
    r = run(ws, {"kind": "command", "argv": ["/usr/bin/env", PY, "-m", "fakecheck"]})
    assert not r.passed and "No module named fakecheck" in r.excerpt


# --------------------------------------------------------------------------- 3. environment

PLANTED = {
    "PHASEGATE_SECRET": "pg-secret-value-123",
    "TEMPORAL_API_KEY": "temporal-key-value-456",
    "OPENAI_API_KEY": "sk-openai-value-789",
    "AWS_SECRET_ACCESS_KEY": "aws/secret+value/000",
    "DATABASE_URL": "postgres://app:hunter2pass@db/app",
}


def test_checks_get_a_scrubbed_environment(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    code = "import json, os; print(json.dumps(dict(os.environ)))"
    check = {"kind": "command", "argv": [PY, "-c", code], "env": {"GATE_FLAG": "on"}}
    attack = raw(ws, [PY, "-c", code])
    assert all(name in attack.stdout for name in PLANTED)  # what it used to see
    r = run(ws, check, limit=100_000)
    seen = json.loads(r.excerpt)
    assert not set(PLANTED) & set(seen)
    assert not any(value in r.excerpt for value in PLANTED.values())
    assert seen["GATE_FLAG"] == "on" and seen["PATH"] == os.environ["PATH"]
    assert seen["LC_ALL"] == "C.UTF-8"
    assert set(seen) <= {"PATH", "LANG", "LANGUAGE", "TZ", "USER", "LOGNAME", "HOME",
                         "TMPDIR", "TEMP", "TMP", "GATE_FLAG"} | {k for k in seen if k.startswith("LC_")}  # fmt: skip
    assert seen["HOME"] != os.environ.get("HOME") and not Path(seen["HOME"]).exists()  # removed


LEAKING_WORKER = """\
import sys
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.verify import VerifyRequest
code = "import os; print(open(f'/proc/{os.getppid()}/environ').read().replace(chr(0), chr(10)))"
check = {"kind": "command", "argv": [sys.executable, "-c", code]}
req = VerifyRequest(workspace=sys.argv[1], checks=[check])
print(VerifyActivities(max_output_chars=10**6).run_verify_checks(req).results[0].excerpt)
"""


def test_output_redacts_the_workers_scrubbed_values(ws: Path) -> None:
    """The command's own code reads the worker's environment from /proc (same OS user):
    the values do not come back; only another OS user stops the read itself."""
    env = {**os.environ, **PLANTED}
    done = subprocess.run([PY, "-c", LEAKING_WORKER, str(ws)], env=env, capture_output=True,
                          text=True, timeout=120, check=True)  # fmt: skip
    assert "PHASEGATE_SECRET=[redacted $PHASEGATE_SECRET]" in done.stdout
    assert "DATABASE_URL=[redacted $DATABASE_URL]" in done.stdout
    assert not any(value in done.stdout for value in PLANTED.values())


def test_pass_env_lets_named_variables_through_never_credentials(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOL_HOME", "/opt/tool")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x-123456")
    code = "import os; print(os.environ.get('TOOL_HOME'), os.environ.get('OPENAI_API_KEY'))"
    activities = VerifyActivities(pass_env=["TOOL_HOME"])
    req = VerifyRequest(workspace=str(ws), checks=[{"kind": "command", "argv": [PY, "-c", code]}])
    assert activities.run_verify_checks(req).results[0].excerpt.strip() == "/opt/tool None"
    for name in ("OPENAI_API_KEY", "PHASEGATE_CONFIG_DIR", "TEMPORAL_ADDRESS", "GITHUB_TOKEN"):
        with pytest.raises(ValueError, match="credential or phasegate's own settings"):
            VerifyActivities(pass_env=[name])


# --------------------------------------------------------------------------- 4. key material


def _plant_key(home: Path) -> tuple[Path, str, str]:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()  # fmt: skip
    path = home / ".config" / "phasegate" / "keys" / "lead.key"
    path.parent.mkdir(parents=True)
    path.write_text(pem)
    return path, pem, pem.splitlines()[1]


CAT = "import sys; print(open(sys.argv[1]).read())"


def test_key_files_cannot_be_read_or_returned(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = ws.parent / "home"
    keyfile, _, body = _plant_key(home)
    monkeypatch.setenv("HOME", str(home))
    (ws / "key_link").symlink_to(keyfile)
    rel = os.path.relpath(keyfile, ws)
    for path in (rel, str(keyfile), "key_link"):
        for check, evidence in (
            ({"kind": "file_contains", "path": path, "pattern": "PRIVATE"}, {}),
            ({"kind": "json_value", "path": path, "field": "x"}, {}),
            ({"kind": "file_contains", "path": "{{ evidence.f }}", "pattern": "."}, {"f": path}),
            ({"kind": "command", "argv": [PY, "-c", CAT, "{{ evidence.f | path }}"]}, {"f": path}),
        ):
            r = run(ws, check, evidence)
            assert not r.passed and "outside the workspace" in r.message, (path, r.message)
            assert body not in r.message + r.excerpt
    # The workspace's own code reading the key: ~ is a scratch HOME, and what it prints
    # is redacted (a sealed deployment keeps the file out of reach: docs/sealed-verify.md).
    home_read = "from pathlib import Path; print((Path.home() / '.config/phasegate/keys/lead.key').read_text())"
    r = run(ws, {"kind": "command", "argv": [PY, "-c", home_read]})
    assert not r.passed and "FileNotFoundError" in r.excerpt
    for reader in (f"print(open({str(keyfile)!r}).read())", "print(open('key_link').read())"):
        assert body in raw(ws, [PY, "-c", reader]).stdout  # the attack, unredacted
        r = run(ws, {"kind": "command", "argv": [PY, "-c", reader]})
        assert r.passed and body not in r.excerpt and "PRIVATE KEY" not in r.excerpt
        assert "[redacted: looks like private key material]" in r.excerpt


def test_redact_finds_keys_in_every_shape() -> None:
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()  # fmt: skip
    body = pem.splitlines()[1]
    import base64

    raw_key = base64.b64encode(key.private_bytes_raw()).decode()
    for text in (
        f"before\n{pem}after",
        f"before\n{pem[:40]}",  # cut after the header
        f"AAAA\n{pem[30:]}",  # cut before it
        f"x = {body} y",  # a bare PKCS#8 body
        f"seed: {raw_key}\n",  # a bare 32-byte key
    ):
        out = redact(text)
        assert body not in out and raw_key not in out and "[redacted" in out, text
    cut = (
        "head\n-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\n\nMIIEow\n… [9 omitted] …\n"
    )
    out = redact(cut + "QUJD\n-----END RSA PRIVATE KEY-----\ntail")
    assert out.splitlines() == ["head", KEY_NOTE, "… [9 omitted] …", KEY_NOTE, "tail"]
    assert redact("before\nafter 1 passed in 0.1s") == "before\nafter 1 passed in 0.1s"
    dump = "\n".join(["QUJD" * 19] * 200_000) + "\n-----END PRIVATE KEY-----\n"  # 15 MB
    start = time.monotonic()
    assert redact(dump).strip() == KEY_NOTE and time.monotonic() - start < 5  # linear
    assert (
        redact("token=abcdefgh1234", {"MY_TOKEN": "abcdefgh1234"}) == "token=[redacted $MY_TOKEN]"
    )


# --------------------------------------------------------------------------- git


def test_workspace_git_config_cannot_run_fsmonitor(tmp_path: Path) -> None:
    ident = ["-c", "user.email=ci@example.com", "-c", "user.name=CI"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", *ident, "commit", "-q", "--allow-empty", "-m", "b"], cwd=tmp_path,
                   check=True)  # fmt: skip
    hook = tmp_path / ".git" / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'PWNED'}\n")
    hook.chmod(0o755)
    subprocess.run(["git", "config", "core.fsmonitor", str(hook)], cwd=tmp_path, check=True)
    (tmp_path / "work.py").write_text("x = 1\n")
    raw(tmp_path, ["git", "diff", "--name-only", "HEAD"])
    assert (tmp_path / "PWNED").exists()  # the attack: git ran the workspace's program
    (tmp_path / "PWNED").unlink()
    r = run(tmp_path, {"kind": "git_changed"})
    assert r.passed and r.excerpt.splitlines() == ["work.py"], r.message
    assert not (tmp_path / "PWNED").exists()


# --------------------------------------------------------------------------- 5. worker death

WORKER = """\
import sys
from phasegate.activities.verify import VerifyActivities
from phasegate.domain.verify import VerifyRequest
code = (
    "import os, subprocess, sys, time\\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\\n"
    "open('grandchild.pid', 'w').write(str(child.pid))\\n"
    "open('child.pid', 'w').write(str(os.getpid()))\\n"
    "time.sleep(300)\\n"
)
check = {"kind": "command", "argv": [sys.executable, "-c", code], "timeout_seconds": 600}
VerifyActivities().run_verify_checks(VerifyRequest(workspace=sys.argv[1], checks=[check]))
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_killed_worker_takes_its_checks_processes_along(tmp_path: Path) -> None:
    worker = subprocess.Popen([PY, "-c", WORKER, str(tmp_path)], cwd=tmp_path)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2 and time.monotonic() < deadline:
            files = [tmp_path / "child.pid", tmp_path / "grandchild.pid"]
            if all(f.exists() and f.read_text() for f in files):
                pids = [int(f.read_text()) for f in files]
            time.sleep(0.05)
        assert len(pids) == 2 and all(_alive(p) for p in pids), "the check did not start"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], "orphaned check processes"
        left = set(Path(tempfile.gettempdir()).glob(f"phasegate-check-{worker.pid}-*"))
        assert len(left) == 1  # its scratch HOME: SIGKILL skipped the clean-up
        assert left <= set(sweep_scratch()) and not any(p.exists() for p in left)
    finally:
        worker.kill()
        worker.wait()
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
