"""Typed ``verify`` checks: :func:`parse_checks` turns a gate's ``verify:`` list into one
model per kind, with errors that name the gate file and field; templates; requests
carrying typed checks round-trip as JSON. Split from test_verify.py (the runners)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from phasegate.activities.verify import VerifyActivities
from phasegate.domain.errors import GateDefinitionError
from phasegate.domain.verify import (
    CommandCheck,
    GitChangedCheck,
    VerifyReport,
    VerifyRequest,
    budget_seconds,
    parse_checks,
    render,
)

SOURCE = "library/demo/phases/1/gate-definition.yaml"


def bad(raw: list[Any], **kw: Any) -> GateDefinitionError:
    with pytest.raises(GateDefinitionError) as info:
        parse_checks(raw, source=SOURCE, **kw)
    return info.value


def test_parse_checks_defaults_and_models() -> None:
    checks = parse_checks(
        [
            {"kind": "command", "argv": ["pytest", "-q"], "timeout_seconds": 60},
            {"kind": "git_changed"},
            {
                "kind": "json_value",
                "name": "cov",
                "path": "c.json",
                "field": "a.b",
                "op": ">",
                "value": 1,
            },
        ],
        source=SOURCE,
    )
    assert isinstance(checks[0], CommandCheck) and checks[0].name == "command_1"
    assert checks[0].cwd == "." and checks[0].expect_exit == 0 and checks[0].env == {}
    assert isinstance(checks[1], GitChangedCheck) and checks[1].paths == ["."]
    assert checks[1].name == "git_changed_2" and checks[2].name == "cov"


def test_parse_checks_unknown_kind() -> None:
    err = bad([{"kind": "comand", "argv": ["x"]}])
    assert err.where == f"{SOURCE}: verify[0].kind" and "unknown kind 'comand'" in err.message
    assert err.hint == "did you mean 'command'?"
    err = bad([{"kind": "file_exists", "path": "a"}, {"argv": ["x"]}])
    assert err.where == f"{SOURCE}: verify[1].kind" and "missing" in err.message
    assert "known kinds" in (err.hint or "")


def test_parse_checks_bad_fields() -> None:
    err = bad([{"kind": "command", "argv": "pytest -q"}])
    assert err.where == f"{SOURCE}: verify[0].argv" and "list" in err.message
    assert "one item per argument" in (err.hint or "")
    err = bad([{"kind": "command", "argv": []}])
    assert err.where == f"{SOURCE}: verify[0].argv"
    err = bad([{"kind": "command", "argv": ["x", 3]}])
    assert err.where == f"{SOURCE}: verify[0].argv[1]"
    err = bad([{"kind": "command", "argv": ["x"], "timeout_seconds": 7200}])
    assert err.where == f"{SOURCE}: verify[0].timeout_seconds"
    err = bad([{"kind": "command", "argv": ["x"], "timeout": 5}])
    assert "unknown key 'timeout'" in err.message and err.hint == "did you mean 'timeout_seconds'?"
    err = bad([{"kind": "file_contains", "path": "a", "pattern": "("}])
    assert err.where == f"{SOURCE}: verify[0].pattern" and "regular expression" in err.message
    err = bad([{"kind": "glob_count", "pattern": "*", "min": 3, "max": 1}])
    assert "greater than max" in err.message
    err = bad([{"kind": "json_value", "path": "a", "field": "b", "op": "=~"}])
    assert err.where == f"{SOURCE}: verify[0].op"
    err = bad(
        [{"kind": "json_value", "path": "a", "field": "b", "value": 1, "evidence_field": "c"}]
    )
    assert "not both" in err.message
    err = bad(
        [
            {"kind": "file_exists", "path": "a"},
            {"kind": "file_exists", "name": "file_exists_1", "path": "b"},
        ]
    )
    assert err.where == f"{SOURCE}: verify[1].name" and "duplicate" in err.message
    err = bad(["pytest -q"])
    assert err.where == f"{SOURCE}: verify[0]"
    assert isinstance(bad({"kind": "command"}), GateDefinitionError)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    [
        "{{ config.x }}",
        "{{ evidence.__class__ }}",
        "{{ evidence._private }}",
        "{{ evidence.x.__class__ }}",
        "{{ evidence['x'] }}",
        "{{ evidence.x | upper }}",
        "{{ session.env }}",
        "{% for x in y %}",
        "{# comment #}",
        "{{ evidence.x",
        "{{ lipsum.__globals__ }}",
    ],
)
def test_parse_checks_rejects_template_references(text: str) -> None:
    err = bad([{"kind": "command", "argv": ["echo", text]}])
    assert err.where == f"{SOURCE}: verify[0].argv[1]"
    assert "unsupported template" in err.message and "evidence.<field>" in (err.hint or "")


def test_parse_checks_templates_where_allowed() -> None:
    ok = parse_checks(
        [{"kind": "command", "argv": ["t", "{{evidence.a}}-{{ session.target }}", "{{ session.id }}"]},
         {"kind": "json_value", "path": "{{ evidence.p }}", "field": "x", "value": ["{{ evidence.v }}"]},
         {"kind": "file_contains", "path": "a", "pattern": r"\d{2,3}"}],
        source=SOURCE, known_fields=["a", "p", "v"],
    )  # fmt: skip
    assert len(ok) == 3
    err = bad([{"kind": "command", "argv": ["t"], "cwd": "{{ evidence.dir }}"}])
    assert err.where == f"{SOURCE}: verify[0].cwd" and "not allowed in cwd" in err.message
    err = bad([{"kind": "command", "argv": ["t"], "env": {"X": "{{ evidence.x }}"}}])
    assert err.where == f"{SOURCE}: verify[0].env.X"
    err = bad([{"kind": "command", "argv": ["{{ evidence.cmd }}"]}], known_fields=["tests_passed"])
    assert "unknown evidence field 'cmd'" in err.message and "tests_passed" in (err.hint or "")


def test_render_is_plain_text_substitution() -> None:
    text, missing = render("a={{ evidence.a }} b={{evidence.b}}", {"a": "$(x)", "b": [1]}, {})
    assert text == "a=$(x) b=[1]" and missing == []
    text, missing = render("{{ evidence.a }}/{{ session.id }}", {}, {"id": ""})
    assert missing == ["evidence.a", "session.id"]
    assert render("{{ evidence.a }}", {"a": "{{ evidence.b }}"}, {})[0] == "{{ evidence.b }}"


def test_requests_are_json_round_trippable(tmp_path: Path) -> None:
    req = VerifyRequest(
        workspace=str(tmp_path), checks=[{"kind": "git_changed"}], evidence={"a": 1}
    )
    assert VerifyRequest.model_validate_json(req.model_dump_json()) == req
    checks = parse_checks([{"kind": "file_exists", "path": "x"}], source=SOURCE)
    report = VerifyActivities().run_verify_checks(
        VerifyRequest(workspace=str(tmp_path), checks=checks)
    )
    assert VerifyReport.model_validate_json(report.model_dump_json()) == report
    assert os.path.isdir(req.workspace)


def test_malformed_checks_never_reach_the_runner(tmp_path: Path) -> None:
    """Checks are typed: an unknown kind fails the gate file at load time (naming the
    field) and a request carrying one does not decode."""
    err = bad([{"kind": "shell", "cmd": "make test"}])
    assert err.where == f"{SOURCE}: verify[0].kind"
    with pytest.raises(ValidationError):
        VerifyRequest(workspace=str(tmp_path), checks=[{"kind": "shell", "cmd": "make test"}])
    with pytest.raises(ValidationError):
        VerifyRequest(workspace=str(tmp_path), checks=[{"kind": "command", "argv": []}])


def test_typed_checks_round_trip_and_default_names(tmp_path: Path) -> None:
    """The request carries typed checks; a stored raw list (no names) still decodes with
    the names parse_checks would give, so older histories and carried state load."""
    raw = [
        {"kind": "file_exists", "path": "a"},
        {"kind": "command", "name": "t", "argv": ["true"], "timeout_seconds": 5},
        {"kind": "json_value", "path": "c.json", "field": "x", "op": ">=", "value": 0.5},
    ]
    typed = parse_checks(raw, source=SOURCE)
    req = VerifyRequest(workspace=str(tmp_path), checks=typed)
    assert VerifyRequest.model_validate_json(req.model_dump_json()) == req
    stored = VerifyRequest.model_validate({"workspace": str(tmp_path), "checks": raw})
    assert stored.checks == typed
    assert [c.name for c in typed] == ["file_exists_1", "t", "json_value_3"]
    assert budget_seconds(typed) == 5 and budget_seconds([]) == 0
