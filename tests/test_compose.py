"""docker-compose.yml and docker-compose.sealed.yml, checked as text.

No Docker engine is needed (or available in CI): the files are parsed, interpolated and
merged as Compose does (tests/compose_helpers.py), validated against the Compose
Specification's JSON schema and cross-checked against the repository, phasegate's Temporal contract, the embedded dev server's versions and the
variables each image reads. What runs without Docker does run: the one-shot setup scripts
(namespace and search attributes against a real dev server; schema with a stand-in
temporal-sql-tool). The image: tests/test_docker_image.py. The sealed deployment:
tests/test_sealed_deployment.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_helpers import (
    BASE,
    CLIENT_TLS,
    SEALED,
    SERVER_ENV,
    SERVER_TLS,
    SQL_TOOL_ENV,
    UI_ENV,
    UI_TLS,
    code_env_names,
    dev_server_versions,
    env_of,
    image_uid,
    load,
    mounts,
    raw,
    shell_script,
)

from phasegate.client.devserver import (
    BLOB_SIZE_ERROR_BYTES,
    BLOB_SIZE_WARN_BYTES,
    MAX_SIGNALS_PER_RUN,
)
from phasegate.domain.settings import SEARCH_ATTRIBUTES, TASK_QUEUE

ROOT = Path(__file__).resolve().parent.parent
WORKSPACE = "/srv/src"
BASE_ENV = {"PHASEGATE_WORKSPACE": WORKSPACE}
SEALED_ENV = {
    f"PHASEGATE_{d}": f"/srv/{d.lower()}"
    for d in ("CERTS_DIR", "KEYS_DIR", "SPECS_DIR", "WORKSPACE")
}
ONE_SHOTS = ("temporal-schema", "temporal-setup")


def compose() -> dict[str, Any]:
    return load(BASE, env=BASE_ENV)


def services() -> dict[str, Any]:
    return compose()["services"]


def env(service: dict[str, Any]) -> dict[str, str]:
    return env_of(service)


def depends_on(service: dict[str, Any]) -> set[str]:
    raw_value = service.get("depends_on") or []
    return set(raw_value)  # a list of names or a mapping keyed by name


def condition(service: dict[str, Any], on: str) -> str:
    value = service["depends_on"]
    return value[on]["condition"] if isinstance(value, dict) else "service_started"


def command_text(service: dict[str, Any]) -> str:
    parts = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        parts.append(" ".join(value) if isinstance(value, list) else str(value or ""))
    return "\n".join(parts)


def published_ports(service: dict[str, Any]) -> list[str]:
    return [str(p) for p in service.get("ports") or []]


def tag(service: dict[str, Any]) -> str:
    return service["image"].rpartition(":")[2]


# --------------------------------------------------------------------------- Temporal


@pytest.mark.parametrize(
    "files", [(BASE,), (SEALED,), (BASE, SEALED)], ids=["base", "sealed", "both"]
)
def test_compose_files_follow_the_compose_spec(files: tuple[Path, ...]) -> None:
    """Each file, interpolated as Compose does, and the merged project validate against
    the Compose Specification's JSON schema (tests/fixtures/compose/SOURCES.md): no
    misspelt key, no unknown `depends_on` condition, no wrong type."""
    import jsonschema

    schema = json.loads((ROOT / "tests/fixtures/compose/compose-spec.json").read_text())
    doc = load(*files, env=SEALED_ENV)
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(doc)
    ]
    assert not errors, errors


def test_services_present() -> None:
    assert set(services()) >= {
        "postgresql", "temporal-schema", "temporal", "temporal-ui", "temporal-setup", "worker",
    }  # fmt: skip


def test_temporal_runs_the_production_images_of_the_dev_servers_version() -> None:
    """`auto-setup` is a development image (and no longer built); server, admin-tools and
    UI are pinned to the versions `phasegate server` runs, so a session behaves alike."""
    svc = services()
    sealed = load(BASE, SEALED, env=SEALED_ENV)["services"]
    assert not [n for n, s in {**svc, **sealed}.items() if "auto-setup" in s.get("image", "")]
    versions = dev_server_versions()
    assert svc["temporal"]["image"] == f"temporalio/server:{versions['server']}"
    for name in ONE_SHOTS:
        assert svc[name]["image"] == f"temporalio/admin-tools:{versions['server']}", name
    assert svc["temporal-ui"]["image"] == f"temporalio/ui:{versions['ui']}"
    # Each tag can be overridden from the environment (.env), one variable per image kind.
    pinned = load(BASE, env={**BASE_ENV, "TEMPORAL_VERSION": "1.33.0"})["services"]
    assert tag(pinned["temporal"]) == "1.33.0" and tag(pinned["temporal-setup"]) != "1.33.0"


def test_postgresql_and_temporal() -> None:
    svc = services()
    assert svc["postgresql"]["image"].startswith("postgres:16")
    temporal = svc["temporal"]
    settings = env(temporal)
    assert settings["DB"] == "postgres12"
    assert settings["POSTGRES_SEEDS"] == "postgresql"
    assert settings["POSTGRES_USER"] == env(svc["postgresql"])["POSTGRES_USER"]
    assert settings["POSTGRES_PWD"] == env(svc["postgresql"])["POSTGRES_PASSWORD"]
    assert settings["BIND_ON_IP"] == "0.0.0.0", "the frontend must answer other containers"
    assert condition(temporal, "postgresql") == "service_healthy"
    assert condition(temporal, "temporal-schema") == "service_completed_successfully"
    assert "7233:7233" in published_ports(temporal)


def test_schema_job_prepares_both_databases_before_the_server() -> None:
    svc = services()
    schema = svc["temporal-schema"]
    assert condition(schema, "postgresql") == "service_healthy"
    assert str(schema.get("restart", "no")) == "no", "one-shot: must not restart forever"
    sql = env(schema)
    pg = env(svc["postgresql"])
    assert sql["SQL_PLUGIN"] == env(svc["temporal"])["DB"]
    assert (sql["SQL_HOST"], sql["SQL_PORT"]) == ("postgresql", env(svc["temporal"])["DB_PORT"])
    assert (sql["SQL_USER"], sql["SQL_PASSWORD"]) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"])
    script = shell_script("temporal-schema")
    # The databases the server's template names by default (DBNAME, VISIBILITY_DBNAME unset).
    assert not {"DBNAME", "VISIBILITY_DBNAME"} & set(env(svc["temporal"]))
    assert "temporal:temporal temporal_visibility:visibility" in script
    assert "/etc/temporal/schema/postgresql/v12" in script


def _stub(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


@pytest.mark.parametrize("outcome", ["ready", "postgres-starting", "schema-broken"])
def test_schema_script_runs_each_step_and_fails_loudly(tmp_path: Path, outcome: str) -> None:
    """temporal-schema's script with a stand-in temporal-sql-tool that logs its calls:
    create, setup-schema and update-schema for each database, in that order; retries
    while PostgreSQL refuses connections; a step that keeps failing fails the job (and so
    the server never starts on a half-made schema)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    refusals = {"ready": 0, "postgres-starting": 3, "schema-broken": 0}[outcome]
    _stub(bin_dir, "sleep", "exit 0\n")  # no real waiting in a test
    _stub(
        bin_dir,
        "temporal-sql-tool",
        f"""n=$(cat "{tmp_path}/n" 2>/dev/null || echo 0); echo $((n + 1)) > "{tmp_path}/n"
if [ "$n" -lt {refusals} ]; then echo "dial tcp postgresql:5432: connect: refused" >&2; exit 1; fi
echo "$*" >> "{log}"
case "$*" in *"update-schema"*) [ "{outcome}" = schema-broken ] && {{ echo "bad manifest" >&2; exit 1; }};; esac
exit 0
""",
    )
    done = subprocess.run(
        ["/bin/sh", "-c", shell_script("temporal-schema")],
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    calls = log.read_text().splitlines() if log.exists() else []
    if outcome == "schema-broken":
        assert done.returncode != 0
        assert "bad manifest" in done.stderr and "update-schema failed" in done.stderr
        assert "schema temporal: up to date" not in done.stdout
        return
    assert done.returncode == 0, done.stdout + done.stderr
    versioned = "/etc/temporal/schema/postgresql/v12/{}/versioned"
    assert calls == [
        "--db temporal create",
        "--db temporal setup-schema -v 0.0",
        f"--db temporal update-schema -d {versioned.format('temporal')}",
        "--db temporal_visibility create",
        "--db temporal_visibility setup-schema -v 0.0",
        f"--db temporal_visibility update-schema -d {versioned.format('visibility')}",
    ]
    assert done.stdout.count("waiting for postgresql") == refusals
    assert "schema temporal_visibility: up to date" in done.stdout


def test_dynamic_config_sets_the_dev_servers_limits() -> None:
    """The server reads the mounted file; it sets the blob limits phasegate's dev server
    runs with (client/devserver.py) and keeps workflow updates on."""
    temporal = services()["temporal"]
    path = env(temporal)["DYNAMIC_CONFIG_FILE_PATH"]
    folder, _, name = path.rpartition("/")
    [(source, mode)] = [(s, m) for s, t, m in mounts(temporal) if t == folder]
    assert mode == "ro"
    host = (ROOT / source / name).resolve()
    assert host.is_file() and host.is_relative_to(ROOT / "deploy")
    config = yaml.safe_load(host.read_text())
    assert all(
        isinstance(v, list) and v and all(set(c) <= {"value", "constraints"} for c in v)
        for v in config.values()
    ), "each key holds a list of {value, constraints}"
    assert config["limit.blobSize.error"] == [{"value": BLOB_SIZE_ERROR_BYTES}]
    assert config["limit.blobSize.warn"] == [{"value": BLOB_SIZE_WARN_BYTES}]
    assert config["history.maximumSignalsPerExecution"] == [{"value": MAX_SIGNALS_PER_RUN}]
    assert config["frontend.enableUpdateWorkflowExecution"] == [{"value": True}]


def test_web_ui() -> None:
    ui = services()["temporal-ui"]
    assert env(ui)["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "8080:8080" in published_ports(ui)


def test_setup_registers_search_attributes() -> None:
    setup = services()["temporal-setup"]
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


@pytest.mark.parametrize("service", ONE_SHOTS)
def test_scripts_escape_dollars_for_compose(service: str) -> None:
    """Compose interpolates ``$VAR``; shell variables must be written ``$$VAR``."""
    script = command_text(raw(BASE)["services"][service])
    unescaped = re.findall(r"(?<!\$)\$(?!\$)[({A-Za-z_0-9]", script.replace("$$", ""))
    assert not unescaped, f"unescaped $ in {service}'s script: {unescaped}"


def test_temporal_images_set_only_variables_they_read() -> None:
    """A misspelt variable is silently ignored by the image; every name is one its
    documented template or tool reads (sources: tests/compose_helpers.py)."""
    setup_env = {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "NAMESPACE_RETENTION"}
    allowed = {
        "temporal": SERVER_ENV | SERVER_TLS,
        "temporal-schema": SQL_TOOL_ENV,
        "temporal-ui": UI_ENV | UI_TLS,
        "temporal-setup": setup_env | CLIENT_TLS,
    }
    for files, folders in (((BASE,), BASE_ENV), ((BASE, SEALED), SEALED_ENV)):
        svc = load(*files, env=folders)["services"]
        for name, names in allowed.items():
            assert set(env(svc[name])) <= names, f"{name}: {sorted(set(env(svc[name])) - names)}"
    script = shell_script("temporal-setup")
    for name in setup_env:  # the script's own variables: read by the script
        assert re.search(rf"\$\{{?{name}\b", script), f"temporal-setup never reads {name}"


def test_temporal_images_set_documented_tls_variables() -> None:
    """The server, UI and CLI images each have their own TLS variable names; a name from
    the wrong list is ignored and the service runs without TLS (or fails late). The
    server image has no CLI: the client names are not set on it."""
    allowed = {
        "temporal": SERVER_TLS,
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
    assert not [k for k in env(svc["temporal-schema"]) if k.startswith("TEMPORAL_")]


async def test_setup_script_runs_against_a_real_server(env: Any) -> None:
    """temporal-setup's script, run by sh with the `temporal` CLI against the test dev
    server: it creates a namespace with the retention asked for and registers the search
    attributes, and a second run (a restarted stack) succeeds too."""
    from phasegate.client.devserver import temporal_binary

    namespace = f"setup-{uuid.uuid4().hex[:8]}"
    address = env.client.service_client.config.target_host
    variables = {
        "PATH": f"{Path(temporal_binary()).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": os.environ.get("HOME", "/tmp"),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_NAMESPACE": namespace,
        "NAMESPACE_RETENTION": "168h",
    }

    async def run(*argv: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=variables, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, out.decode()
        return out.decode()

    first = await run("sh", "-c", shell_script("temporal-setup"))
    assert f"namespace {namespace}: done" in first
    second = await run("sh", "-c", shell_script("temporal-setup"))
    assert f"namespace {namespace}: already there" in second
    cli = [temporal_binary(), "operator", "--address", address]
    listed = await run(*cli, "search-attribute", "list", "--namespace", namespace)
    for name, kind in SEARCH_ATTRIBUTES.items():
        assert re.search(rf"{name}\s+{kind}", listed), listed
    described = await run(*cli, "namespace", "describe", "--namespace", namespace)
    assert re.search(r"RetentionTtl\s+168h0m0s", described), described


# --------------------------------------------------------------------------- worker


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
    assert condition(services()["worker"], "temporal-setup") == "service_completed_successfully"


def test_workspace_is_required_and_seen_at_the_host_path_and_at_workspace() -> None:
    """Targets are paths as the worker sees them: the folder is mounted at its own host
    path (what the host CLI passes) and at /workspace (what a client in a container
    passes). Without the variable compose refuses the file and names it."""
    with pytest.raises(ValueError, match="PHASEGATE_WORKSPACE.*docs/docker.md"):
        load(BASE, env={})
    binds = {target: (source, mode) for source, target, mode in mounts(services()["worker"])}
    assert binds[WORKSPACE] == (WORKSPACE, "rw")
    assert binds["/workspace"] == (WORKSPACE, "rw")


def test_worker_runs_as_the_uid_the_user_names() -> None:
    worker = services()["worker"]
    assert worker["user"] == f"{image_uid()}:{image_uid()}", "default: the image's user"
    mine = load(BASE, env={**BASE_ENV, "PHASEGATE_UID": "1000", "PHASEGATE_GID": "1001"})
    assert mine["services"]["worker"]["user"] == "1000:1001"
    build = worker["build"]["args"]
    assert set(build) == {"EXTRA_APT_PACKAGES", "EXTRA_PIP_PACKAGES"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert all(re.search(rf"^ARG {a}=", dockerfile, re.MULTILINE) for a in build)


def test_env_example_names_only_variables_the_compose_file_reads() -> None:
    text = (ROOT / "deploy" / "compose.env.example").read_text(encoding="utf-8")
    names = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", text, re.MULTILINE))
    assert {"PHASEGATE_WORKSPACE", "PHASEGATE_UID", "PHASEGATE_GID"} <= names
    used = set(re.findall(r"\$\{([A-Z][A-Z0-9_]+)", BASE.read_text()))
    assert names <= used, sorted(names - used)
    values = dict(re.findall(r"^([A-Z_]+)=(.*)$", text, re.MULTILINE))
    assert load(BASE, env=values)["services"]["worker"]["user"] == "1000:1000"


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
