"""The markdown-it-py block parser behind the tasks.md parser, tuned for speed.

markdown-it-py tries the block rules in order at every block start, and again
on each continuation line to see whether a new block interrupts the current
one; for a 1,000-task file that is most of the parse. The parser needs block
structure only, so:

* the inline rules are off: names keep their markdown as written (backticks,
  links), which is what an agent should see;
* ``text_join`` is off: it joins inline text tokens, and there are none;
* every other CommonMark block rule stays on (an HTML comment must still hide
  the tasks in it, a setext heading is still a heading), but the ones that
  almost always fail are skipped on lines where a per-file scan shows they
  cannot match. The tokens are exactly those of
  ``MarkdownIt("commonmark").disable("inline")``.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable, Iterator

from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_core import StateCore

__all__ = ["blank_front_matter", "block_parser"]

_Rule = Callable[[StateBlock, int, int, bool], bool]

# What a line must contain for the rule to start a block on it. Each rule reads
# the line after any list marker or blockquote "> ", so searching the whole
# line is safe. (markdown-it has already turned "\r\n" and "\r" into "\n".)
_LINE_NEEDS = {
    "fence": re.compile(r"```|~~~"),
    "blockquote": re.compile(r">"),
    "hr": re.compile(r"[-*_][ \t]*$", re.MULTILINE),  # ends with its marker
    "html_block": re.compile(r"<"),
    "heading": re.compile(r"#"),
}
# A blank line, or a possible setext underline ("===", "  ---", "> ---").
_BLANK_OR_UNDERLINE = re.compile(r"^(?:[ \t]*|(?P<u>[ \t>]*(?:-+|=+)[ \t]*))$", re.MULTILINE)
_ENV_KEY = "phasegate_source_facts"
# YAML front matter: "---" on the first line, "---" or "..." closing it, YAML-looking lines
# between (keys, comments, indented or "- " continuations) and at least one "key:".
_FRONT_MATTER = re.compile(
    r"\A\ufeff?---[ \t]*\r?\n(?P<body>(?:[^\r\n]*\r?\n){0,200}?)(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)"
)
_YAML_LINE = re.compile(r"[ \t]*$|[ \t]+\S|#|- |[A-Za-z_][\w.-]*[ \t]*:(?:[ \t]|$)")
_YAML_KEY = re.compile(r"^[A-Za-z_][\w.-]*[ \t]*:(?:[ \t]|$)", re.MULTILINE)
_NOT_NEWLINE = re.compile(r"[^\r\n]+")


def blank_front_matter(text: str) -> str:
    """``text`` with a leading YAML front matter block blanked out, line breaks kept.

    spec-kit writes ``---`` / ``description: "..."`` / ``---`` at the top of tasks.md;
    read as markdown that is a rule and a setext heading (or, with ``# comment`` lines,
    a bogus title). A block that does not look like YAML is left alone: a file may
    simply open with a thematic break.
    """
    if not text.startswith(("---", "\ufeff---")):
        return text
    m = _FRONT_MATTER.match(text)
    if m is None or _YAML_KEY.search(m["body"]) is None:
        return text
    if not all(_YAML_LINE.match(line) for line in m["body"].splitlines()):
        return text
    return _NOT_NEWLINE.sub("", m.group(0)) + text[m.end() :]


def _by_line(src: str, pattern: re.Pattern[str]) -> Iterator[tuple[int, re.Match[str]]]:
    """Each match of ``pattern`` with the 0-based number of its line."""
    line, last = 0, 0
    for m in pattern.finditer(src):
        line += src.count("\n", last, m.start())
        last = m.start()
        yield line, m


class _SourceFacts:
    """Per-file facts the rule guards read; computed once per parse."""

    __slots__ = ("blanks", "has_reference", "lines", "src", "underlines")

    def __init__(self, src: str):
        self.src = src
        self.lines = {name: {n for n, _ in _by_line(src, p)} for name, p in _LINE_NEEDS.items()}
        # A definition's "]:" may sit lines below where it starts, so this is per file.
        self.has_reference = "]:" in src
        self.blanks: list[int] = []
        self.underlines: list[int] = []
        for line, m in _by_line(src, _BLANK_OR_UNDERLINE):
            (self.underlines if m["u"] is not None else self.blanks).append(line)

    def may_be_setext(self, start: int) -> bool:
        """False if no possible underline follows line ``start`` before a blank line."""
        k = bisect_right(self.underlines, start)
        if k == len(self.underlines):
            return False
        j = bisect_right(self.blanks, start)
        return j == len(self.blanks) or self.underlines[k] < self.blanks[j]


def _read_source(state: StateCore) -> None:
    # A core rule run just before "block", so the facts always match this parse.
    state.env[_ENV_KEY] = _SourceFacts(state.src)


def _on_lines(name: str, rule: _Rule) -> _Rule:
    def guarded(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        return start in state.env[_ENV_KEY].lines[name] and rule(state, start, end, silent)

    return guarded


def _if_setext(rule: _Rule) -> _Rule:
    # lheading scans the whole paragraph for an underline, then fails and the
    # paragraph rule scans it again: on nearly every paragraph and list item.
    def guarded(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        return state.env[_ENV_KEY].may_be_setext(start) and rule(state, start, end, silent)

    return guarded


def _if_reference(rule: _Rule) -> _Rule:
    # The text of every "- [ ] T001" item starts with "[", so the rule ran on each.
    def guarded(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        return state.env[_ENV_KEY].has_reference and rule(state, start, end, silent)

    return guarded


def block_parser() -> MarkdownIt:
    """A CommonMark block parser: inline parsing off, rarely-matching rules guarded.

    Returns:
        A ``MarkdownIt`` whose ``parse(text)`` yields the same tokens as
        ``MarkdownIt("commonmark").disable("inline")``: block tokens, and
        ``inline`` tokens carrying their raw text with no children.
    """
    md = MarkdownIt("commonmark").disable(["inline", "text_join"])
    md.core.ruler.before("block", "phasegate_source_facts", _read_source)
    ruler = md.block.ruler
    for rule in list(ruler.__rules__):
        if rule.name == "lheading":
            guarded = _if_setext(rule.fn)
        elif rule.name == "reference":
            guarded = _if_reference(rule.fn)
        elif rule.name in _LINE_NEEDS:
            guarded = _on_lines(rule.name, rule.fn)
        else:
            continue
        ruler.at(rule.name, guarded, {"alt": list(rule.alt)})  # same place, same chains
    return md
