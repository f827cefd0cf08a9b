"""Known-good evidence for the test library's workflows (tests/fixtures/library), as
``phasegate.testing`` evidence tables: one place instead of a copy per test module."""

from __future__ import annotations

from typing import Any

MINI_V1: dict[int, dict[str, Any]] = {
    0: {"modules_found": 3, "summary": "three modules, all small"},
    1: {"plan": "the plan, step by step"},
    2: {"tests_run": 3, "tests_passed": 3, "coverage": 90},
}
"""mini_v1: phase 0 analysis, phase 1 plan (needs approval), phase 2 tests."""

GOOD_0 = MINI_V1[0]
