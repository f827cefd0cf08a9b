"""How a gate's verdict on the evidence and the workspace checks of the verify activity
make one verdict on a checkpoint: a failed check is a problem and blocks, even under
``strict: false``; checks that could not run at all are one failed check."""

from __future__ import annotations

from phasegate.domain.gates import GateEvaluation, Problem
from phasegate.domain.verify import VerifyResult

__all__ = ["verify_unavailable", "with_verify"]


def verify_unavailable(cause: str) -> list[VerifyResult]:
    """The verdict when the checks could not run at all: one failed check (it blocks)."""
    return [
        VerifyResult(
            name="verify",
            kind="activity",
            passed=False,
            message=f"the workspace checks could not run: {cause}",
        )
    ]


def with_verify(evaluation: GateEvaluation, verify: list[VerifyResult]) -> GateEvaluation:
    """The gate's verdict with the failed workspace checks added as problems (they block)."""
    failed = [
        Problem(
            field=f"verify:{r.name}",
            rule=f"verify:{r.kind}",
            message=r.message,
            expected="check passes",
            got=_tail(r.excerpt),
        )
        for r in verify
        if not r.passed
    ]
    if not failed:
        return evaluation
    return evaluation.model_copy(
        update={"passed": False, "problems": [*evaluation.problems, *failed]}
    )


def _tail(text: str, limit: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]
