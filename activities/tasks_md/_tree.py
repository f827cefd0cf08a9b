"""A small block tree over markdown-it's token stream, plus text helpers on its nodes.

markdown-it-py's own ``SyntaxTreeNode`` works too, but this slotted tree is a
few times cheaper to build, and the parser only needs block structure: type,
1-based line, heading level, list-item number and the raw inline text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from markdown_it.token import Token

from phasegate.activities.tasks_md._text import strip_checkbox

T = TypeVar("T")

LISTS = ("bullet_list", "ordered_list")
CODE = ("fence", "code_block")


class Node:
    """One block: ``paragraph``, ``heading``, ``bullet_list``, ``list_item``, ``fence``..."""

    __slots__ = ("children", "content", "info", "level", "line", "markup", "type")

    def __init__(self, type_: str, line: int, level: int = 0, info: str = "", markup: str = ""):
        self.type = type_
        self.line = line  # 1-based line where the block starts
        self.level = level  # heading level, 0 for other blocks
        self.info = info  # ordered list item number, fence info string
        self.markup = markup
        self.content = ""  # raw inline text (headings, paragraphs) or code
        self.children: list[Node] = []


def drain(items: list[T]) -> Iterator[T]:
    """Take the items out of a list, first to last, so each is freed once used.

    The parser's stages (tokens, tree, drafts, models) each hold tens of
    thousands of objects; draining one stage while building the next keeps
    fewer alive at once, so CPython's garbage collector runs (and walks the
    heap) about a third less often.
    """
    items.reverse()
    pop = items.pop
    while items:
        yield pop()


def build_tree(tokens: list[Token]) -> list[Node]:
    """Nest markdown-it's flat token stream into blocks; returns the top-level blocks.

    ``tokens`` is drained (left empty): each token is freed once its node exists.
    """
    root = Node("root", 1)
    stack = [root]
    parent = root
    for tok in drain(tokens):
        nesting = tok.nesting
        if nesting == -1:
            if len(stack) > 1:
                stack.pop()
                parent = stack[-1]
        elif tok.type == "inline":  # most tokens: the text of the paragraph or heading
            parent.content = tok.content
        else:
            kind, where = tok.type, tok.map
            line = where[0] + 1 if where else parent.line
            if nesting == 1:
                level = int(tok.tag[1]) if kind == "heading_open" else 0
                node = Node(kind[:-5], line, level, tok.info, tok.markup)
                parent.children.append(node)
                stack.append(node)
                parent = node
            else:
                node = Node(kind, line, 0, tok.info, tok.markup)
                node.content = tok.content
                parent.children.append(node)
    return root.children


def item_text(item: Node) -> tuple[str, list[Node]]:
    """A list item's first paragraph text and the blocks after it."""
    if item.children and item.children[0].type == "paragraph":
        return item.children[0].content, item.children[1:]
    return "", item.children


def first_line(text: str) -> str:
    """The first line of an inline text."""
    return text.split("\n", 1)[0]


def one_line(text: str) -> str:
    """Soft line breaks of a paragraph joined into one line."""
    return " ".join(part.strip() for part in text.split("\n") if part.strip())


def list_texts(node: Node) -> list[str]:
    """Every item of a list (nested items included), checkbox markup stripped."""
    out: list[str] = []
    for item in node.children:
        text, rest = item_text(item)
        if text.strip():
            out.append(strip_checkbox(one_line(text)))
        for child in rest:
            if child.type in LISTS:
                out.extend(list_texts(child))
    return out


def item_markdown(item: Node, depth: int = 0) -> list[str]:
    """A list item (and its nested items) as ``- text`` lines indented by depth."""
    pad = "  " * depth
    text, rest = item_text(item)
    lines = [f"{pad}- {one_line(text)}".rstrip()]
    for child in rest:
        if child.type in LISTS:
            for sub in child.children:
                lines.extend(item_markdown(sub, depth + 1))
        else:
            lines.extend(f"{pad}  {line}".rstrip() for line in block_text(child).split("\n"))
    return lines


def block_text(node: Node) -> str:
    """Markdown for a non-list block kept in a description (paragraph, code, quote)."""
    if node.type in CODE:
        fence = node.markup or "```"
        return f"{fence}{node.info}\n{node.content}{fence}"
    if node.type == "blockquote":
        inner = "\n\n".join(block_text(child) for child in node.children)
        return "\n".join(f"> {line}".rstrip() for line in inner.split("\n"))
    if node.type == "heading":
        return f"{'#' * node.level} {node.content}"
    if node.type in LISTS:
        return "\n".join(line for item in node.children for line in item_markdown(item))
    return node.content.strip()
