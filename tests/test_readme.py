"""The README's gate examples are real: each ```yaml block loads as a gate."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from phasegate.domain.gates import load_gate

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_gate_examples_load() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.DOTALL)
    assert len(blocks) >= 2
    for block in blocks:
        gate = load_gate(yaml.safe_load(block), source="README.md")
        assert gate.fields
    assert any(load_gate(yaml.safe_load(b), source="README").verify for b in blocks)
