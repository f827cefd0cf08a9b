"""Regular expressions from workflow definitions: compiled and screened at load time.

Python's ``re`` backtracks: a pattern that can match the same text in more than one
way inside a repetition takes exponential time on a text that almost matches, and a
match runs in the workflow thread holding the GIL. :func:`check_regex` refuses such
patterns before any text reaches them: ``(a+)+`` and ``(\\w*)*`` (a repeated group
whose body repeats), ``^(\\w+\\s?)+$`` (the body's other parts are optional, so a run
of word characters splits into iterations in exponentially many ways), ``(a+|b)+``
and ``(a|a)+`` (alternatives that match the same text), ``(\\d+\\.?\\d+)+`` (two
repetitions of the same characters with only optional parts between them) and
``(.*,)+`` (the separator is one of the characters the repetition takes).

How: the pattern's parse tree (``re._parser``) becomes a position automaton (Glushkov:
one state per character matcher, with a character set), counting parallel ways between
two states (``(a+)+`` reaches ``a`` from ``a`` in two ways). A pattern is refused when
the automaton is *exponentially ambiguous*: some state has two different paths back to
itself reading the same text, found as a strongly connected component of the automaton
times itself holding both a pair ``(p, p)`` and a pair ``(p, q)`` with ``p != q`` (or a
doubled edge). Character sets are compared on a sample alphabet: Latin-1, Latin
Extended-A, characters of other scripts and categories, and every character the
pattern names (range ends and insides). Atomic groups, possessive quantifiers and
lookarounds cannot be backtracked into from outside, so their insides are screened
as patterns of their own. Polynomial backtracking (``\\d+\\d+``) is not screened.

Pure and deterministic (imported by workflow code); results are cached per pattern.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

# Private, but the parser is the only exact reading of a pattern (and stable since 3.11).
sre: Any = importlib.import_module("re._constants")
sre_parse: Any = importlib.import_module("re._parser")

__all__ = ["MAX_SCREEN_STATES", "check_regex"]

MAX_SCREEN_STATES = 200_000
"""Pairs of automaton states the screen may visit; a pattern needing more is refused."""

_MAX_POSITIONS = 2_000
_UNROLL_MAX = 6  # {m,n} with n above this is screened as {min(m, 2),} (same ambiguity)

_HINT = (
    "make every repetition match each text one way only: e.g. (\\w+\\s)+ or \\w+(\\s\\w+)* "
    "instead of (\\w+\\s?)+, (a|b)+ instead of (a+|b)+, a+ instead of (a+)+, [^,]*, "
    "instead of .*, inside a repetition; or use an atomic group (?>...) or a possessive "
    "quantifier (a++)"
)


def check_regex(pattern: str) -> None:
    """Refuse a pattern that does not compile or can backtrack exponentially (ReDoS).

    Raises:
        ValueError: with what is wrong and what to write instead.
    """
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    problem = _screen(pattern)
    if problem is not None:
        raise ValueError(f"pattern {pattern!r} {problem}")


@functools.lru_cache(maxsize=1024)
def _screen(pattern: str) -> str | None:
    """Why ``pattern`` (which compiles) is refused, or None."""
    tree = sre_parse.parse(pattern)
    alphabet = _Alphabet(_named_chars(tree))
    try:
        return _Screen(alphabet).pattern(list(tree), tree.state.flags)
    except _TooComplex:
        return (
            "is too complex to screen for exponential backtracking; split it into "
            "simpler patterns or shorten it"
        )


class _TooComplex(Exception):
    pass


# ---------------------------------------------------------------- character sets


def _named_chars(tree: Any) -> set[str]:
    """Every character the pattern names: literals, and range ends and insides."""
    found: set[str] = set()

    def walk(items: Iterable[Any]) -> None:
        for op, av in items:
            if op in (sre.LITERAL, sre.NOT_LITERAL):
                found.add(chr(av))
            elif op is sre.RANGE:
                lo, hi = av
                found.update(
                    chr(c) for c in {lo, lo + 1, (lo + hi) // 2, hi - 1, hi} if lo <= c <= hi
                )
            elif op is sre.IN:
                walk(av)
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
                walk(av[2])
            elif op is sre.SUBPATTERN:
                walk(av[3])
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                walk(av[1])
            elif op is sre.ATOMIC_GROUP:
                walk(av)
            elif op is sre.BRANCH:
                for alt in av[1]:
                    walk(alt)
            elif op is sre.GROUPREF_EXISTS:
                walk(av[1])
                if av[2] is not None:
                    walk(av[2])

    walk(tree)
    return found


# Characters of other scripts and categories (digits, spaces, letters, case-folding
# oddities, emoji) beside Latin-1 and Latin Extended-A.
_OTHERS = (
    "\u0660\u0966\u0e50\uff10\U0001d7d8"  # digits
    "\u1680\u2003\u2028\u2029\u3000\ufeff\u200b"  # spaces and invisibles
    "\u0416\u0436\u03a3\u03c3\u03c2\u05d0\u0627\u4e2d\u3042\uac00"  # letters
    "\u01c5\u212a\u2126\u1e9e\u0131\u0130\ufb01"  # titlecase, Kelvin, Ohm, folds
    "\u00b2\u2460\u2167\u203f\u2040\u2014\u20ac\U0001f600\ufffd"  # numbers, marks, emoji
)
_BASE = tuple(dict.fromkeys([chr(c) for c in range(0x180)] + list(_OTHERS)))


class _Alphabet:
    """The sample alphabet of one pattern; a character set is a bit mask over it."""

    def __init__(self, named: set[str]) -> None:
        self.chars = _BASE + tuple(sorted(named - set(_BASE)))
        self.full = (1 << len(self.chars)) - 1
        self._cache: dict[Any, int] = {}

    def mask(self, key: Any, test: Callable[[str], bool], flags: int) -> int:
        """The set of sample characters ``test`` accepts (any case with IGNORECASE)."""
        cache_key = (key, flags & (re.IGNORECASE | re.DOTALL | re.ASCII))
        found = self._cache.get(cache_key)
        if found is None:
            if flags & re.IGNORECASE:
                test = functools.partial(_any_case, test)
            found = sum(1 << i for i, c in enumerate(self.chars) if test(c))
            self._cache[cache_key] = found
        return found


def _any_case(test: Callable[[str], bool], c: str) -> bool:
    return any(test(v) for v in (c, c.lower(), c.upper(), c.swapcase()) if len(v) == 1)


_CATEGORIES = {
    sre.CATEGORY_DIGIT: (r"\d", False),
    sre.CATEGORY_NOT_DIGIT: (r"\d", True),
    sre.CATEGORY_SPACE: (r"\s", False),
    sre.CATEGORY_NOT_SPACE: (r"\s", True),
    sre.CATEGORY_WORD: (r"\w", False),
    sre.CATEGORY_NOT_WORD: (r"\w", True),
    sre.CATEGORY_LINEBREAK: (r"\n", False),
    sre.CATEGORY_NOT_LINEBREAK: (r"\n", True),
}


def _is(code: int, c: str) -> bool:
    return ord(c) == code


def _is_not(code: int, c: str) -> bool:
    return ord(c) != code


def _within(low: int, high: int, c: str) -> bool:
    return low <= ord(c) <= high


def _category(rx: re.Pattern[str], inverse: bool, c: str) -> bool:
    return (rx.match(c) is None) == inverse


def _in_test(items: list[Any], flags: int) -> Callable[[str], bool]:
    """Membership in a ``[...]`` set as the parser gives it."""
    negate = bool(items) and items[0][0] is sre.NEGATE
    tests: list[Callable[[str], bool]] = []
    for op, av in items[1:] if negate else items:
        if op is sre.LITERAL:
            tests.append(functools.partial(_is, av))
        elif op is sre.RANGE:
            tests.append(functools.partial(_within, av[0], av[1]))
        elif op is sre.CATEGORY and av in _CATEGORIES:
            source, inverse = _CATEGORIES[av]
            rx = re.compile(source, re.ASCII if flags & re.ASCII else 0)
            tests.append(functools.partial(_category, rx, inverse))
        else:  # anything else: assume it may match every character
            tests.append(lambda c: True)
    if negate:
        return lambda c: not any(t(c) for t in tests)
    return lambda c: any(t(c) for t in tests)


# ---------------------------------------------------------------- the automaton


@dataclass
class _Frag:
    """A piece of pattern: the ways it matches the empty text (0, 1, 2 = several), and
    the positions it may start and end with, each with its number of ways (at most 2)."""

    eps: int = 1
    first: dict[int, int] = field(default_factory=dict)
    last: dict[int, int] = field(default_factory=dict)


def _add(into: dict[int, int], more: dict[int, int], times: int = 1) -> dict[int, int]:
    out = dict(into)
    if times:
        for k, v in more.items():
            out[k] = min(2, out.get(k, 0) + v * times)
    return out


class _Screen:
    def __init__(self, alphabet: _Alphabet) -> None:
        self.alphabet = alphabet
        self.masks: list[int] = [0]  # position 0 is the start state
        self.edges: dict[tuple[int, int], int] = {}
        self.inner: list[tuple[list[Any], int]] = []  # screened on their own

    # -------------------------------------------------------------- entry points
    def pattern(self, items: list[Any], flags: int) -> str | None:
        """Build the automaton of ``items`` and say why it is refused, or None."""
        whole = self.seq(items, flags)
        for p, n in whole.first.items():
            self.edge(0, p, n)
        problem = self.ambiguity()
        if problem is not None:
            return problem
        for sub_items, sub_flags in self.inner:  # atomic, possessive, lookaround insides
            problem = _Screen(self.alphabet).pattern(sub_items, sub_flags)
            if problem is not None:
                return problem
        return None

    # -------------------------------------------------------------- construction
    def position(self, mask: int) -> _Frag:
        if len(self.masks) > _MAX_POSITIONS:
            raise _TooComplex
        self.masks.append(mask)
        p = len(self.masks) - 1
        return _Frag(eps=0, first={p: 1}, last={p: 1})

    def edge(self, p: int, q: int, n: int) -> None:
        self.edges[(p, q)] = min(2, self.edges.get((p, q), 0) + n)

    def then(self, a: _Frag, b: _Frag) -> _Frag:
        for p, n in a.last.items():
            for q, m in b.first.items():
                self.edge(p, q, n * m)
        return _Frag(
            eps=min(2, a.eps * b.eps),
            first=_add(a.first, b.first, a.eps),
            last=_add(b.last, a.last, b.eps),
        )

    def seq(self, items: list[Any], flags: int) -> _Frag:
        frag = _Frag()
        for op, av in items:
            frag = self.then(frag, self.node(op, av, flags))
        return frag

    def star(self, body: _Frag) -> _Frag:
        for p, n in body.last.items():
            for q, m in body.first.items():
                self.edge(p, q, n * m)
        return _Frag(eps=1 + min(1, body.eps), first=body.first, last=body.last)

    def optional(self, body: _Frag) -> _Frag:
        return _Frag(eps=min(2, 1 + body.eps), first=body.first, last=body.last)

    def repeat(self, low: int, high: int, items: list[Any], flags: int) -> _Frag:
        """``items{low,high}``, unrolled: each copy gets its own positions."""
        if high == sre.MAXREPEAT or high > _UNROLL_MAX:
            frag = _Frag()
            for _ in range(min(low, 2)):
                frag = self.then(frag, self.seq(items, flags))
            return self.then(frag, self.star(self.seq(items, flags)))
        frag = _Frag()
        for _ in range(low):
            frag = self.then(frag, self.seq(items, flags))
        tail = _Frag()  # X (X (X)?)? : nested, so the optional copies are one way
        for _ in range(high - low):
            tail = self.optional(self.then(self.seq(items, flags), tail))
        return self.then(frag, tail)

    def opaque(self, items: list[Any], flags: int, *, nullable: bool) -> _Frag:
        """A part backtracking cannot enter from outside (atomic, possessive): screened on
        its own, and here one position taking any character it can take."""
        self.inner.append((items, flags))
        scratch = _Screen(self.alphabet)
        scratch.seq(items, flags)
        frag = self.position(_union(scratch.masks))
        return self.optional(frag) if nullable else frag

    def node(self, op: Any, av: Any, flags: int) -> _Frag:
        a = self.alphabet
        if op is sre.LITERAL:
            return self.position(a.mask((op, av), functools.partial(_is, av), flags))
        if op is sre.NOT_LITERAL:
            return self.position(a.mask((op, av), functools.partial(_is_not, av), flags))
        if op is sre.ANY:
            dotall = bool(flags & re.DOTALL)
            return self.position(a.mask((op, dotall), lambda c: dotall or c != "\n", flags))
        if op is sre.IN:
            return self.position(a.mask((op, repr(av)), _in_test(av, flags), flags))
        if op is sre.AT:
            return _Frag()
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            self.inner.append((list(av[1]), flags))
            return _Frag()
        if op is sre.SUBPATTERN:
            _group, add, remove, items = av
            return self.seq(list(items), (flags | add) & ~remove)
        if op is sre.BRANCH:
            frags = [self.seq(list(alt), flags) for alt in av[1]]
            return _Frag(
                eps=min(2, sum(f.eps for f in frags)),
                first=functools.reduce(lambda x, f: _add(x, f.first), frags, {}),
                last=functools.reduce(lambda x, f: _add(x, f.last), frags, {}),
            )
        if op is sre.GROUPREF_EXISTS:
            _group, yes, no = av
            frags = [self.seq(list(yes), flags), self.seq(list(no or []), flags)]
            return _Frag(
                eps=min(2, frags[0].eps + frags[1].eps),
                first=_add(frags[0].first, frags[1].first),
                last=_add(frags[0].last, frags[1].last),
            )
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            low, high, items = av
            return self.repeat(low, high, list(items), flags)
        if op is sre.POSSESSIVE_REPEAT:
            low, high, items = av
            body = [(sre.MAX_REPEAT, (low, high, items))]
            nullable = low == 0 or self._nullable(list(items), flags)
            return self.opaque(body, flags, nullable=nullable)
        if op is sre.ATOMIC_GROUP:
            return self.opaque(list(av), flags, nullable=self._nullable(list(av), flags))
        # a back reference (or anything new): any text, possibly none
        return self.optional(self.position(a.full))

    def _nullable(self, items: list[Any], flags: int) -> bool:
        return _Screen(self.alphabet).seq(items, flags).eps > 0

    # -------------------------------------------------------------- the check
    def ambiguity(self) -> str | None:
        """Why the automaton is exponentially ambiguous, or None."""
        succ: dict[int, list[tuple[int, int]]] = {}
        for (p, q), n in self.edges.items():
            succ.setdefault(p, []).append((q, n))
        masks = self.masks

        def pairs(node: tuple[int, int]) -> Iterable[tuple[tuple[int, int], bool]]:
            p1, p2 = node
            for q1, n1 in succ.get(p1, ()):
                for q2, n2 in succ.get(p2, ()):
                    if masks[q1] & masks[q2]:
                        yield (q1, q2), (p1 == p2 and q1 == q2 and n1 > 1)

        graph: dict[tuple[int, int], list[tuple[tuple[int, int], bool]]] = {}
        todo = [(p, p) for p in range(len(masks)) if p in succ]
        while todo:
            node = todo.pop()
            if node in graph:
                continue
            out = list(pairs(node))
            graph[node] = out
            if len(graph) > MAX_SCREEN_STATES:
                raise _TooComplex
            todo.extend(n for n, _ in out if n not in graph)
        for component in _components(graph):
            members = set(component)
            diagonal = any(p == q for p, q in component)
            if not diagonal:
                continue
            off = any(p != q for p, q in component)
            doubled = any(d and n in members for v in component for n, d in graph[v])
            if off or doubled:
                return (
                    "can match the same text in more than one way inside a repetition "
                    "(like (a+)+, (\\w+\\s?)+ or (a+|b)+), so a text that almost matches "
                    f"takes exponential time; {_HINT}"
                )
        return None


def _union(masks: list[int]) -> int:
    out = 0
    for m in masks[1:]:
        out |= m
    return out


def _components(graph: dict[Any, list[tuple[Any, bool]]]) -> list[list[Any]]:
    """Strongly connected components with more than one node or a self loop (Tarjan,
    iterative)."""
    index: dict[Any, int] = {}
    low: dict[Any, int] = {}
    on_stack: set[Any] = set()
    stack: list[Any] = []
    found: list[list[Any]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            edges = graph[v]
            if i < len(edges):
                work.append((v, i + 1))
                w = edges[i][0]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or any(n == v for n, _ in edges):
                    found.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return found
