"""Scripted models for tests: ``test:KEY`` model ids name a model registered here.

Register a pydantic-ai model (a ``FunctionModel``, a ``TestModel``) under a key, then
run an agent with ``model="test:KEY"`` (in a profile's ``models`` or in
``run_llm_agent``): every worker of this process resolves it, in the workflow and in
the model-request activity. Keys are process-local, so the worker must run in the
process that registered them (as ``running_worker`` does). The registry itself is
production code (:mod:`phasegate.activities.model_providers`, which never imports
this package); a worker's own models go to
``ModelProviders(models={KEY: model})`` instead.

Example::

    register_model("planner", FunctionModel(answer))
    try:
        ...  # profile models={"planner": "test:planner"}
    finally:
        unregister_model("planner")
"""

from __future__ import annotations

from phasegate.activities.model_providers import register_model, unregister_model

__all__ = ["register_model", "unregister_model"]
