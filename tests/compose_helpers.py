"""Reading docker-compose.yml and docker-compose.sealed.yml as Compose would, without
Docker: variable interpolation, the override merge, mounts, what phasegate's own code
reads from the environment, the Docker build context (.dockerignore) and the versions of
the embedded dev server. Plus a loopback TLS endpoint that records who completed a
mutual-TLS handshake with it."""

from __future__ import annotations

import os
import re
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any, Self

import yaml

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "docker-compose.yml"
SEALED = ROOT / "docker-compose.sealed.yml"
MAKE_CERTS = ROOT / "deploy" / "make-certs.sh"

# Variables the Temporal images read, as documented where they are read (see the
# sources named at the top of docker-compose.sealed.yml).
SERVER_TLS = {  # temporalio/temporal common/config/config_template_embedded.yaml
    "TEMPORAL_TLS_REQUIRE_CLIENT_AUTH",
    "TEMPORAL_TLS_SERVER_CERT",
    "TEMPORAL_TLS_SERVER_KEY",
    "TEMPORAL_TLS_SERVER_CA_CERT",
    "TEMPORAL_TLS_INTERNODE_SERVER_NAME",
    "TEMPORAL_TLS_FRONTEND_CERT",
    "TEMPORAL_TLS_FRONTEND_KEY",
    "TEMPORAL_TLS_FRONTEND_SERVER_NAME",
    "TEMPORAL_TLS_CLIENT1_CA_CERT",
    "TEMPORAL_TLS_CLIENT2_CA_CERT",
}
UI_TLS = {  # temporalio/ui server/config/docker.yaml
    "TEMPORAL_TLS_CA",
    "TEMPORAL_TLS_CERT",
    "TEMPORAL_TLS_KEY",
    "TEMPORAL_TLS_ENABLE_HOST_VERIFICATION",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_DISABLE_WRITE_ACTIONS",
}
CLIENT_TLS = {  # Temporal envconfig (temporalio.envconfig, `temporal options`)
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_NAME",
}

# The other variables those images read, each from the same source as above.
SERVER_ENV = {  # the server's embedded config template (persistence, bind, dynamic config)
    "DB",
    "DB_PORT",
    "POSTGRES_USER",
    "POSTGRES_PWD",
    "POSTGRES_SEEDS",
    "BIND_ON_IP",
    "DYNAMIC_CONFIG_FILE_PATH",
}
SQL_TOOL_ENV = {"SQL_PLUGIN", "SQL_HOST", "SQL_PORT", "SQL_USER", "SQL_PASSWORD"}  # tools/sql
UI_ENV = {"TEMPORAL_ADDRESS", "TEMPORAL_CORS_ORIGINS"}

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}|\$([A-Za-z_]\w*)")


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}`` and ``$$``.

    Raises:
        ValueError: a ``${VAR:?message}`` variable is unset or empty (compose refuses
            the file with that message).
    """

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1) or m.group(5)
        value = env.get(name)
        unset = value is None or (m.group(2) == ":" and value == "")
        if m.group(3) == "?" and unset:
            raise ValueError(f"{name}: {m.group(4)}")
        if m.group(3) == "-" and unset:
            return m.group(4)
        return value or ""

    return _VAR.sub(sub, text)


def load(*files: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The project Compose would run from ``files`` (later ones override earlier ones)."""
    data: dict[str, Any] = {}
    for path in files:
        merge(data, yaml.safe_load(interpolate(path.read_text(encoding="utf-8"), env or {})))
    return data


def raw(path: Path) -> dict[str, Any]:
    """One file as written, variables left in place."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


_UNION = {"networks", "profiles", "cap_drop", "cap_add", "tmpfs", "security_opt", "ports"}


def merge(into: dict[str, Any], override: dict[str, Any]) -> None:
    """Compose's override merge for the keys these files use: ``environment`` and
    ``depends_on`` by key, ``volumes`` by container path, lists such as ``networks``
    as a union, anything else (``command``, ``user``, ``image``) replaced."""
    for key, value in override.items():
        if key != "services":
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                into[key].update(value)
            else:
                into[key] = value
            continue
        services = into.setdefault("services", {})
        for name, svc in value.items():
            target = services.setdefault(name, {})
            for k, v in svc.items():
                if k == "environment":
                    target[k] = {**env_of(target), **env_of({k: v})}
                elif k == "depends_on":
                    target[k] = {**_depends(target.get(k)), **_depends(v)}
                elif k == "volumes":
                    mounts = {m.split(":")[1]: m for m in target.get(k, [])}
                    mounts.update({m.split(":")[1]: m for m in v})
                    target[k] = list(mounts.values())
                elif k in _UNION:
                    target[k] = [*target.get(k, []), *(x for x in v if x not in target.get(k, []))]
                else:
                    target[k] = v


def _depends(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    return {name: {"condition": "service_started"} for name in value or []}


def env_of(service: dict[str, Any]) -> dict[str, str]:
    """``environment`` as a mapping, whichever of the two forms is used."""
    value = service.get("environment") or {}
    if isinstance(value, list):
        return dict(item.split("=", 1) for item in value)
    return {k: str(v) for k, v in value.items()}


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``volumes`` as (source, container path, mode)."""
    out = []
    for m in service.get("volumes") or []:
        source, target, *mode = str(m).split(":")
        out.append((source, target, mode[0] if mode else "rw"))
    return out


def host_path(service: dict[str, Any], path: str) -> Path:
    """Where a container path of ``service`` lives on the host, through its bind mounts.

    Raises:
        AssertionError: no mount holds ``path``.
    """
    for source, target, _ in mounts(service):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return Path(source) / path[len(target) :].lstrip("/")
    raise AssertionError(f"{path} is not on any volume of the service")


def code_env_names() -> set[str]:
    """Every environment variable phasegate's own code reads (``env.get("X")``,
    ``os.environ["X"]``, ``getenv("X")``), outside tests."""
    pattern = re.compile(r"""(?:env|environ|getenv)(?:\.get)?[(\[]\s*["']([A-Z][A-Z0-9_]+)["']""")
    skip = {"tests", "build", "dist", "docs", "library"}
    dirs = [d for d in ROOT.iterdir() if d.is_dir() and d.name not in skip and d.name[0] != "."]
    files = [*ROOT.glob("*.py"), *(f for d in dirs for f in d.rglob("*.py"))]
    names: set[str] = set()
    for path in files:
        names.update(pattern.findall(path.read_text(encoding="utf-8")))
    return names


def image_uid() -> int:
    """The uid of the phasegate image's user (Dockerfile ``useradd --uid N``)."""
    return image_users()["phasegate"]


def image_users() -> dict[str, int]:
    """Users the Dockerfile creates (``useradd ... --uid N NAME``), name -> uid."""
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    found = re.findall(r"useradd\b[^\n]*?--uid (\d+) ([a-z][-a-z0-9]*)", text)
    assert found, "Dockerfile creates no user with --uid"
    return {name: int(uid) for uid, name in found}


def shell_script(service: str) -> str:
    """A one-shot service's ``sh -c`` script in docker-compose.yml, as the container runs
    it (Compose turns ``$$`` into ``$``)."""
    return raw(BASE)["services"][service]["command"][0].replace("$$", "$")


def dev_server_versions() -> dict[str, str]:
    """``temporal --version`` of the embedded dev server: {"cli", "server", "ui"}."""
    from phasegate.client.devserver import temporal_binary

    out = subprocess.run(
        [temporal_binary(), "--version"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    match = re.search(r"version (\S+) \(Server (\S+), UI (\S+)\)", out)
    assert match, out
    return dict(zip(("cli", "server", "ui"), match.groups(), strict=True))


def build_context(root: Path = ROOT) -> list[str]:
    """Files ``docker build`` sends from ``root`` after .dockerignore (posix, relative).

    Patterns as Docker reads them: relative to the context root (a leading ``/`` is
    dropped), ``*`` and ``?`` within one path element, ``**`` across elements, and a match
    on a folder excludes what it holds. Exceptions (``!``) are not supported: the file
    uses none, and a folder excluded here is not walked.
    """
    lines = (root / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [ln.strip().strip("/") for ln in lines if ln.strip() and not ln.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "build_context() handles no '!'"
    regexes = [re.compile(_glob_regex(p)) for p in patterns]

    def excluded(rel: str) -> bool:
        return any(r.fullmatch(rel) for r in regexes)

    files = []
    for folder, dirs, names in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = [d for d in dirs if not excluded(prefix + d)]
        files += [prefix + n for n in names if not excluded(prefix + n)]
    return sorted(files)


def _glob_regex(pattern: str) -> str:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return out


class TlsProbe:
    """A loopback TLS endpoint that requires a client certificate signed by ``ca`` and
    records each connection: ``("ok", CN)`` or ``("refused", reason)``. It speaks no
    gRPC, so a Temporal client fails after the handshake; the record says whether the
    handshake (the part mutual TLS decides) went through."""

    def __init__(self, cert: Path, key: Path, ca: Path) -> None:
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.load_verify_locations(ca)
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.set_alpn_protocols(["h2"])
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                with self.ctx.wrap_socket(conn, server_side=True) as tls:
                    subject = dict(x[0] for x in tls.getpeercert()["subject"])
                    self.seen.append(("ok", subject["commonName"]))
            except (ssl.SSLError, OSError) as exc:
                self.seen.append(("refused", str(exc)))
                conn.close()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
