"""docker-compose.yml, docker-compose.sealed.yml, Dockerfile and .dockerignore, checked
as text.

No Docker engine is needed (or available in CI): the files are parsed, interpolated and
merged as Compose does (tests/compose_helpers.py) and cross-checked against the
repository, phasegate's Temporal contract and the variables the code reads. The sealed
deployment itself: tests/test_sealed_deployment.py.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import uuid
from pathlib import Path
from typing import Any

import yaml
from compose_helpers import (
    BASE,
    CLIENT_TLS,
    SEALED,
    SERVER_TLS,
    UI_TLS,
    code_env_names,
    env_of,
    load,
    raw,
)

from phasegate.domain.settings import SEARCH_ATTRIBUTES, TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = BASE
SEALED_ENV = {
    f"PHASEGATE_{d}": f"/{d.lower()}" for d in ("CERTS_DIR", "KEYS_DIR", "SPECS_DIR", "WORKSPACE")
}


def compose() -> dict[str, Any]:
    return load(BASE)


def services() -> dict[str, Any]:
    return compose()["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    return env_of(service)


def depends_on(service: dict[str, Any]) -> set[str]:
    raw_value = service.get("depends_on") or []
    return set(raw_value)  # a list of names or a mapping keyed by name


def command_text(service: dict[str, Any]) -> str:
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        parts.append(" ".join(value) if isinstance(value, list) else str(value or ""))
    return "\n".join(parts)


def published_ports(service: dict[str, Any]) -> list[str]:
    return [str(p) for p in service.get("ports") or []]


def dockerfile_cmd(text: str) -> list[str]:
    """The last CMD instruction, exec or shell form, as argv."""
    cmds = re.findall(r"^CMD\s+(.+)$", text, re.MULTILINE)
    assert cmds, "Dockerfile has no CMD"
    line = cmds[-1].strip()
    return yaml.safe_load(line) if line.startswith("[") else shlex.split(line)


def setup_script() -> str:
    """temporal-setup's shell script as the container runs it (``$$`` is ``$``)."""
    return raw(BASE)["services"]["temporal-setup"]["command"][0].replace("$$", "$")


# --------------------------------------------------------------------------- compose


def test_services_present() -> None:
    assert set(services()) >= {"postgresql", "temporal", "temporal-ui", "temporal-setup", "worker"}


def test_postgresql_and_temporal() -> None:
    svc = services()
    assert svc["postgresql"]["image"].startswith("postgres:16")
    temporal = svc["temporal"]
    assert temporal["image"].startswith("temporalio/auto-setup:")
    settings = env(temporal)
    assert settings["DB"] == "postgres12"
    assert settings["POSTGRES_SEEDS"] == "postgresql"
    assert settings["POSTGRES_USER"] == env(svc["postgresql"])["POSTGRES_USER"]
    assert settings["POSTGRES_PWD"] == env(svc["postgresql"])["POSTGRES_PASSWORD"]
    assert "postgresql" in depends_on(temporal)
    assert "7233:7233" in published_ports(temporal)


def test_web_ui() -> None:
    ui = services()["temporal-ui"]
    assert ui["image"].startswith("temporalio/ui:")
    assert env(ui)["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "8080:8080" in published_ports(ui)


def test_setup_registers_search_attributes() -> None:
    setup = services()["temporal-setup"]
    assert setup["image"].startswith("temporalio/admin-tools:")
    assert "temporal" in depends_on(setup)
    assert env(setup)["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert str(setup.get("restart", "no")) == "no", "one-shot: must not restart forever"
    script = command_text(setup)
    assert "operator search-attribute create" in script and 'temporal "$@"' in script
    assert SEARCH_ATTRIBUTES == {
        "PhasegateWorkflow": "Keyword",
        "PhasegatePhase": "Int",
        "PhasegateStatus": "Keyword",
    }
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert re.search(rf"\b{name}\s+{kind}\b", script), f"{name} ({kind}) not registered"
    assert re.search(r"already exists", script, re.IGNORECASE), "re-runs must tolerate duplicates"
    assert re.search(r"\b(while|until)\b", script) and "sleep" in script, "retry until server is up"


def test_setup_script_escapes_dollars_for_compose() -> None:
    """Compose interpolates ``$VAR``; shell variables must be written ``$$VAR``."""
    script = command_text(raw(BASE)["services"]["temporal-setup"])
    unescaped = re.findall(r"(?<!\$)\$(?!\$)[({A-Za-z_0-9]", script.replace("$$", ""))
    assert not unescaped, f"unescaped $ in the setup script: {unescaped}"


def test_worker_is_built_here_and_scalable() -> None:
    worker = services()["worker"]
    build = worker["build"]
    context = ROOT / (build["context"] if isinstance(build, dict) else build)
    dockerfile = context / (
        build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
    )
    assert context.resolve() == ROOT
    assert dockerfile.is_file()
    # `docker compose up --scale worker=3` needs both absent.
    assert "container_name" not in worker
    assert "ports" not in worker
    assert "temporal" in depends_on(worker)
    settings = env(worker)
    assert settings["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert settings["PHASEGATE_TASK_QUEUE"] == TASK_QUEUE
    if "command" in worker:
        assert "phasegate worker" in command_text(worker)


def test_worker_waits_for_search_attributes() -> None:
    raw = services()["worker"]["depends_on"]
    assert isinstance(raw, dict)
    assert raw["temporal-setup"]["condition"] == "service_completed_successfully"


def test_no_fixed_container_names_anywhere() -> None:
    """Fixed names clash between checkouts on one host; compose names containers itself."""
    assert not [n for n, s in services().items() if "container_name" in s]


def test_named_volumes_are_declared() -> None:
    data = compose()
    declared = set(data.get("volumes") or {})
    for name, svc in data["services"].items():
        for mount in svc.get("volumes") or []:
            source = str(mount).split(":", 1)[0]
            if not source.startswith((".", "/", "$")):
                assert source in declared, f"{name}: volume {source!r} not declared"


def test_sealed_named_volumes_and_networks_are_declared() -> None:
    data = load(BASE, SEALED, env=SEALED_ENV)
    volumes, networks = set(data.get("volumes") or {}), set(data.get("networks") or {})
    for name, svc in data["services"].items():
        for mount in svc.get("volumes") or []:
            source = str(mount).split(":", 1)[0]
            if not source.startswith((".", "/")):
                assert source in volumes, f"{name}: volume {source!r} not declared"
        assert set(svc.get("networks") or []) <= networks, f"{name}: undeclared network"


def test_image_tags_are_pinned() -> None:
    """A compose file that pulls ``latest`` runs a different Temporal every month."""
    for files in ((BASE,), (BASE, SEALED)):
        for name, svc in load(*files, env=SEALED_ENV)["services"].items():
            if "build" in svc:
                continue
            image = svc["image"]
            repo, _, tag = image.rpartition(":")
            assert repo and tag and "/" not in tag, f"{name}: image {image!r} has no tag"
            assert tag != "latest", f"{name}: image {image!r} is not pinned"
            assert re.match(r"\d", tag), f"{name}: tag {tag!r} names no version"


def _phasegate_services(files: tuple[Path, ...]) -> dict[str, dict[str, Any]]:
    """Services that run phasegate (built from this repository's Dockerfile)."""
    return {n: s for n, s in load(*files, env=SEALED_ENV)["services"].items() if "build" in s}


def test_phasegate_services_set_only_variables_phasegate_reads() -> None:
    """A misspelt variable is silently ignored: PHASEGATE_ALLOW_UNSIGNED_APPROVAL=0 would
    leave the real setting at whatever the image has. Every name a phasegate service
    sets is read by phasegate's code or by Temporal's envconfig (whose reading of the
    TLS names is checked in test_sealed_deployment.py)."""
    known = code_env_names() | CLIENT_TLS
    assert {"PHASEGATE_APPROVER_KEYS", "TEMPORAL_ADDRESS"} <= code_env_names()
    seen = set()
    for files in ((BASE,), (BASE, SEALED)):
        for name, svc in _phasegate_services(files).items():
            unknown = set(env(svc)) - known
            assert not unknown, f"{name} sets variables nothing reads: {sorted(unknown)}"
            seen |= set(env(svc))
    assert CLIENT_TLS <= seen


def test_temporal_images_set_documented_tls_variables() -> None:
    """The server, UI and CLI images each have their own TLS variable names; a name from
    the wrong list is ignored and the service runs without TLS (or fails late)."""
    allowed = {
        "temporal": SERVER_TLS | CLIENT_TLS,  # the server, and auto-setup's own CLI
        "temporal-ui": UI_TLS,
        "temporal-setup": CLIENT_TLS,
    }
    svc = load(BASE, SEALED, env=SEALED_ENV)["services"]
    for name, names in allowed.items():
        tls = {k for k in env(svc[name]) if k.startswith(("TEMPORAL_TLS", "TEMPORAL_DISABLE"))}
        assert tls, f"{name} sets no TLS variable in the sealed deployment"
        assert tls <= names, f"{name}: undocumented {sorted(tls - names)}"
    assert env(svc["temporal"])["TEMPORAL_TLS_REQUIRE_CLIENT_AUTH"] == "true"
    assert env(svc["temporal-ui"])["TEMPORAL_TLS_ENABLE_HOST_VERIFICATION"] == "true"


async def test_setup_script_runs_against_a_real_server(env: Any) -> None:
    """temporal-setup's script, run by sh with the `temporal` CLI against the test dev
    server: it creates a namespace and registers the search attributes, and a second
    run (a restarted stack) succeeds too."""
    from phasegate.client.devserver import temporal_binary

    namespace = f"setup-{uuid.uuid4().hex[:8]}"
    address = env.client.service_client.config.target_host
    variables = {
        "PATH": f"{Path(temporal_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": namespace,
    }

    async def run(*argv: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=variables, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, out.decode()
        return out.decode()

    first = await run("sh", "-c", setup_script())
    assert f"namespace {namespace}: done" in first
    second = await run("sh", "-c", setup_script())
    assert f"namespace {namespace}: already there" in second
    listed = await run(
        temporal_binary(), "operator", "search-attribute", "list",
        "--address", address, "--namespace", namespace,
    )  # fmt: skip
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert re.search(rf"{name}\s+{kind}", listed), listed


# --------------------------------------------------------------------------- image


def test_dockerfile_runs_the_worker() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.MULTILINE)
    assert re.search(r"^COPY \. \.", text, re.MULTILINE), "the repository is copied"
    assert re.search(r"pip install \.", text)
    argv = dockerfile_cmd(text)
    # The installed console script, not a file of the build context: the image runs
    # the wheel (library as package data), as a user's install would.
    assert argv == ["phasegate", "worker"]
    assert "rm -rf /src" in text, "the source tree is removed after the install"


def test_dockerignore_keeps_local_state_out() -> None:
    lines = {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".phasegate", ".git"} <= lines
    # Needed by `pip install .` and at run time.
    for needed in ("pyproject.toml", "worker.py", "library", "domain", "README.md"):
        assert needed not in lines
