"""The public contract, driven the way an external program would: the plain
Temporal SDK with its default JSON converter, names as strings, dicts in and out.
Nothing from phasegate is used to talk to the session (only to compute evidence).

Each shipped workflow is walked to completion. The "agent" reads each phase
through the `phase` query, takes the example evidence the phase documents
(a ```json block under its Evidence heading), completes it from the gate's
field list where the example cannot know (dynamic per-item checks, task ids),
submits it, and a "lead" approves where the gate asks for approval.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from phasegate.domain.session.messages import PhaseView
from phasegate.testing import complete_evidence, example_evidence, workspace_for

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "specs" / "todo-api"
_JSON_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.DOTALL)


def _evidence(view: dict[str, Any]) -> dict[str, Any]:
    """The example the phase documents, completed from its gate (phasegate.testing does
    what any client could do with the view's JSON)."""
    typed = PhaseView.model_validate(view)
    return complete_evidence(example_evidence(typed), typed)


@pytest.mark.parametrize(
    "workflow_type, options",
    [
        ("spec_execution_v1", {}),  # spec_path: set below, inside the workspace
        ("test_generation_v3", {}),
        ("production_code_v2", {}),
    ],
)
async def test_external_program_completes_each_shipped_workflow(
    env, settings_for, run_worker, workflow_type, options, tmp_path, monkeypatch
):
    settings = settings_for()
    target = str(SPEC)
    if workflow_type == "spec_execution_v1":
        # Its dynamic gates check each path in files_changed is a file in the workspace:
        # the example's files must exist. A spec is read from inside the target.
        ws = workspace_for(workflow_type, tmp_path)
        shutil.copytree(SPEC, ws / "spec")
        target, options = str(ws), {"spec_path": str(ws / "spec")}
    if workflow_type == "test_generation_v3":
        # Its gates check the workspace: the test files named in the examples must exist
        # and the tests must really pass (run with this virtualenv's python3).
        target = str(workspace_for(workflow_type, tmp_path))
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    plain = await Client.connect(
        env.client.service_client.config.target_host, namespace=env.client.namespace
    )
    async with run_worker(settings):
        handle = await plain.start_workflow(
            "GatedSession",
            {"workflow_type": workflow_type, "target": target, "options": options},
            id=f"contract-{workflow_type}-{uuid.uuid4().hex[:6]}",
            task_queue=settings.task_queue,
        )
        status: dict[str, Any] = {}
        for _ in range(200):
            try:
                status = await handle.query("status")
                break
            except Exception:  # noqa: BLE001 - still loading its definition
                await asyncio.sleep(0.05)
        assert status["status"] == "active" and status["current_phase"] == 0
        total = status["total_phases"]
        approvals = 0
        for expected in range(total):
            view = await handle.query("phase", {"phase": expected})
            assert view.get("error") is None and view["phase"] == expected, view
            current = await handle.query("current")  # the same view, with the status
            assert current["phase"] == view and current["status"]["current_phase"] == expected
            if expected + 1 < total:
                ahead = await handle.query("phase", {"phase": expected + 1})
                assert ahead["error"] == "phase_sequence_violation"
            evidence = _evidence(view)
            result = await handle.execute_update(
                "submit_checkpoint", {"phase": expected, "evidence": evidence}
            )
            assert result["passed"], (workflow_type, expected, result["problems"])
            if result["awaiting_approval"]:
                approvers = view["gate"]["approvers"] or ["lead"]
                decided = await handle.execute_update(
                    "decide_approval",
                    {
                        "phase": expected,
                        "approver": approvers[0],
                        "decision": "approve",
                        "comment": "ok",
                    },
                )
                approvals += 1
                assert decided["current_phase"] == min(expected + 1, total - 1)
        summary = await handle.result()
        assert summary["status"] == "completed"
        assert summary["completed_phases"] == list(range(total))
        assert approvals >= 1  # every shipped workflow has a human gate
