"""The deployment settings an operator sets in the environment, and how keys are named."""

from __future__ import annotations

import json

import pytest

from phasegate import SHIPPED_LIBRARY
from phasegate.client import keys
from phasegate.domain.errors import PhasegateError
from phasegate.domain.settings import Settings, verify_task_queue
from phasegate.worker import load_approver_keys


def _settings(**env: str) -> Settings:
    return Settings.from_env(env, default_library=SHIPPED_LIBRARY)


def test_defaults_are_closed():
    s = _settings()
    assert not s.allow_unsigned_approvals and not s.unsigned_controls
    assert s.spec_roots == [] and s.metrics_port is None and s.verify_concurrency == 4
    assert verify_task_queue(s.task_queue) == "phasegate-verify"


def test_every_variable_is_read():
    s = _settings(
        PHASEGATE_SPEC_ROOTS="/specs:/more",
        PHASEGATE_OPERATOR_KEYS="/etc/phasegate/operators.json",
        PHASEGATE_ALLOW_UNSIGNED_APPROVALS="1",
        PHASEGATE_ALLOW_UNSIGNED_CONTROLS="0",
        PHASEGATE_VERIFY_CONCURRENCY="2",
        PHASEGATE_METRICS_PORT="9464",
    )
    assert s.spec_roots == ["/specs", "/more"]
    assert s.operator_keys_file == "/etc/phasegate/operators.json"
    assert s.allow_unsigned_approvals and not s.unsigned_controls  # controls stay signed
    assert s.verify_concurrency == 2 and s.metrics_port == 9464
    assert _settings(PHASEGATE_ALLOW_UNSIGNED_APPROVALS="yes").unsigned_controls  # follows


def test_approver_keys_as_list_object_or_path(tmp_path):
    alice = keys.new_key("alice", directory=tmp_path / "k")
    bob = keys.new_key("bob", directory=tmp_path / "k")
    exported = alice.model_dump_json()  # what `phasegate keys export alice` prints
    assert load_approver_keys(exported) == [alice]
    listed = json.dumps([alice.model_dump(), bob.model_dump()])
    assert load_approver_keys(listed) == [alice, bob]
    path = tmp_path / "approvers.json"
    path.write_text(exported)
    assert load_approver_keys(str(path)) == [alice]
    path.write_text(listed)
    assert load_approver_keys(str(path)) == [alice, bob]


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("/no/such/file.json", "cannot read the key file"),
        ('{"name": "alice"}', "cannot load keys"),
        ('[{"name": "alice", "public_key": "not base64"}]', "cannot load keys"),
        ("[1, 2", "cannot load keys"),
    ],
)
def test_bad_keys_say_which_variable_and_what_to_do(value, says):
    with pytest.raises(PhasegateError) as err:
        load_approver_keys(value, "PHASEGATE_OPERATOR_KEYS")
    text = str(err.value)
    assert says in text and "PHASEGATE_OPERATOR_KEYS" in text and "keys export" in text
