"""``phasegate keys new | list | export``: approver signing keys on this machine, and
``keys seal-new | seal-rotate | seal-list``: the seal key ring of a sealed prefetch
(no server; the key files are ``client.keys``'s)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from phasegate.client.cli._common import EXIT_OK, JSON, Parser, echo

if TYPE_CHECKING:
    from phasegate.domain.settings import Settings

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``keys`` (new, list, export) to ``sub`` (the ``phasegate`` subparsers)."""
    keys = sub.add_parser("keys", help="approver signing keys (no server needed)")
    keys_sub = keys.add_subparsers(
        dest="keys_command", required=True, metavar="COMMAND", parser_class=Parser
    )
    s = keys_sub.add_parser("new", parents=[JSON], help="create an Ed25519 key pair for NAME")
    s.add_argument("name", metavar="NAME", help="the approver name the key signs as")
    s.add_argument("--force", action="store_true", help="replace an existing key")
    s.set_defaults(func=keys_new)
    keys_sub.add_parser("list", parents=[JSON], help="keys in the config dir").set_defaults(
        func=keys_list
    )
    s = keys_sub.add_parser("export", help="print {name, public_key} for approver_keys")
    s.add_argument("name", metavar="NAME")
    s.set_defaults(func=keys_export)
    s = keys_sub.add_parser(
        "seal-new", parents=[JSON], help="create a seal key ring (PHASEGATE_SEAL_KEYS), mode 0600"
    )
    s.add_argument("file", metavar="FILE", help="where to write the ring")
    s.add_argument("--force", action="store_true", help="replace an existing ring")
    s.set_defaults(func=seal_new)
    s = keys_sub.add_parser(
        "seal-rotate", parents=[JSON], help="put a new key first in a ring (old keys still open)"
    )
    s.add_argument("file", metavar="FILE")
    s.set_defaults(func=seal_rotate)
    s = keys_sub.add_parser("seal-list", parents=[JSON], help="the keys of a ring, sealing first")
    s.add_argument("file", metavar="FILE")
    s.set_defaults(func=seal_list)


def keys_new(args: argparse.Namespace, settings: Settings) -> int:
    """Create an approver's Ed25519 key pair (private key 0600 in the config dir)."""
    from phasegate.client import keys

    key = keys.new_key(args.name, overwrite=args.force)
    if args.json:
        echo(key.model_dump_json())
        return EXIT_OK
    echo(f"created key {args.name!r} ({_fingerprint(key.public_key)})")
    echo(
        f"private key: {keys.keys_dir(None) / (args.name + '.key')} (mode 0600; keep it from agents)"
    )
    echo(
        "public key (the worker names its approvers: `phasegate dev --approver-key NAME`, or "
        'PHASEGATE_APPROVER_KEYS="$(phasegate keys export NAME)" phasegate worker):'
    )
    echo(key.public_key)
    return EXIT_OK


def keys_list(args: argparse.Namespace, settings: Settings) -> int:
    from phasegate.client import keys

    found = keys.list_keys()
    if args.json:
        echo(json.dumps([k.model_dump() for k in found]))
    elif not found:
        echo(f"no keys in {keys.keys_dir(None)} (create one: phasegate keys new NAME)")
    for k in found:
        echo(f"{k.name:20} {_fingerprint(k.public_key)}  {k.public_key}")
    return EXIT_OK


def keys_export(args: argparse.Namespace, settings: Settings) -> int:
    """Print ``{name, public_key}``: an entry for ``approver_keys`` (options or metadata.json)."""
    from phasegate.client import keys

    echo(keys.public_key(args.name).model_dump_json())
    return EXIT_OK


def _fingerprint(public_key: str) -> str:
    from phasegate.domain.signing import fingerprint

    return fingerprint(public_key)


def seal_new(args: argparse.Namespace, settings: Settings) -> int:
    """Create a seal key ring holding one key."""
    from phasegate.client import keys

    ring = keys.new_seal_ring(args.file, overwrite=args.force)
    if args.json:
        echo(json.dumps(_ring_listing(ring)))
        return EXIT_OK
    echo(f"created seal key ring {args.file} (mode 0600) with key {ring.sealing.kid}")
    echo(
        f"workers seal prefetched phases with it: PHASEGATE_SEAL_KEYS={args.file} phasegate "
        "worker (and phasegate dev); keep it from agents, and back it up: a session whose "
        "history holds a phase sealed with a lost key cannot be replayed"
    )
    return EXIT_OK


def seal_rotate(args: argparse.Namespace, settings: Settings) -> int:
    """Put a fresh key first in a ring; the old keys stay and keep opening."""
    from phasegate.client import keys

    ring = keys.rotate_seal_ring(args.file)
    if args.json:
        echo(json.dumps(_ring_listing(ring)))
        return EXIT_OK
    echo(f"{args.file}: key {ring.sealing.kid} seals from each worker's next start")
    echo(
        f"kept {len(ring.keys) - 1} older key(s): they keep opening what they sealed; remove "
        "one only once no open session's run started before this rotation"
    )
    return EXIT_OK


def seal_list(args: argparse.Namespace, settings: Settings) -> int:
    """The ring's keys (ids and dates, never the keys), the sealing one first."""
    from phasegate.sealing import load_ring

    ring = load_ring(args.file, where=args.file)
    if args.json:
        echo(json.dumps(_ring_listing(ring)))
        return EXIT_OK
    for i, entry in enumerate(_ring_listing(ring)):
        role = "seals and opens" if i == 0 else "opens"
        echo(f"{entry['kid']}  created {entry['created'] or '?':20}  {role}")
    return EXIT_OK


def _ring_listing(ring: Any) -> list[dict[str, str]]:
    return [{"kid": k.kid, "created": k.created} for k in ring.keys]
