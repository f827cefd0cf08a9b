"""Session folder names, complexity, and which agent a task goes to.

- **Slugs**: ``WFS-<slug>``: lowercase words joined by hyphens, ``-NNN`` added when
  the name is taken, at most 50 characters with the ``WFS-`` prefix.
- **Complexity** by task count: simple (< 5), medium (5-15), complex (> 15); it is
  upgraded as tasks are added, never downgraded, and may be set higher by hand.
- **Agents**: a task without ``meta.agent`` gets one by its type, else by keywords of
  its title (Claude-Code-Workflow's table).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Literal

__all__ = [
    "MAX_FOLDER_CHARS",
    "Complexity",
    "agent_for",
    "classify",
    "folder_name",
    "slugify",
    "upgrade",
]

MAX_FOLDER_CHARS = 50
_PREFIX = "WFS-"
Complexity = Literal["simple", "medium", "complex"]
_ORDER: tuple[Complexity, ...] = ("simple", "medium", "complex")


def slugify(text: str) -> str:
    """``"Add OAuth2 login (v2)!"`` -> ``"add-oauth2-login-v2"``; ``"session"`` if empty."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", plain.lower()).strip("-")
    return slug or "session"


def folder_name(title: str, taken: Collection[str] = ()) -> str:
    """The ``WFS-<slug>`` folder for ``title``, not one of ``taken`` (folder names)."""
    room = MAX_FOLDER_CHARS - len(_PREFIX)
    base = slugify(title)[:room].rstrip("-") or "session"
    name = _PREFIX + base
    n = 1
    while name in taken:
        suffix = f"-{n:03d}"
        name = _PREFIX + base[: room - len(suffix)].rstrip("-") + suffix
        n += 1
    return name


def classify(task_count: int) -> Complexity:
    if task_count < 5:
        return "simple"
    return "medium" if task_count <= 15 else "complex"


def upgrade(current: Complexity | None, found: Complexity) -> Complexity:
    """The higher of the two: complexity is never downgraded."""
    if current is None:
        return found
    return max(current, found, key=_ORDER.index)


_BY_TYPE = {
    "feature": "@code-developer",
    "implementation": "@code-developer",
    "refactor": "@code-developer",
    "bugfix": "@code-developer",
    "test": "@code-review-test-agent",
    "test-gen": "@code-review-test-agent",
    "test-fix": "@code-review-test-agent",
    "review": "@code-review-agent",
    "docs": "@doc-generator",
    "documentation": "@doc-generator",
    "analysis": "@action-planning-agent",
    "planning": "@action-planning-agent",
    "design": "@action-planning-agent",
}
_BY_KEYWORD = (
    (("test", "spec", "coverage", "e2e"), "@code-review-test-agent"),
    (("review", "audit", "inspect"), "@code-review-agent"),
    (("doc", "readme", "guide", "changelog"), "@doc-generator"),
    (("plan", "design", "architect", "analy", "research"), "@action-planning-agent"),
)


def agent_for(task_type: str, title: str, given: str = "") -> str:
    """``given`` when set, else the agent for the task's type, else by title keywords,
    else ``@code-developer``."""
    if given:
        return given
    by_type = _BY_TYPE.get(task_type.strip().lower())
    if by_type:
        return by_type
    words = title.lower()
    for keywords, agent in _BY_KEYWORD:
        if any(re.search(rf"\b{k}", words) for k in keywords):
            return agent
    return "@code-developer"
