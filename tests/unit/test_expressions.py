"""The restricted expression evaluator: what it accepts, rejects and guards."""

from __future__ import annotations

import pytest

from phasegate.domain.errors import ExpressionError
from phasegate.domain.expressions import CompiledExpression, compile_expression

PRAXIS_VALIDATORS = [
    ("lambda x: x > 0", 5, True),
    ("lambda x: x > 0", 0, False),
    ("lambda x: x >= 0", 0, True),
    ("lambda x: len(x) >= 3", ["a", "b", "c"], True),
    ("lambda x: len(x) >= 3", "ab", False),
    ("lambda x: len(x) > 0", [], False),
    ("lambda x: x >= 80", 80, True),
    ("lambda x: x >= 80", 79.9, False),
    ("lambda x: 0 <= x <= 100", 50, True),
    ("lambda x: 0 <= x <= 100", 101, False),
    ("lambda x: x == True", True, True),
    ("lambda x: x == True", False, False),
    ("lambda x: x is True", True, True),
    ("lambda x: x is False", True, False),
    ("lambda x: x in ['a','b']", "a", True),
    ("lambda x: x in ['a','b']", "c", False),
    ("lambda x: x not in ('a', 'b')", "c", True),
    ("lambda x: all(len(i) > 0 for i in x)", ["a", "bc"], True),
    ("lambda x: all(len(i) > 0 for i in x)", ["a", ""], False),
    ("lambda x: any(i > 3 for i in x)", [1, 5], True),
    ("lambda x: all(isinstance(i, str) for i in x)", ["a", 1], False),
    ("lambda x: len(x) == 40 and all(c in '0123456789abcdef' for c in x)", "a" * 40, True),
    ("lambda x: len(x) == 40 and all(c in '0123456789abcdef' for c in x)", "g" * 40, False),
    ("lambda x: '/' in x and not x[0] == '.'", "src/a.py", True),
    ("lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)", 3.5, True),
    ("lambda x: x['passed'] == x['total']", {"passed": 3, "total": 3}, True),
    ("lambda x: len([i for i in x if i > 0]) == 2", [1, -1, 2], True),
    ("lambda x: min(x) >= 0 and max(x) <= 10", [0, 4, 10], True),
    ("lambda x: abs(x - 1) < 0.5", 1.2, True),
    ("lambda x: (x % 2 == 0) if x > 0 else False", 4, True),
    ("lambda x: x ** 2 + x // 2 - -1 > 10", 3, True),
    ("lambda x: x[-1] == 'z' and x[1:3] == 'bc'", "abcz", True),
    ("lambda x: len({'a': 1, 'b': 2}) + len({1, 2}) == x", 4, True),
    ("lambda x: x is None or x == ''", None, True),
]


@pytest.mark.parametrize(("source", "value", "expected"), PRAXIS_VALIDATORS)
def test_usual_validators_evaluate(source: str, value: object, expected: bool) -> None:
    assert compile_expression(source)(value) is expected


def test_lambda_params_and_names() -> None:
    compiled = compile_expression("lambda x, min_val, max_val: min_val <= x <= max_val")
    assert isinstance(compiled, CompiledExpression)
    assert compiled.params == ("x", "min_val", "max_val")
    assert compiled.names == frozenset()
    assert compiled(85, min_val=80, max_val=100) is True
    assert compiled(85, 90, 100) is False


def test_params_dict_style() -> None:
    compiled = compile_expression("lambda x, params: x >= params['min']")
    assert compiled(5, {"min": 3}) is True
    assert compiled(5, params={"min": 6}) is False


def test_bare_expression_over_names() -> None:
    compiled = compile_expression("tests_passed <= tests_run and tests_run > 0")
    assert compiled.params == ()
    assert compiled.names == {"tests_passed", "tests_run"}
    assert compiled(tests_passed=3, tests_run=3) is True
    assert compiled(tests_passed=4, tests_run=3) is False


def test_comprehension_variables_are_not_free_names() -> None:
    compiled = compile_expression("all(f in done for f in required)")
    assert compiled.names == {"done", "required"}
    assert compiled(done=["a", "b"], required=["a"]) is True


def test_boolean_operators_short_circuit() -> None:
    # The right side would fail (len of an int) if it were evaluated.
    assert compile_expression("lambda x: x is None or len(x) > 0")(None) is True
    assert compile_expression("lambda x: isinstance(x, list) and len(x) > 0")(5) is False
    assert compile_expression("lambda x: x or 'default'")("") == "default"


def test_generator_short_circuits_like_python() -> None:
    assert compile_expression("lambda x: any(len(i) > 0 for i in x)")(["a", 5]) is True


def test_set_iteration_is_sorted_for_determinism() -> None:
    assert compile_expression("lambda x: [i for i in {'b', 'c', 'a'}]")(0) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("source", "construct"),
    [
        ("__import__('os')", "calling '__import__'"),
        ("lambda x: __import__('os').system('x')", "attribute access"),
        ("x.__class__", "attribute access"),
        ("lambda x: x.__class__.__bases__", "attribute access"),
        ("lambda x: x.startswith('a')", "attribute access"),
        ("open('f')", "calling 'open'"),
        ("lambda x: eval('1')", "calling 'eval'"),
        ("lambda x: exec('1')", "calling 'exec'"),
        ("lambda x: getattr(x, 'y')", "calling 'getattr'"),
        ("lambda x: str(x)", "calling 'str'"),
        ("(lambda: 1)()", "calling 'lambda: 1'"),
        ("lambda x: (lambda y: y)", "nested lambda"),
        ("lambda x: (y := x)", "assignment expression"),
        ("lambda x: f'{x}'", "f-string"),
        ("lambda x: f'{x!r:>10}'", "f-string"),
        ("lambda x: '%s' % x", "%-formatting"),
        ("lambda x: [*x]", "star-unpacking"),
        ("lambda x: {**x}", "dict unpacking"),
        ("lambda x: {i for i in x}", "set comprehension"),
        ("lambda x: {i: i for i in x}", "dict comprehension"),
        ("lambda x: [i for i in x for j in i]", "more than one `for`"),
        ("lambda x: ~x", "~ operator"),
        ("lambda x: x << 2", "LShift"),
        ("lambda x: x & 1", "BitAnd"),
        ("lambda x: b'abc'", "bytes literal"),
        ("lambda x: ...", "ellipsis literal"),
        ("lambda x: __builtins__", "the name '__builtins__'"),
        ("lambda x: len", "'len' other than as a call"),
        ("lambda x: int", "'int' other than as a call"),
        ("lambda x: isinstance(x, object)", "isinstance()"),
        ("lambda x: min(x, key=abs)", "keyword argument"),
        ("lambda x: len()", "len() without arguments"),
        ("lambda *a: 1", "plain names"),
        ("lambda x=1: x", "plain names"),
        ("lambda __x: 1", "parameter name"),
        ("lambda x: x[0](1)", "calling 'x[0]'"),
    ],
)
def test_rejected_at_compile_time(source: str, construct: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(source, where="gate.yaml: validators.bad")
    assert construct in info.value.message
    assert info.value.where == "gate.yaml: validators.bad"
    assert info.value.code == "expression_invalid"


@pytest.mark.parametrize(
    "source",
    [
        "10**10**10",
        "lambda x: 10**10**10",
        "'a'*10**9",
        "lambda x: [0]*10**9",
        "lambda x: 10**9*[0]",
        "lambda x: (1, 2) * 10**8",
        "lambda x: 2 ** 100000",
        "lambda x: 9 ** 9 ** 9 > x",
    ],
)
def test_resource_bombs_rejected_at_compile_time(source: str) -> None:
    with pytest.raises(ExpressionError, match="too large|would build"):
        compile_expression(source)


@pytest.mark.parametrize(
    ("source", "args", "names"),
    [
        ("lambda x: x ** 10**6", (10,), {}),
        ("lambda x: x * 10**9", ("ab",), {}),
        ("lambda x: x * 10**6", ([1, 2, 3],), {}),
        ("lambda x, n: x * n", ("a",), {"n": 10**9}),
        ("lambda x: x * x", (2**6000,), {}),
        ("lambda x: (x * 1000) * 1000", ("a" * 100,), {}),
    ],
)
def test_resource_bombs_rejected_at_run_time(source: str, args: tuple, names: dict) -> None:
    compiled = compile_expression(source)
    with pytest.raises(ExpressionError, match="too large|would build"):
        compiled(*args, **names)


def test_step_budget_stops_quadratic_work() -> None:
    compiled = compile_expression("lambda x: len([[i == j for j in x] for i in x])")
    with pytest.raises(ExpressionError, match="steps"):
        compiled(list(range(2000)))


@pytest.mark.parametrize(
    ("source", "args", "names", "fragment"),
    [
        ("lambda x: x / 0", (1,), {}, "ZeroDivisionError"),
        ("lambda x: x > 0", ("a",), {}, "TypeError"),
        ("lambda x: len(x) > 0", (5,), {}, "len() failed"),
        ("lambda x: x['missing']", ({},), {}, "no item 'missing'"),
        ("lambda x: x[3]", ([1],), {}, "no item 3"),
        ("lambda x: x[0]", (5,), {}, "cannot index"),
        ("lambda x: min(x)", ([],), {}, "min() failed"),
        ("lambda x: all(x)", (5,), {}, "cannot iterate"),
        ("lambda x: all(i for i in x)", (5,), {}, "cannot iterate"),
        ("lambda x: [a for a, b in x]", ([1],), {}, "cannot unpack"),
        ("lambda x: y", (1,), {}, "unknown name 'y'"),
        ("lambda x: x == 1", (object(),), {}, "not supported"),
        ("lambda x: 2.0 ** x", (5000,), {}, "OverflowError"),
        ("lambda x: x % 'a'", ("%s",), {}, "%-formatting"),
        ("lambda x, y: x", (1, 2, 3), {}, "argument"),
        ("lambda x, y: x", (1,), {}, "no value for parameter"),
    ],
)
def test_runtime_errors_are_expression_errors(
    source: str, args: tuple, names: dict, fragment: str
) -> None:
    compiled = compile_expression(source, where="here")
    with pytest.raises(ExpressionError) as info:
        compiled(*args, **names)
    assert fragment in info.value.message
    assert info.value.where == "here"


def test_deeply_nested_data_does_not_escape_as_recursion_error() -> None:
    def nested(depth: int) -> list:
        value: list = []
        for _ in range(depth):
            value = [value]
        return value

    compiled = compile_expression("lambda x: x == y")
    with pytest.raises(ExpressionError):
        compiled(nested(100_000), y=nested(100_000))


@pytest.mark.parametrize(
    "source",
    ["", "   ", "lambda x:", "x +", "lambda x: x > 0)", "(" * 300 + ")" * 300, "x + " * 6000 + "x"],
)
def test_unparseable_or_oversized_sources(source: str) -> None:
    with pytest.raises(ExpressionError):
        compile_expression(source)


def test_non_string_source() -> None:
    with pytest.raises(ExpressionError, match="must be text"):
        compile_expression(42)  # type: ignore[arg-type]


def test_too_deep_nesting_rejected() -> None:
    with pytest.raises(ExpressionError, match="nesting"):
        compile_expression("lambda x: " + "-" * 100 + "x")


def test_compiled_expression_is_frozen_and_comparable() -> None:
    first, second = compile_expression("lambda x: x > 0"), compile_expression("lambda x: x > 0")
    assert first == second
    with pytest.raises(AttributeError):
        first.source = "other"  # type: ignore[misc]
