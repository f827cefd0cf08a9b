"""A restricted expression evaluator for gate validators and cross-field rules.

Gate files carry small Python-looking expressions (``"lambda x: x > 0"``,
``"tests_passed <= tests_run"``). They are parsed with :mod:`ast`, checked
against an allowlist when compiled, and evaluated by walking the tree: no
``eval``/``exec``, no code objects, no attribute access, no calls except
``len abs min max all any isinstance``. The evaluator is pure and
deterministic, so it runs inside Temporal workflow code.

Resource guards: integer results are capped at ``_MAX_INT_BITS`` bits, built
strings/lists at ``_MAX_SEQ`` items, and one evaluation at ``_MAX_STEPS`` node
visits. Anything that goes wrong at compile time or run time raises
:class:`~domain.errors.ExpressionError` and nothing else.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import GeneratorType
from typing import Any

from phasegate.domain.errors import ExpressionError

__all__ = ["CompiledExpression", "compile_expression"]

_MAX_SOURCE = 20_000
_MAX_DEPTH = 60
_MAX_INT_BITS = 10_000
_MAX_SEQ = 100_000
_MAX_STEPS = 50_000  # x a few rules stays far below the 2 s deadlock detector

_CALLS = frozenset({"len", "abs", "min", "max", "all", "any", "isinstance"})
_TYPES: dict[str, type] = {t.__name__: t for t in (int, float, str, bool, list, dict)}
_SAFE_VALUES = (bool, int, float, str, list, tuple, dict, set, frozenset, type(None))
_SEQUENCES = (str, list, tuple)
_HINT = (
    "use literals, names, comparisons, and/or/not, + - * / // % **, a if c else b, x[i], "
    "len/abs/min/max/all/any/isinstance and simple comprehensions; "
    "for string checks use a field's `pattern:`"
)
_GUARD_HINT = "keep numbers and built strings/lists small; gates check evidence, not compute"
_BIN_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_FORBIDDEN = {
    ast.Attribute: "attribute access", ast.Lambda: "a nested lambda",
    ast.NamedExpr: "an assignment expression (:=)", ast.JoinedStr: "an f-string",
    ast.Starred: "star-unpacking", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension",
}  # fmt: skip


@dataclass(frozen=True)
class CompiledExpression:
    """A checked expression, ready to evaluate any number of times.

    Attributes:
        source: The expression text as written.
        params: Parameter names of a ``lambda`` (empty for a bare expression).
        names: Free names the body reads besides ``params`` (resolved from
            keyword arguments at call time).
        where: Where the expression came from, used in error messages.
    """

    source: str
    params: tuple[str, ...]
    names: frozenset[str] = frozenset()
    where: str | None = field(default=None, compare=False)
    _body: ast.expr | None = field(default=None, compare=False, repr=False)

    def __call__(self, /, *args: Any, **names: Any) -> Any:
        """Evaluate the expression.

        Args:
            *args: Values for the lambda parameters, in order.
            **names: Values for the remaining parameters and free names.

        Returns:
            The value of the expression.

        Raises:
            ExpressionError: On any failure (unknown name, type error, division
                by zero, missing key, a resource guard, ...).
        """
        if len(args) > len(self.params):
            raise self._error(f"takes {len(self.params)} argument(s) but {len(args)} were given")
        env = dict(names)
        env.update(zip(self.params, args))
        missing = [p for p in self.params if p not in env]
        if missing:
            raise self._error(f"no value for parameter(s) {', '.join(missing)}")
        if self._body is None:
            raise self._error("was not built by compile_expression()")
        return _Evaluator(self).run(self._body, env)

    def _error(self, message: str, hint: str | None = None) -> ExpressionError:
        return ExpressionError(f"`{_clip(self.source)}`: {message}", where=self.where, hint=hint)


def compile_expression(source: str, *, where: str | None = None) -> CompiledExpression:
    """Parse and check a restricted expression.

    Accepts ``lambda x: <expr>``, ``lambda x, a, b: <expr>`` or a bare expression
    over names (``tests_passed <= tests_run``).

    Args:
        source: The expression text.
        where: Location for error messages (``file: path.to.key``).

    Returns:
        The compiled expression.

    Raises:
        ExpressionError: The text is not an expression, uses a construct outside
            the allowlist, or contains a constant sub-expression that trips a
            resource guard (``10**10**10``, ``'a' * 10**9``).
    """
    if not isinstance(source, str):
        raise ExpressionError(f"expression must be text, got {type(source).__name__}", where=where)
    text = source.strip()
    if not text:
        raise ExpressionError("expression is empty", where=where, hint="e.g. 'lambda x: x > 0'")
    if len(text) > _MAX_SOURCE:
        raise ExpressionError(f"expression is longer than {_MAX_SOURCE} characters", where=where)
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(
            f"`{_clip(text)}` is not a valid expression: {exc.msg}", where=where, hint=_HINT
        ) from None
    except Exception as exc:  # noqa: BLE001 - RecursionError/MemoryError/ValueError from the parser
        raise ExpressionError(f"`{_clip(text)}` cannot be parsed: {exc}", where=where) from None
    body: ast.expr = tree.body
    params: tuple[str, ...] = ()
    if isinstance(body, ast.Lambda):
        params = _lambda_params(body.args, text, where)
        body = body.body
    checker = _Checker(text, where)
    checker.check(body, frozenset(params), 0)
    compiled = CompiledExpression(
        source=text,
        params=params,
        names=frozenset(checker.free - set(params)),
        where=where,
        _body=body,
    )
    _fold_constants(compiled, checker.constant_roots)
    return compiled


def _lambda_params(args: ast.arguments, text: str, where: str | None) -> tuple[str, ...]:
    if args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.kw_defaults:
        raise ExpressionError(
            f"`{_clip(text)}`: lambda parameters must be plain names (no defaults, *args, **kw)",
            where=where,
            hint="write e.g. 'lambda x, min_val: x >= min_val'",
        )
    names = tuple(a.arg for a in [*args.posonlyargs, *args.args])
    for name in names:
        if name.startswith("__"):
            raise ExpressionError(
                f"`{_clip(text)}`: parameter name {name!r} is not allowed", where=where
            )
    if len(set(names)) != len(names):
        raise ExpressionError(f"`{_clip(text)}`: duplicate lambda parameter", where=where)
    return names


class _Checker:
    """Walks the AST once, rejecting anything outside the allowlist."""

    def __init__(self, text: str, where: str | None):
        self.text = text
        self.where = where
        self.free: set[str] = set()
        self.constant_roots: list[ast.expr] = []

    def reject(self, node: ast.AST, what: str) -> ExpressionError:
        snippet = ast.get_source_segment(self.text, node) or type(node).__name__
        return ExpressionError(
            f"`{_clip(self.text)}`: {what} is not allowed (`{_clip(snippet, 40)}`, "
            f"column {getattr(node, 'col_offset', 0) + 1})",
            where=self.where,
            hint=_HINT,
        )

    def check(self, node: ast.AST, bound: frozenset[str], depth: int) -> bool:
        """Check ``node``; returns True when it is a constant (name-free) subtree."""
        if depth > _MAX_DEPTH:
            raise self.reject(node, f"nesting deeper than {_MAX_DEPTH} levels")
        kind = type(node)
        if kind in _FORBIDDEN:
            raise self.reject(node, _FORBIDDEN[kind])
        sub = depth + 1
        if isinstance(node, ast.Constant):
            if type(node.value) not in (bool, int, float, str, type(None)):
                raise self.reject(node, f"a {type(node.value).__name__} literal")
            return True
        if isinstance(node, ast.Name):
            return self._name(node, bound)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return self._all(node.elts, bound, sub)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise self.reject(node, "dict unpacking (**)")
            return self._all([*node.keys, *node.values], bound, sub)  # type: ignore[list-item]
        if isinstance(node, ast.BoolOp):
            return self._all(node.values, bound, sub)
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
                raise self.reject(node, "the ~ operator")
            return self._all([node.operand], bound, sub)
        if isinstance(node, ast.BinOp):
            if not isinstance(node.op, _BIN_OPS):
                raise self.reject(node, f"the {type(node.op).__name__} operator")
            if isinstance(node.op, ast.Mod) and _is_str_constant(node.left):
                raise self.reject(node, "%-formatting of strings")
            const = self._all([node.left, node.right], bound, sub)
            if const:
                self.constant_roots.append(node)
            return const
        if isinstance(node, ast.Compare):
            return self._all([node.left, *node.comparators], bound, sub)
        if isinstance(node, ast.IfExp):
            return self._all([node.test, node.body, node.orelse], bound, sub)
        if isinstance(node, ast.Subscript):
            return self._all([node.value, node.slice], bound, sub)
        if isinstance(node, ast.Slice):
            return self._all([p for p in (node.lower, node.upper, node.step) if p], bound, sub)
        if isinstance(node, ast.Call):
            return self._call(node, bound, sub)
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
            return self._comprehension(node, bound, sub)
        raise self.reject(node, _describe(node))

    def _all(self, nodes: list[ast.expr], bound: frozenset[str], depth: int) -> bool:
        results = [self.check(n, bound, depth) for n in nodes]
        return all(results)

    def _name(self, node: ast.Name, bound: frozenset[str]) -> bool:
        if node.id.startswith("__"):
            raise self.reject(node, f"the name {node.id!r}")
        if node.id not in bound and (node.id in _CALLS or node.id in _TYPES):
            raise self.reject(node, f"using {node.id!r} other than as a call")
        if node.id not in bound:
            self.free.add(node.id)
        return False

    def _call(self, node: ast.Call, bound: frozenset[str], depth: int) -> bool:
        func = node.func
        if isinstance(func, ast.Attribute):  # a method call such as x.startswith('a')
            raise self.reject(func, "attribute access")
        if not isinstance(func, ast.Name) or func.id not in _CALLS or func.id in bound:
            name = ast.get_source_segment(self.text, func) or "?"
            raise self.reject(node, f"calling {name!r}")
        if node.keywords:
            raise self.reject(node, "a keyword argument")
        if func.id == "isinstance":
            if len(node.args) != 2 or not _is_type_spec(node.args[1]):
                raise self.reject(node, f"isinstance() without one of {', '.join(_TYPES)}")
            self.check(node.args[0], bound, depth)
            return False
        if not node.args:
            raise self.reject(node, f"{func.id}() without arguments")
        self._all(list(node.args), bound, depth)
        return False

    def _comprehension(
        self, node: ast.GeneratorExp | ast.ListComp, bound: frozenset[str], depth: int
    ) -> bool:
        if len(node.generators) != 1 or node.generators[0].is_async:
            raise self.reject(node, "a comprehension with more than one `for`")
        gen = node.generators[0]
        targets = gen.target.elts if isinstance(gen.target, ast.Tuple) else [gen.target]
        if not all(isinstance(t, ast.Name) and not t.id.startswith("__") for t in targets):
            raise self.reject(gen.target, "a loop target other than plain names")
        self.check(gen.iter, bound, depth)
        inner = bound | {t.id for t in targets}  # type: ignore[attr-defined]
        self._all([*gen.ifs, node.elt], inner, depth)
        return False


def _is_type_spec(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in _TYPES
    return (
        isinstance(node, ast.Tuple)
        and bool(node.elts)
        and all(isinstance(e, ast.Name) and e.id in _TYPES for e in node.elts)
    )


def _is_str_constant(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _describe(node: ast.AST) -> str:
    return f"a {type(node).__name__} expression"


def _fold_constants(compiled: CompiledExpression, roots: list[ast.expr]) -> None:
    """Evaluate name-free arithmetic once so ``10**10**10`` fails at compile time."""
    for node in roots:
        try:
            _Evaluator(compiled).run(node, {})
        except ExpressionError as exc:
            if exc.hint == _GUARD_HINT:
                raise ExpressionError(exc.message, where=compiled.where, hint=_GUARD_HINT) from None


class _Evaluator:
    """One evaluation: an AST walk with a step budget."""

    def __init__(self, compiled: CompiledExpression):
        self.compiled = compiled
        self.steps = 0

    def fail(self, message: str, hint: str | None = None) -> ExpressionError:
        return self.compiled._error(message, hint)

    def run(self, node: ast.expr, env: dict[str, Any]) -> Any:
        try:
            return self.eval(node, env)
        except ExpressionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any runtime failure becomes an ExpressionError
            raise self.fail(f"{type(exc).__name__}: {_clip(str(exc))}") from None

    def eval(self, node: ast.expr, env: dict[str, Any]) -> Any:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise self.fail(f"evaluation exceeded {_MAX_STEPS} steps", _GUARD_HINT)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            raise self.fail(
                f"unknown name {node.id!r}", f"available: {', '.join(sorted(env)) or 'none'}"
            )
        if isinstance(node, ast.List):
            return [self.eval(e, env) for e in node.elts]
        if isinstance(node, ast.Tuple):
            return tuple(self.eval(e, env) for e in node.elts)
        if isinstance(node, ast.Set):
            return {self.eval(e, env) for e in node.elts}
        if isinstance(node, ast.Dict):
            return {
                self.eval(k, env): self.eval(v, env)  # type: ignore[arg-type]
                for k, v in zip(node.keys, node.values)
            }
        if isinstance(node, ast.BoolOp):
            value: Any = None
            for operand in node.values:
                value = self.eval(operand, env)
                if bool(value) is isinstance(node.op, ast.Or):
                    return value
            return value
        if isinstance(node, ast.UnaryOp):
            operand = self._safe(self.eval(node.operand, env))
            if isinstance(node.op, ast.Not):
                return not operand
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left, env), self.eval(node.right, env)
            return self._binop(node.op, self._safe(left), self._safe(right))
        if isinstance(node, ast.Compare):
            return self._compare(node, env)
        if isinstance(node, ast.IfExp):
            chosen = node.body if self.eval(node.test, env) else node.orelse
            return self.eval(chosen, env)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, env)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.GeneratorExp):
            return self._generate(node, env)
        if isinstance(node, ast.ListComp):
            return list(self._generate(node, env))
        raise self.fail(f"cannot evaluate {type(node).__name__}")  # unreachable after checking

    def _safe(self, value: Any) -> Any:
        if not isinstance(value, _SAFE_VALUES):
            raise self.fail(f"values of type {type(value).__name__} are not supported")
        return value

    def _binop(self, op: ast.operator, a: Any, b: Any) -> Any:
        if isinstance(op, ast.Pow):
            big = _is_int(a) and _is_int(b) and b > 0 and abs(a) > 1
            if big and a.bit_length() * b > _MAX_INT_BITS:
                raise self.fail(f"{_num(a)} ** {_num(b)} is too large", _GUARD_HINT)
            return self._check_result(a**b)
        if isinstance(op, ast.Mult):
            for seq, n in ((a, b), (b, a)):
                if isinstance(seq, _SEQUENCES) and _is_int(n) and len(seq) * max(n, 0) > _MAX_SEQ:
                    raise self.fail(
                        f"repetition would build {len(seq) * n} items (limit {_MAX_SEQ})",
                        _GUARD_HINT,
                    )
            if _is_int(a) and _is_int(b) and a.bit_length() + b.bit_length() > _MAX_INT_BITS:
                raise self.fail("product is too large", _GUARD_HINT)
            return a * b
        if isinstance(op, ast.Add):
            both = isinstance(a, _SEQUENCES) and isinstance(b, _SEQUENCES)
            if both and len(a) + len(b) > _MAX_SEQ:
                raise self.fail(f"concatenation longer than {_MAX_SEQ} items", _GUARD_HINT)
            return self._check_result(a + b)
        if isinstance(op, ast.Mod) and isinstance(a, str):
            raise self.fail("%-formatting of strings is not allowed")
        return self._check_result(_ARITHMETIC[type(op)](a, b))

    def _check_result(self, value: Any) -> Any:
        if _is_int(value) and value.bit_length() > _MAX_INT_BITS:
            raise self.fail("integer result is too large", _GUARD_HINT)
        return value

    def _compare(self, node: ast.Compare, env: dict[str, Any]) -> bool:
        left = self.eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators):
            right = self.eval(comparator, env)
            self._safe(left)
            self._safe(right)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True

    def _subscript(self, node: ast.Subscript, env: dict[str, Any]) -> Any:
        container = self.eval(node.value, env)
        if not isinstance(container, (dict, list, tuple, str)):
            raise self.fail(f"cannot index a value of type {type(container).__name__}")
        if isinstance(node.slice, ast.Slice):
            parts = [
                self.eval(p, env) if p else None
                for p in (node.slice.lower, node.slice.upper, node.slice.step)
            ]
            return container[slice(*parts)]
        key = self.eval(node.slice, env)
        try:
            return container[key]
        except (KeyError, IndexError):
            raise self.fail(f"no item {_clip(repr(key), 40)} in the value") from None

    def _call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        name = node.func.id  # type: ignore[attr-defined]
        if name == "isinstance":
            spec = node.args[1]
            names = spec.elts if isinstance(spec, ast.Tuple) else [spec]
            kinds = tuple(_TYPES[n.id] for n in names)  # type: ignore[attr-defined]
            return isinstance(self.eval(node.args[0], env), kinds)
        args = [self.eval(a, env) for a in node.args]
        if name in ("all", "any", "min", "max") and len(args) == 1:
            args = [self._iterate(args[0])]
        elif len(args) != 1 and name not in ("min", "max"):
            raise self.fail(f"{name}() takes exactly one argument")
        funcs: dict[str, Callable[..., Any]] = {
            "len": len, "abs": abs, "min": min, "max": max, "all": all, "any": any
        }  # fmt: skip
        func = funcs[name]
        try:
            return func(*args)
        except ExpressionError:
            raise
        except Exception as exc:  # noqa: BLE001 - builtins raise TypeError/ValueError/...
            raise self.fail(f"{name}() failed: {_clip(str(exc))}") from None

    def _iterate(self, value: Any) -> Iterator[Any]:
        if isinstance(value, (set, frozenset)):
            try:  # sets iterate in hash order, which varies between processes
                return iter(sorted(value))
            except TypeError:
                return iter(sorted(value, key=lambda v: (type(v).__name__, repr(v))))
        if isinstance(value, (list, tuple, str, dict)):
            return iter(value)
        if isinstance(value, GeneratorType):  # a comprehension built by this evaluator
            return value
        raise self.fail(f"cannot iterate over a value of type {type(value).__name__}")

    def _generate(
        self, node: ast.GeneratorExp | ast.ListComp, env: dict[str, Any]
    ) -> Iterator[Any]:
        gen = node.generators[0]
        source = self._iterate(self.eval(gen.iter, env))
        targets = gen.target.elts if isinstance(gen.target, ast.Tuple) else [gen.target]
        names = [t.id for t in targets]  # type: ignore[attr-defined]

        def produce() -> Iterator[Any]:
            for item in source:
                scope = dict(env)
                if isinstance(gen.target, ast.Tuple):
                    values = list(item) if isinstance(item, (list, tuple)) else None
                    if values is None or len(values) != len(names):
                        raise self.fail(f"cannot unpack {_clip(repr(item), 40)} into {names}")
                    scope.update(zip(names, values))
                else:
                    scope[names[0]] = item
                if all(self.eval(cond, scope) for cond in gen.ifs):
                    yield self.eval(node.elt, scope)

        return produce()


_COMPARE = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}  # fmt: skip
_ARITHMETIC = {
    ast.Sub: operator.sub, ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}  # fmt: skip


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _num(value: int) -> str:
    return str(value) if value.bit_length() < 64 else f"<{value.bit_length()}-bit int>"


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
