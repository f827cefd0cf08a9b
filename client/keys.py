"""Approver and operator keys on disk: create Ed25519 key pairs, load them, sign
approval decisions and session controls; create and rotate seal key rings (the sealed
prefetch's AES keys, ``phasegate.sealing``).

Layout, under :func:`config_dir` (or the ``directory`` argument)::

    keys/                 mode 0700
        <name>.key        private key, PEM (PKCS#8, unencrypted), mode 0600
        <name>.pub        public key, one line of standard base64 (32 raw bytes)

A key's name is the approver (or operator) name its signatures speak for. The private key
never leaves this module; sessions are given only :class:`ApproverKey` (the
``.pub`` contents). File permissions keep other users out, not programs running
as you: an agent that runs under your own account with access to this directory
can read your key, so run agents as another user or in a sandbox that hides it.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import ValidationError

from phasegate.domain.errors import PhasegateError
from phasegate.domain.signing import ApproverKey, canonical_control_message, canonical_message
from phasegate.sealing import KeyRing, load_ring, new_seal_key

__all__ = [
    "config_dir",
    "keys_dir",
    "list_keys",
    "load_private_key",
    "new_key",
    "new_nonce",
    "new_seal_ring",
    "public_key",
    "rotate_seal_ring",
    "sign_control",
    "sign_decision",
]

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PRIVATE_SUFFIX = ".key"
_PUBLIC_SUFFIX = ".pub"
# Windows has no POSIX permission bits worth checking.
_POSIX = os.name == "posix"


def config_dir() -> Path:
    """phasegate's per-user configuration directory.

    Returns:
        ``$PHASEGATE_CONFIG_DIR`` if set, else ``$XDG_CONFIG_HOME/phasegate``, else
        ``~/.config/phasegate``. Empty variables count as unset.
    """
    explicit = os.environ.get("PHASEGATE_CONFIG_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    # The XDG spec says to ignore a relative XDG_CONFIG_HOME.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "phasegate"
    return Path.home() / ".config" / "phasegate"


def keys_dir(directory: Path | None = None) -> Path:
    """The directory holding key files: ``<directory or config_dir()>/keys``."""
    return (directory if directory is not None else config_dir()) / "keys"


def _check_name(name: str, directory: Path | None) -> None:
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise PhasegateError(
            f"invalid key name {name!r}",
            where=str(keys_dir(directory)),
            hint="use 1-64 characters of letters, digits, '_', '.', '-' (your approver name)",
        )


def _ensure_keys_dir(directory: Path | None) -> Path:
    """Create the keys directory (and its parent) as 0700 and return it."""
    path = keys_dir(directory)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        if _POSIX and stat.S_IMODE(path.stat().st_mode) != 0o700:
            # mkdir's mode is masked by the umask, and an older directory may be wider.
            path.chmod(0o700)
    except OSError as err:
        raise PhasegateError(
            f"cannot create the key directory: {err.strerror or err}",
            where=str(path),
            hint="check permissions, or set PHASEGATE_CONFIG_DIR to a directory you own",
        ) from err
    return path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_file(path: Path, data: bytes, *, mode: int, overwrite: bool) -> None:
    """Write ``data`` to ``path``, created with ``mode`` from the first byte.

    Without ``overwrite`` the file is created with ``O_EXCL`` (an existing file,
    or a symlink planted there, makes it fail). With ``overwrite`` a temporary
    file created the same way replaces ``path`` atomically.
    """
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_BINARY", 0)
    target = path if not overwrite else path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(target, flags, mode)
    try:
        try:
            if _POSIX:
                os.fchmod(fd, mode)  # exact mode, whatever the umask
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            os.replace(target, path)
    except BaseException:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def new_key(name: str, *, directory: Path | None = None, overwrite: bool = False) -> ApproverKey:
    """Generate an Ed25519 key pair for approver ``name`` and store it.

    Args:
        name: The approver name; 1-64 characters of ``[A-Za-z0-9_.-]``.
        directory: Configuration directory (default :func:`config_dir`); files go
            to its ``keys/`` subdirectory.
        overwrite: Replace an existing key of that name.

    Returns:
        The new public key, to register with sessions.

    Raises:
        PhasegateError: Invalid name, key already exists, or the files cannot be written.
    """
    _check_name(name, directory)
    folder = _ensure_keys_dir(directory)
    private_path = folder / f"{name}{_PRIVATE_SUFFIX}"
    public_path = folder / f"{name}{_PUBLIC_SUFFIX}"
    if not overwrite:
        for existing in (private_path, public_path):
            if existing.exists() or existing.is_symlink():
                raise PhasegateError(
                    f"a key named {name!r} already exists",
                    where=str(existing),
                    hint="choose another name, or pass overwrite (phasegate keys new "
                    f"{name} --force) to replace it; sessions that trust the old key "
                    "will refuse signatures from the new one",
                )

    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        encoding=serialization.Encoding.PEM,
        format=serialization.PrivateFormat.PKCS8,
        encryption_algorithm=serialization.NoEncryption(),
    )
    raw_public = private.public_key().public_bytes(
        encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
    )
    key = ApproverKey(name=name, public_key=base64.b64encode(raw_public).decode("ascii"))

    current = private_path
    try:
        _write_file(private_path, pem, mode=0o600, overwrite=overwrite)
        current = public_path
        _write_file(
            public_path, (key.public_key + "\n").encode("ascii"), mode=0o644, overwrite=overwrite
        )
    except FileExistsError as err:
        # Lost a race with another writer between the check and the create.
        if current == public_path:
            with contextlib.suppress(OSError):
                private_path.unlink()
        raise PhasegateError(
            f"a key named {name!r} already exists",
            where=str(current),
            hint="choose another name, or pass overwrite to replace it",
        ) from err
    except OSError as err:
        raise PhasegateError(
            f"cannot write the key file: {err.strerror or err}",
            where=str(current),
            hint="check the directory's permissions and free space",
        ) from err
    return key


def load_private_key(name: str, *, directory: Path | None = None) -> Ed25519PrivateKey:
    """Load approver ``name``'s private key, refusing a file others can read.

    Args:
        name: The key's name.
        directory: Configuration directory (default :func:`config_dir`).

    Returns:
        The private key.

    Raises:
        PhasegateError: Missing key, permissions wider than 0600, or not an
            unencrypted PEM Ed25519 key.
    """
    _check_name(name, directory)
    path = keys_dir(directory) / f"{name}{_PRIVATE_SUFFIX}"
    try:
        # Check the permissions of the file actually opened, not of a path that
        # could be swapped between a stat and an open.
        with path.open("rb") as handle:
            mode = stat.S_IMODE(os.fstat(handle.fileno()).st_mode)
            if _POSIX and mode & 0o077:
                raise PhasegateError(
                    f"private key file is accessible by group or others (mode {mode:04o})",
                    where=str(path),
                    hint=f"restrict it with: chmod 600 {path}",
                )
            data = handle.read()
    except FileNotFoundError as err:
        raise PhasegateError(
            f"no private key named {name!r}",
            where=str(path),
            hint=f"create one with: phasegate keys new {name}",
        ) from err
    except OSError as err:
        raise PhasegateError(
            f"cannot read the private key: {err.strerror or err}",
            where=str(path),
            hint="check the file's owner and permissions (chmod 600)",
        ) from err
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as err:
        raise PhasegateError(
            "not an unencrypted PEM private key",
            where=str(path),
            hint=f"recreate it with: phasegate keys new {name} --force",
        ) from err
    if not isinstance(private, Ed25519PrivateKey):
        raise PhasegateError(
            f"private key is {type(private).__name__}, not Ed25519",
            where=str(path),
            hint=f"recreate it with: phasegate keys new {name} --force",
        )
    return private


def public_key(name: str, *, directory: Path | None = None) -> ApproverKey:
    """Approver ``name``'s public key, read from ``<name>.pub``.

    When only the private key exists, the public key is derived from it.

    Args:
        name: The key's name.
        directory: Configuration directory (default :func:`config_dir`).

    Returns:
        The public key.

    Raises:
        PhasegateError: The key is missing or its ``.pub`` file is malformed.
    """
    _check_name(name, directory)
    path = keys_dir(directory) / f"{name}{_PUBLIC_SUFFIX}"
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raw = (
            load_private_key(name, directory=directory)
            .public_key()
            .public_bytes(
                encoding=serialization.Encoding.Raw, format=serialization.PublicFormat.Raw
            )
        )
        return ApproverKey(name=name, public_key=base64.b64encode(raw).decode("ascii"))
    except (OSError, UnicodeDecodeError) as err:
        raise PhasegateError(
            f"cannot read the public key: {err}",
            where=str(path),
            hint=f"recreate it with: phasegate keys new {name} --force",
        ) from err
    try:
        return ApproverKey(name=name, public_key=text)
    except ValidationError as err:
        raise PhasegateError(
            "public key file is not base64 of a 32-byte Ed25519 key",
            where=str(path),
            hint=f"recreate it with: phasegate keys new {name} --force",
        ) from err


def list_keys(*, directory: Path | None = None) -> list[ApproverKey]:
    """Every key in the keys directory, sorted by name.

    Args:
        directory: Configuration directory (default :func:`config_dir`).

    Returns:
        The public keys (an empty list when there is no keys directory).

    Raises:
        PhasegateError: A key file is malformed.
    """
    folder = keys_dir(directory)
    if not folder.is_dir():
        return []
    names = {
        entry.stem
        for entry in folder.iterdir()
        if entry.suffix in (_PRIVATE_SUFFIX, _PUBLIC_SUFFIX) and _NAME.fullmatch(entry.stem)
    }
    return [public_key(name, directory=directory) for name in sorted(names)]


def new_nonce() -> str:
    """A fresh nonce for one signed decision (32 URL-safe characters)."""
    return secrets.token_urlsafe(24)


def sign_decision(
    name: str,
    *,
    session_id: str,
    phase: int,
    decision: str,
    comment: str = "",
    directory: Path | None = None,
    binding: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """Sign an approval decision as approver ``name`` with their private key.

    Pass ``binding=status.approval_binding`` (the session's ``status``): sessions that
    show one accept only decisions that sign the evidence awaiting approval with it.

    Args:
        name: The key's name, which is the approver name the decision is sent with.
        session_id: The session's workflow id.
        phase: The phase being decided.
        decision: ``"approve"`` or ``"reject"``.
        comment: The comment sent with the decision (the signature binds it).
        directory: Configuration directory (default :func:`config_dir`).

    Returns:
        ``(nonce, signature)``, the signature as standard base64.

    Raises:
        PhasegateError: The key cannot be loaded, or the decision is invalid.
    """
    return _signed(
        name,
        directory,
        lambda nonce: canonical_message(
            session_id=session_id,
            phase=phase,
            decision=decision,
            nonce=nonce,
            approver=name,
            comment=comment,
            binding=binding,
        ),
        where="decision",
        hint="decide 'approve' or 'reject' for an integer phase",
    )


def sign_control(
    name: str,
    *,
    session_id: str,
    action: str,
    reason: str = "",
    to_phase: int | None = None,
    directory: Path | None = None,
) -> tuple[str, str]:
    """Sign a session control (pause, resume, retry_phase, rollback, abandon) as ``name``.

    Args:
        name: The key's name, which is the actor the control is sent with and audited as.
        session_id: The session's workflow id.
        action: The control's action.
        reason: The reason sent with the control (the signature binds it).
        to_phase: The rollback target (bound too); ``None`` for other actions.
        directory: Configuration directory (default :func:`config_dir`).

    Returns:
        ``(nonce, signature)``, the signature as standard base64.

    Raises:
        PhasegateError: The key cannot be loaded, or the control is invalid.
    """
    return _signed(
        name,
        directory,
        lambda nonce: canonical_control_message(
            session_id=session_id,
            action=action,
            nonce=nonce,
            actor=name,
            reason=reason,
            to_phase=to_phase,
        ),
        where="action",
        hint="pause, resume, retry_phase, rollback (with an integer --to) or abandon",
    )


def _signed(
    name: str,
    directory: Path | None,
    message: Callable[[str], bytes],
    *,
    where: str,
    hint: str,
) -> tuple[str, str]:
    """``(nonce, signature)`` of the canonical message ``message(nonce)`` builds, signed
    with ``name``'s private key: the one way decisions and controls are signed."""
    private = load_private_key(name, directory=directory)
    nonce = new_nonce()
    try:
        data = message(nonce)
    except (ValueError, TypeError) as err:
        raise PhasegateError(str(err), where=where, hint=hint) from err
    return nonce, base64.b64encode(private.sign(data)).decode("ascii")


# ---- seal key rings (sealed prefetch: phasegate.sealing) ----


def new_seal_ring(path: str | Path, *, overwrite: bool = False) -> KeyRing:
    """Create a seal key ring file at ``path`` holding one fresh AES-256 key (mode 0600).

    Raises:
        PhasegateError: the file exists (without ``overwrite``) or cannot be written.
    """
    ring = KeyRing([new_seal_key()], str(path))
    _write_ring(Path(path), ring, mode=0o600, overwrite=overwrite)
    return ring


def rotate_seal_ring(path: str | Path) -> KeyRing:
    """Put a fresh key first in the ring at ``path``: workers seal with it once restarted
    with the file; the older keys stay, and keep opening what they sealed.

    Raises:
        PhasegateError: the file is not a readable ring, or cannot be replaced.
    """
    old = load_ring(path)
    ring = KeyRing([new_seal_key(), *old.keys], str(path))
    # Keep a group the workers share (0640), never more.
    mode = (stat.S_IMODE(Path(path).stat().st_mode) & 0o640 | 0o600) if _POSIX else 0o600
    _write_ring(Path(path), ring, mode=mode, overwrite=True)
    return ring


def _write_ring(path: Path, ring: KeyRing, *, mode: int, overwrite: bool) -> None:
    try:
        _write_file(path, ring.to_json().encode("utf-8"), mode=mode, overwrite=overwrite)
    except FileExistsError:
        raise PhasegateError(
            "a seal key ring already exists there",
            where=str(path),
            hint=f"rotate it (`phasegate keys seal-rotate {path}`: its keys keep opening what "
            "they sealed), or pass --force to replace it; sessions whose history holds a "
            "phase sealed with a replaced key cannot be replayed without it",
        ) from None
    except OSError as err:
        raise PhasegateError(
            f"cannot write the seal key ring: {err.strerror or err}",
            where=str(path),
            hint="check the directory's permissions and free space",
        ) from err
