"""Helpers shared by the gate tests (test_gates.py, test_gate_rules.py)."""

from __future__ import annotations

from typing import Any

import yaml

from phasegate.domain.gates import GateDefinition, GateEvaluation, load_gate

SOURCE = "library/demo/phases/2/gate-definition.yaml"

PRAXIS_GATE = """
# Gate Definition - Phase 2: Implementation
checkpoint:
  strict: true
  allow_override: true

evidence_schema:
  files_created:
    type: list
    required: true
    description: "List of implementation files created"
    validator: non_empty_list
  tests_passing:
    type: integer
    required: true
    description: "Number of passing tests (must be > 0)"
    validator: positive
  test_coverage:
    type: integer
    required: true
    description: "Test coverage percentage (80-100)"
    validator: in_range
    validator_params:
      min_val: 80
      max_val: 100
  commit_hash:
    type: string
    required: true
    description: "Git commit hash (40 char hex)"
    validator: valid_git_hash
  linting_passed:
    type: boolean
    required: true
    description: "Linting checks passed"
    validator: is_true
  metadata:
    type: dict
    required: false
    description: "Optional metadata (not validated)"

validators:
  non_empty_list: "lambda x: len(x) > 0"
  positive: "lambda x: x > 0"
  in_range: "lambda x, min_val, max_val: min_val <= x <= max_val"
  valid_git_hash: "lambda x: len(x) == 40 and all(c in '0123456789abcdef' for c in x)"
  is_true: "lambda x: x is True"
"""


def gate(yaml_text: str) -> GateDefinition:
    return load_gate(yaml.safe_load(yaml_text), source=SOURCE)


def one_field(spec: dict[str, Any], *, strict: bool = True, **extra: Any) -> GateDefinition:
    return load_gate(
        {"checkpoint": {"strict": strict}, "evidence_schema": {"f": spec}, **extra}, source=SOURCE
    )


def rules_of(evaluation: GateEvaluation) -> list[str]:
    return [p.rule for p in evaluation.problems]
