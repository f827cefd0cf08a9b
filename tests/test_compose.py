"""docker-compose.yml, Dockerfile and .dockerignore, checked as text.

No Docker engine is needed (or available in CI): the files are parsed and
cross-checked against the repository and phasegate's Temporal contract.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from phasegate.domain.settings import SEARCH_ATTRIBUTES, TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


def services() -> dict[str, Any]:
    return compose()["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    """``environment`` as a mapping, whichever of the two compose forms is used."""
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        return dict(item.split("=", 1) for item in raw)
    return {k: str(v) for k, v in raw.items()}


def depends_on(service: dict[str, Any]) -> set[str]:
    raw = service.get("depends_on") or []
    return set(raw)  # a list of names or a mapping keyed by name


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
    raw = cmds[-1].strip()
    return yaml.safe_load(raw) if raw.startswith("[") else shlex.split(raw)


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
    assert "temporal operator search-attribute create" in script
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
    script = command_text(services()["temporal-setup"])
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
