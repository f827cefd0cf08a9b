"""Scripted models for tests: ``test:KEY`` model ids name a model registered here.

Register a pydantic-ai model (a ``FunctionModel``, a ``TestModel``) under a key, then
run an agent with ``model="test:KEY"`` (in a profile's ``models`` or in
``run_llm_agent``): the worker of this process resolves it in the workflow and in the
model-request activity. Keys are process-local, so the worker must run in the process
that registered them (as ``running_worker`` does).

Example::

    register_model("planner", FunctionModel(answer))
    try:
        ...  # profile models={"planner": "test:planner"}
    finally:
        unregister_model("planner")
"""

from __future__ import annotations

import re

from pydantic_ai.models import Model

from phasegate.activities import agents

__all__ = ["register_model", "unregister_model"]

_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def register_model(key: str, model: Model) -> str:
    """Make ``test:KEY`` resolve to ``model`` in this process; returns ``"test:KEY"``.

    Raises:
        ValueError: The key is not 1-64 letters, digits, ``.``, ``_`` or ``-``.
    """
    if not _KEY.fullmatch(key):
        raise ValueError(f"test model key {key!r}: use 1-64 letters, digits, . _ or -")
    agents._TEST_MODELS[key] = model
    return f"test:{key}"


def unregister_model(key: str) -> None:
    """Forget ``test:KEY`` (no error if it was not registered)."""
    agents._TEST_MODELS.pop(key, None)
