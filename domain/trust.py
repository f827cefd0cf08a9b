"""Who a session trusts: the rule that options a starter sets never widen it.

Whoever starts a session may be the agent it gates (threat-model level 2: it
holds a Temporal client). So the keys and names that decide approvals come
from the deployment (the worker's ``PHASEGATE_APPROVER_KEYS``) and the
workflow definition (``approver_keys`` in metadata.json); a session's own
options can only narrow them:

- keys named by the deployment or the definition always bind; a session that
  names keys picks among them (same name, same public key) and cannot add one;
- where neither names keys, a session may name keys only if the deployment
  accepts unsigned approvals: its keys then add the signature requirement. In a
  deployment that refuses unsigned approvals, a starter-named key would let
  whoever started the session approve it, so it is refused;
- ``options.approvers`` narrows each gate's allowlist (see
  :func:`allowed_approvers`), never replaces it.

And who may act at all: :func:`reserved_actor` is the one rule that keeps anyone
(a person, or an agent with a client) from approving, controlling or asking for a
replan under the names of phasegate's own entries, on every worker, signed or not;
message models type their sender :data:`ActorName`, and a session binds no key (which
signs as its name) that takes such a name.

Pure: no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import Annotated, Final

from pydantic import AfterValidator

from phasegate.domain.errors import SessionError
from phasegate.domain.limits import RESERVED_PREFIX, Name
from phasegate.domain.signing import ApproverKey, fingerprint

__all__ = [
    "SYSTEM_ACTOR",
    "ActorName",
    "allowed_approvers",
    "narrowed_to_nobody",
    "reserved_actor",
    "session_keys",
]

SYSTEM_ACTOR: Final = "phasegate"
"""The actor of the entries phasegate writes itself (a failed step asking for a replan)."""
_AGENT_KEY = re.compile(r"(planner|analyst|architect|developer|reviewer)_\d+")


def reserved_actor(name: str) -> str | None:
    """Why ``name`` may not act (approve, control, ask for a replan), or None.

    History and audit entries name phasegate's own actors; no message may be read as
    one of them. Reserved, compared as people read them (NFKC, case and surrounding
    spaces ignored): ``phasegate`` itself (:data:`SYSTEM_ACTOR`), every ``phasegate:``
    name (``phasegate:deadline`` rejects an overdue approval), and the orchestration's
    agent outputs, which ask for replans themselves (``reviewer_0``, ``analyst_2``).
    """
    seen = unicodedata.normalize("NFKC", name).strip().casefold()
    if seen == SYSTEM_ACTOR or seen.startswith(RESERVED_PREFIX) or _AGENT_KEY.fullmatch(seen):
        return (
            f"{name!r} is reserved for phasegate's own entries in history and audit "
            "(phasegate, phasegate:..., agent outputs like reviewer_0); name yourself "
            "(--as NAME, or a key named after you)"
        )
    return None


def _not_reserved(name: str) -> str:
    problem = reserved_actor(name)
    if problem:
        raise ValueError(problem)
    return name


ActorName = Annotated[Name, AfterValidator(_not_reserved)]
"""Who sends a message (approver, actor, requested_by): a name, never a reserved one."""


def session_keys(
    bound: Sequence[ApproverKey],
    named: Sequence[ApproverKey] | None,
    *,
    unsigned_allowed: bool,
) -> list[ApproverKey]:
    """The signed approvers of a new session.

    Args:
        bound: Keys of the deployment and the definition (they always bind).
        named: Keys the starter named in ``options.approver_keys`` (None: none).
        unsigned_allowed: Whether the deployment accepts name-only approvals.

    Raises:
        SessionError: the starter's keys would widen who may approve, or a key takes a
            reserved name (:func:`reserved_actor`).
    """
    for key in [*bound, *(named or [])]:  # a key signs as its name
        problem = reserved_actor(key.name)
        if problem:
            return _refuse(
                f"approver key {key.name!r} ({fingerprint(key.public_key)}): {problem}",
                hint="name the key after the person who holds it (phasegate keys new NAME)",
            )
    bound = list(dict.fromkeys(bound))
    if not named:
        return bound
    if bound:
        strangers = [k for k in named if k not in bound]
        if strangers:
            k = strangers[0]
            return _refuse(
                f"approver key {k.name!r} ({fingerprint(k.public_key)}) is not one this "
                "deployment or workflow names; a session can only choose among those",
                hint="drop --approver-key, or ask the operator to add the key to "
                "PHASEGATE_APPROVER_KEYS on the worker",
            )
        return list(dict.fromkeys(named))
    if not unsigned_allowed:
        return _refuse(
            "this deployment accepts only approvals signed by keys it names itself, and it "
            "names none; a key named when starting a session would let whoever started it "
            "approve it",
            hint="the operator names approvers on the worker: PHASEGATE_APPROVER_KEYS="
            '"$(phasegate keys export NAME)" phasegate worker (or approver_keys in the '
            "workflow's metadata.json)",
        )
    return list(dict.fromkeys(named))


def allowed_approvers(
    gate_approvers: Sequence[str], session_approvers: Sequence[str] | None
) -> list[str]:
    """Who may decide a phase: the gate's allowlist narrowed by the session's.

    ``[]`` means any named person only when both name nobody; when the
    session's list leaves none of the gate's names, :func:`narrowed_to_nobody`
    is true and every decision is refused.
    """
    if session_approvers is None:
        return list(gate_approvers)
    if not gate_approvers:
        return list(session_approvers)
    return [name for name in gate_approvers if name in session_approvers]


def narrowed_to_nobody(
    gate_approvers: Sequence[str], session_approvers: Sequence[str] | None
) -> bool:
    """Whether the session's approvers leave none of the gate's (nobody may decide)."""
    if session_approvers is None:
        return False
    if not gate_approvers:
        return not session_approvers
    return not allowed_approvers(gate_approvers, session_approvers)


def _refuse(message: str, *, hint: str) -> list[ApproverKey]:
    raise SessionError(message, where="approver_keys", hint=hint)
