"""``phasegate approve | reject | control``: a person's decisions on a session.

Each is signed with your key NAME when you hold it (``phasegate keys new NAME``):
sessions with signed approvers or operator keys accept nothing else.
"""

from __future__ import annotations

from typing import Any

from phasegate.client.cli._common import EXIT_OK, JSON, SESSION, Ctx, echo_err, remote, signer
from phasegate.client.cli._render import render_control, render_status

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add ``approve``, ``reject`` and ``control`` to ``sub`` (the ``phasegate`` subparsers)."""
    for name, required in (("approve", False), ("reject", True)):
        s = sub.add_parser(
            name, parents=[JSON, SESSION], help=f"{name} the phase awaiting approval"
        )
        s.add_argument(
            "--as",
            dest="as_name",
            metavar="NAME",
            help="approver (default $PHASEGATE_APPROVER or your user name)",
        )
        s.add_argument("--phase", type=int, help="default: the current phase")
        s.add_argument("--comment", required=required, help="why (required to reject)")
        s.set_defaults(func=remote(decide), decision=name)

    s = sub.add_parser("control", parents=[JSON, SESSION], help="pause, resume, retry or abandon")
    s.add_argument("action", choices=["pause", "resume", "retry_phase", "rollback", "abandon"])
    s.add_argument("--reason", help="why (required to abandon)")
    s.add_argument("--to", type=int, metavar="N", help="rollback: the completed phase to reopen")
    s.add_argument(
        "--as",
        dest="as_name",
        metavar="NAME",
        help="who (default as for approve); signed with your key NAME when you hold one",
    )
    s.set_defaults(func=remote(control))


async def decide(ctx: Ctx) -> int:
    """``approve`` / ``reject``: the decision, signed (session, phase, decision, comment,
    fresh nonce and the evidence it approves) when you hold the approver's key."""
    a = ctx.args
    name, signed = signer(a.as_name)
    pg = await ctx.client()
    phase = a.phase
    if signed:  # say which evidence the signature approves
        status = await pg.status(a.session_id)
        phase = status.current_phase if phase is None else phase
        binding = status.approval_binding
        if binding:
            echo_err(
                f"signing for evidence sha256:{binding['evidence_sha256'][:16]}… of phase {phase}"
            )
    view = await pg.decide(
        a.session_id,
        approver=name,
        decision=a.decision,
        phase=phase,
        comment=a.comment or "",
        as_key=name if signed else None,
    )
    verb = "approved" if a.decision == "approve" else "rejected"
    ctx.emit(view, f"{verb} by {name}\n{render_status(a.session_id, view)}")
    return EXIT_OK


async def control(ctx: Ctx) -> int:
    """``control``: pause, resume, retry_phase, rollback or abandon, signed (session,
    action, reason, rollback target, fresh nonce) when you hold NAME's key."""
    from phasegate.domain.session.messages import ControlRequest

    a = ctx.args
    name, signed = signer(a.as_name)
    req = ControlRequest(action=a.action, reason=a.reason or "", to_phase=a.to, actor=name)
    pg = await ctx.client()
    result = await pg.control(a.session_id, req, key=name if signed else None)
    ctx.emit(result, render_control(result, name, signed=signed))
    return EXIT_OK
