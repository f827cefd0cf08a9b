"""Rendering phase and task content: Jinja2 sandbox plus legacy ``[PLACEHOLDER]`` names.

Legacy names are rewritten into Jinja expressions when a template is compiled
(``[PHASE_NAME]`` -> ``{{ legacy.PHASE_NAME }}``), so their values are inserted
as data and never interpreted as template code. Other bracketed text is left
alone. Compiled templates are cached per (path, mtime, size): a cached render
costs only the render itself.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError
from jinja2.exceptions import SecurityError, TemplateError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from phasegate.activities.library import read_text
from phasegate.domain.errors import DefinitionError, TemplateNotFound

__all__ = ["LEGACY_PLACEHOLDERS", "Renderer"]

LEGACY_PLACEHOLDERS = (
    "PHASE_NUMBER",
    "PHASE_NAME",
    "PHASE_DESCRIPTION",
    "ESTIMATED_DURATION",
    "TASK_COUNT",
    "NEXT_PHASE_NUMBER",
    "VALIDATION_GATE",
    "TASK_ID",
    "TASK_NAME",
    "TASK_DESCRIPTION",
    "ESTIMATED_TIME",
    "DEPENDENCIES",
    "ACCEPTANCE_CRITERIA",
    "NEXT_TASK_NUMBER",
)
_LEGACY = re.compile(r"\[(" + "|".join(LEGACY_PLACEHOLDERS) + r")\]")


def _tojson(value: Any, indent: int | None = None) -> str:
    """JSON as written: non-ASCII kept, nothing escaped for HTML."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, indent=indent)


class Renderer:
    """Compiles and renders templates from files; thread-safe, caches compiled templates."""

    def __init__(self) -> None:
        self._env = SandboxedEnvironment(
            autoescape=False, keep_trailing_newline=True, undefined=StrictUndefined
        )
        # `| tojson` keeps names as written: "🎯 MVP", not "\ud83c\udfaf MVP", and "Polish &
        # Cross-Cutting Concerns", not "\u0026" (Jinja's own filter escapes <>&' for HTML
        # <script> tags; phase content is markdown for an agent, rendered unescaped).
        self._env.policies["json.dumps_kwargs"] = {"sort_keys": True, "ensure_ascii": False}
        self._env.filters["tojson"] = _tojson
        self._cache: dict[tuple[str, int, int], Any] = {}
        self._lock = threading.Lock()

    def _compile(self, path: Path) -> Any:
        try:
            st = path.stat()
        except FileNotFoundError:
            raise TemplateNotFound(
                "template not found",
                where=str(path),
                hint="create it or fix the path in metadata.json (dynamic_config.templates)",
            ) from None
        key = (str(path), st.st_mtime_ns, st.st_size)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        source = read_text(path)
        source = _LEGACY.sub(lambda m: "{{ legacy." + m.group(1) + " }}", source)
        try:
            template = self._env.from_string(source)
        except TemplateSyntaxError as exc:
            raise DefinitionError(
                f"template syntax error: {exc.message}",
                where=f"{path}:{exc.lineno}",
                hint="fix the Jinja2 syntax (wrap literal braces in {% raw %})",
            ) from None
        with self._lock:
            self._cache[key] = template
        return template

    def check(self, path: Path) -> None:
        """Compile ``path`` (raising the same errors a render would)."""
        self._compile(path)

    def render(self, path: Path, context: dict[str, Any]) -> str:
        """Render the file at ``path`` with ``context`` (plus ``legacy`` names).

        Raises:
            TemplateNotFound: the file does not exist.
            DefinitionError: syntax error, undefined variable or sandbox violation,
                with file and line.
        """
        template = self._compile(path)
        try:
            return template.render(**context)
        except (UndefinedError, SecurityError, TemplateError) as exc:
            raise DefinitionError(
                f"template render failed: {exc}",
                where=f"{path}:{_error_line(exc)}",
                hint="use only the documented template variables (see library README)",
            ) from None


def _error_line(exc: Exception) -> str:
    tb = exc.__traceback__
    line = "?"
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = str(tb.tb_lineno)
        tb = tb.tb_next
    return line
