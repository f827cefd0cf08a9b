"""Issue 8, the sealed deployment (docs/sealed-deployment.md): docker-compose.sealed.yml
over docker-compose.yml, deploy/make-certs.sh and deploy/sealed.env.example.

No Docker here: the files are interpolated and merged as Compose does. What can run
without Docker does run: make-certs.sh with openssl, Temporal's envconfig on each
service's environment, and phasegate's own `connect` with that environment against a
loopback endpoint that demands a client certificate signed by the deployment's CA.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from compose_helpers import (
    BASE,
    MAKE_CERTS,
    ROOT,
    SEALED,
    TlsProbe,
    env_of,
    host_path,
    image_uid,
    image_users,
    load,
    mounts,
)
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from phasegate.domain.errors import PhasegateError, TemporalUnreachable

CLIENTS = ["worker", "verify", "mcp", "ui", "admin", "operator"]
# service -> the identity whose folder it mounts
IDENTITY = {
    "temporal": "temporal",
    "temporal-ui": "ui",
    "temporal-setup": "admin",
    "worker": "worker",
    "verify": "verify",
    "mcp": "mcp",
}
FOLDERS = (
    "PHASEGATE_CERTS_DIR",
    "PHASEGATE_KEYS_DIR",
    "PHASEGATE_SPECS_DIR",
    "PHASEGATE_WORKSPACE",
)

needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="openssl is not installed (apt-get install openssl)"
)


def make_certs(out: Path, *names: str, force: bool = False) -> subprocess.CompletedProcess[str]:
    argv = ["sh", str(MAKE_CERTS), *(["--force"] if force else []), str(out), *names]
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=120)


def verify(ca: Path, cert: Path, purpose: str) -> bool:
    argv = ["openssl", "verify", "-CAfile", str(ca), "-purpose", purpose, str(cert)]
    return subprocess.run(argv, check=False, capture_output=True, timeout=30).returncode == 0


def cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def common_name(path: Path) -> str:
    return str(cert(path).subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    out = tmp_path_factory.mktemp("sealed") / "certs"
    done = make_certs(out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture
def project(certs: Path, tmp_path: Path) -> dict[str, Any]:
    """The sealed project's services, folders as deploy/sealed.env.example asks."""
    folders = {
        "PHASEGATE_CERTS_DIR": str(certs),
        "PHASEGATE_KEYS_DIR": str(tmp_path / "deploy-keys"),
    }
    folders["PHASEGATE_SPECS_DIR"] = str(tmp_path / "specs")
    folders["PHASEGATE_WORKSPACE"] = str(tmp_path / "workspace")
    return load(BASE, SEALED, env=folders)["services"]


def host_env(service: dict[str, Any]) -> dict[str, str]:
    """The service's environment with container paths of its TLS files made host paths."""
    out = env_of(service)
    for name, value in out.items():
        if name.startswith("TEMPORAL_TLS") and value.startswith("/"):
            out[name] = str(host_path(service, value))
    return out


# ------------------------------------------------------------------- make-certs.sh


@needs_openssl
def test_make_certs_chain_verifies(certs: Path) -> None:
    ca = certs / "ca" / "ca.pem"
    assert verify(ca, certs / "temporal" / "tls.pem", "sslserver")
    san = cert(certs / "temporal" / "tls.pem").extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert {"temporal", "localhost"} <= set(san.value.get_values_for_type(x509.DNSName))
    for name in CLIENTS:
        leaf = certs / name / "tls.pem"
        assert verify(ca, leaf, "sslclient"), name
        assert not verify(ca, leaf, "sslserver"), f"{name}: a client cert must not serve"
        assert common_name(leaf) == name
        assert (certs / name / "ca.pem").read_bytes() == ca.read_bytes()
        eku = cert(leaf).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # The CA key stays in ca/, which no service mounts; no other user reads the folder.
    assert [p.parent.name for p in certs.rglob("ca.key")] == ["ca"]
    assert (certs.stat().st_mode & 0o777) == 0o700
    assert (certs / "ca").stat().st_mode & 0o077 == 0


@needs_openssl
def test_make_certs_rerun_keeps_adds_and_force_starts_over(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert make_certs(out).returncode == 0
    before = (out / "worker" / "tls.pem").read_bytes()
    again = make_certs(out, "alice")  # one more person: only alice is issued
    assert again.returncode == 0, again.stderr
    assert "kept" in again.stdout and (out / "worker" / "tls.pem").read_bytes() == before
    assert verify(out / "ca" / "ca.pem", out / "alice" / "tls.pem", "sslclient")
    bad = make_certs(out, "../x")
    assert bad.returncode == 2 and "cannot name an identity" in bad.stderr
    old_ca = out / "old-ca.pem"
    shutil.copy(out / "ca" / "ca.pem", old_ca)
    assert make_certs(out, force=True).returncode == 0
    assert not verify(old_ca, out / "worker" / "tls.pem", "sslclient")


# ------------------------------------------------------------------- the compose files


@pytest.mark.parametrize("missing", FOLDERS)
def test_sealed_file_names_every_folder(missing: str) -> None:
    """No folder defaults to this checkout: not the build context, not the workspace."""
    folders = {name: f"/srv/{name.lower()}" for name in FOLDERS if name != missing}
    with pytest.raises(ValueError, match=missing):
        load(BASE, SEALED, env=folders)


def test_env_example_sets_compose_file_and_every_folder() -> None:
    text = (ROOT / "deploy" / "sealed.env.example").read_text(encoding="utf-8")
    values = dict(re.findall(r"^([A-Z_]+)=(.*)$", text, re.MULTILINE))
    assert values["COMPOSE_FILE"].split(":") == [BASE.name, SEALED.name]
    assert set(FOLDERS) <= set(values)
    assert load(BASE, SEALED, env=values)["services"]["verify"]


def test_services_mount_their_own_certificate(certs: Path, project: dict[str, Any]) -> None:
    for service, identity in IDENTITY.items():
        paths = {
            k: v for k, v in host_env(project[service]).items() if v.endswith((".pem", ".key"))
        }
        assert paths, f"{service} names no certificate"
        for name, value in paths.items():
            assert Path(value).is_file(), f"{service}: {name} -> {value} does not exist"
            assert Path(value).parent == certs / identity, f"{service} mounts another identity"
        tls = [m for m in mounts(project[service]) if m[0].startswith(str(certs))]
        assert tls and all(mode == "ro" for _, _, mode in tls), f"{service}: mount certs :ro"


@pytest.mark.parametrize("service", ["worker", "verify", "mcp"])
def test_envconfig_loads_each_services_certificate(project: dict[str, Any], service: str) -> None:
    """The names compose sets are the ones Temporal's envconfig reads: the connect
    config holds that service's own certificate, key, CA and server name."""
    from temporalio.envconfig import ClientConfig

    env = host_env(project[service])
    config = ClientConfig.load_client_connect_config(override_env_vars=env, disable_file=True)
    tls = config["tls"]
    assert not isinstance(tls, bool)
    files = {k: Path(v).read_bytes() for k, v in env.items() if k.endswith("_PATH")}
    assert tls.client_cert == files["TEMPORAL_TLS_CLIENT_CERT_PATH"]
    assert tls.client_private_key == files["TEMPORAL_TLS_CLIENT_KEY_PATH"]
    assert tls.server_root_ca_cert == files["TEMPORAL_TLS_SERVER_CA_CERT_PATH"]
    assert tls.domain == "temporal"


def _client_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str]) -> None:
    import os

    for name in [n for n in os.environ if n.startswith("TEMPORAL_")]:
        monkeypatch.delenv(name)
    (tmp_path / "temporal.toml").write_text("")  # no profile of the machine's user
    monkeypatch.setenv("TEMPORAL_CONFIG_FILE", str(tmp_path / "temporal.toml"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)


async def _connect() -> str:
    from phasegate.temporal import connect, load_settings

    with pytest.raises(TemporalUnreachable) as err:  # the probe speaks no gRPC
        await connect(load_settings())
    return str(err.value)


def _probe(certs: Path) -> TlsProbe:
    server = certs / "temporal"
    return TlsProbe(server / "tls.pem", server / "tls.key", certs / "ca" / "ca.pem")


@pytest.mark.parametrize("service", ["worker", "verify", "mcp"])
async def test_phasegate_services_complete_mutual_tls(
    certs: Path, project: dict[str, Any], service: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """`phasegate.temporal.connect` with the service's compose environment verifies the
    server as `temporal` and presents the service's certificate."""
    with _probe(certs) as probe:
        _client_env(
            monkeypatch, tmp_path, {**host_env(project[service]), "TEMPORAL_ADDRESS": probe.address}
        )
        await _connect()
    assert ("ok", service) in probe.seen, probe.seen


@pytest.mark.parametrize("how", ["plaintext", "tls-without-cert", "foreign-ca"])
async def test_a_client_without_the_deployments_certificate_is_refused(
    certs: Path, how: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The agent's sandbox holds no certificate: whatever it tries, no handshake."""
    if how == "foreign-ca":
        assert make_certs(tmp_path / "other").returncode == 0
    ca = str(certs / "ca" / "ca.pem")
    env = {
        "plaintext": {},
        "tls-without-cert": {"TEMPORAL_TLS": "true", "TEMPORAL_TLS_SERVER_CA_CERT_PATH": ca},
        "foreign-ca": {
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(tmp_path / "other" / "worker" / "tls.pem"),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(tmp_path / "other" / "worker" / "tls.key"),
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": ca,
        },
    }[how]
    with _probe(certs) as probe:
        _client_env(monkeypatch, tmp_path, {**env, "TEMPORAL_TLS_SERVER_NAME": "temporal"})
        monkeypatch.setenv("TEMPORAL_ADDRESS", probe.address)
        text = await _connect()
    assert probe.seen and all(result == "refused" for result, _ in probe.seen), probe.seen
    if how != "plaintext":  # the error names the settings to fix, not `phasegate server`
        assert "TEMPORAL_TLS_CLIENT_CERT_PATH" in text, text


def test_agent_sandbox_holds_nothing(project: dict[str, Any], tmp_path: Path) -> None:
    agent = project["agent"]
    assert agent["profiles"] == ["agent"]
    assert not [k for k in env_of(agent) if k.startswith(("TEMPORAL_", "PHASEGATE_"))]
    assert mounts(agent) == [(str(tmp_path / "workspace"), "/workspace", "rw")]
    assert agent["network_mode"] == "service:mcp"  # MCP on its loopback, nothing else
    uid = int(str(agent["user"]).split(":")[0])
    assert uid not in {0, image_uid(), int(str(project["verify"]["user"]).split(":")[0])}
    assert "build" not in agent, "the agent's image is not phasegate's (no library in it)"


def test_verify_worker_runs_checks_as_another_user_with_only_the_workspace(
    project: dict[str, Any], tmp_path: Path
) -> None:
    verify_svc, worker = project["verify"], project["worker"]
    assert verify_svc["command"] == ["phasegate", "worker", "--verify-only"]
    assert worker["command"] == ["phasegate", "worker", "--no-verify"]
    uid = int(str(verify_svc["user"]).split(":")[0])
    assert uid not in {0, image_uid()}, "checks run the agent's code: not root, not `worker`"
    assert str(worker["user"]) == f"{image_uid()}:{image_uid()}", "not PHASEGATE_UID"
    # The image's verify user: its ~/.gitconfig lets git open a workspace it does not own.
    assert image_users()["phasegate-verify"] == uid
    by_target = {target: (source, mode) for source, target, mode in mounts(verify_svc)}
    workspace = str(tmp_path / "workspace")
    # The workspace at the paths the session worker has it: /workspace (the agent's
    # sessions) and its host path (the operators' CLI), and nothing else but the cert.
    assert set(by_target) == {"/workspace", workspace, "/etc/phasegate/tls"}
    seen = {m[:2] for m in mounts(worker) if m[0] == workspace}
    assert {(workspace, "/workspace"), (workspace, workspace)} == seen
    assert {(by_target[t][0], t) for t in ("/workspace", workspace)} == seen
    assert by_target["/etc/phasegate/tls"][1] == "ro"
    assert not {"PHASEGATE_APPROVER_KEYS", "PHASEGATE_LIBRARY"} & set(env_of(verify_svc))
    assert verify_svc["read_only"] is True and verify_svc["cap_drop"] == ["ALL"]
    assert verify_svc["networks"] == ["edge"]


def test_session_worker_requires_signed_decisions(
    project: dict[str, Any], tmp_path: Path, alice: Any
) -> None:
    from phasegate.temporal import load_settings
    from phasegate.worker import load_approver_keys

    worker = project["worker"]
    settings = load_settings(env_of(worker))
    assert settings.allow_unsigned_approvals is False and settings.unsigned_controls is False
    keys_mount = [m for m in mounts(worker) if m[1] == "/etc/phasegate/keys"]
    assert keys_mount and keys_mount[0][2] == "ro"
    approvers = host_path(worker, str(settings.approver_keys_file))
    operators = host_path(worker, str(settings.operator_keys_file))
    # Not registered yet: the worker stops at start and names the file.
    with pytest.raises(PhasegateError) as refused:
        load_approver_keys(str(approvers))
    assert str(approvers) in str(refused.value.details())
    # `phasegate keys export alice > approvers.json`, as docs/sealed-deployment.md says.
    approvers.parent.mkdir(parents=True)
    approvers.write_text(alice.model_dump_json())
    operators.write_text(f"[{alice.model_dump_json()}]")
    assert load_approver_keys(str(approvers)) == [alice]
    assert load_approver_keys(str(operators), "PHASEGATE_OPERATOR_KEYS") == [alice]


def test_specs_reach_only_the_session_worker(project: dict[str, Any], tmp_path: Path) -> None:
    """A spec holds every future phase: it is mounted read-only in the session worker,
    which accepts spec paths there (PHASEGATE_SPEC_ROOTS), and nowhere else."""
    from phasegate.temporal import load_settings

    specs = str(tmp_path / "specs")
    holders = {name for name, svc in project.items() for m in mounts(svc) if m[0] == specs}
    assert holders == {"worker"}
    roots = load_settings(env_of(project["worker"])).spec_roots
    assert roots and all(host_path(project["worker"], r) == Path(specs) for r in roots)
    assert [m[2] for m in mounts(project["worker"]) if m[0] == specs] == ["ro"]


def test_networks_keep_the_database_and_ui_from_the_agent(project: dict[str, Any]) -> None:
    data = load(BASE, SEALED, env={name: "/x" for name in FOLDERS})
    assert data["networks"]["db"]["internal"] is True
    members = {
        net: {name for name, svc in project.items() if net in (svc.get("networks") or [])}
        for net in data["networks"]
    }
    assert members["db"] == {"postgresql", "temporal", "temporal-schema"}
    # The agent shares mcp's network: from there only Temporal's mutual-TLS port.
    assert members["edge"] == {"temporal", "mcp", "verify"}
    assert project["temporal-ui"]["profiles"] == ["ui"]
    assert "ports" not in project["mcp"] and "ports" not in project["verify"]


def test_operator_commands_in_the_docs_parse() -> None:
    """Every `phasegate ...` line in docs/sealed-deployment.md is a valid command, its
    session options validate, and every session it starts prefetches nothing."""
    from phasegate.client.cli import build_parser
    from phasegate.client.cli._evidence import _json_or_text
    from phasegate.domain.session.messages import SessionOptions

    text = (ROOT / "docs" / "sealed-deployment.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.DOTALL)
    lines = [ln.split(" #")[0].split(" > ")[0].strip() for b in blocks for ln in b.splitlines()]
    commands = [shlex.split(ln)[1:] for ln in lines if ln.startswith("phasegate ")]
    assert len(commands) >= 8
    parser = build_parser()
    for argv in commands:
        args = parser.parse_args(argv)
        pairs = [o.split("=", 1) for o in getattr(args, "option", [])]
        options = SessionOptions.model_validate({k: _json_or_text(v) for k, v in pairs})
        if argv[0] == "start":
            prefetch = options.prefetch and not args.no_prefetch
            assert prefetch is False, f"sealed sessions prefetch nothing: {argv}"
    assert [a for a in commands if a[0] == "start"]
