"""The ``render_agent_prompt`` activity: an agent's instructions and user message.

Each agent has one prompt file, ``agents/<agent>.md`` in a library: YAML front matter
with its context strategy, then a Jinja2 body, the instructions (system prompt)::

    ---
    context: [issue, outputs, replan_request, plan]   # sections it sees (domain.orchestration.context)
    description: optional, for people
    ---
    You are the planner ... {{ issue.title }} ...

The first library on the worker's path (``PHASEGATE_LIBRARY``, then the shipped
``library/``) holding ``agents/<agent>.md`` wins, so a team overrides one agent's
prompt by adding that file to its own library.

A render reads the file through the bounded reader (``activities._safe_read``: a
regular UTF-8 file of at most 256 KiB, inside its library), compiles it in Jinja2's
``SandboxedEnvironment`` with ``StrictUndefined`` (cached per file, mtime and size),
retrieves project standards from the RAG index when the strategy lists
``standards``, and renders: the template sees only the listed sections' variables
(plus ``agent``, ``context``, ``working_dir``, ``session_id``), and the user message
holds only the listed sections, at most 64 KiB. Issue text, outputs and comments are
data in both, never template code. Errors are ``DefinitionError`` naming
``file:line`` (front matter, syntax, an undefined variable) with what to do; the
activity raises them non-retryable.

Configuration is per worker, never per process: each worker builds its own
:class:`AgentPrompts` (its library path, retriever and context budget) and registers
that object's :meth:`AgentPrompts.render_agent_prompt` method as the activity
(``worker.py``), so two workers in one process render from their own libraries.
:data:`render_agent_prompt` names the same activity for workflow code.

An orchestration's LLM agents render theirs in the model-request activity itself
(``activities/_prompt_in_request.py``): the worker hands its :class:`AgentPrompts` to
its activities through :meth:`AgentPrompts.plugin` (:func:`current_prompts`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import yaml
from jinja2 import StrictUndefined, Template, TemplateSyntaxError
from jinja2.exceptions import SecurityError, TemplateError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment
from temporalio import activity
from temporalio.plugin import SimplePlugin
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

import phasegate.activities._safe_read as safe_read
from phasegate import SHIPPED_LIBRARY
from phasegate.activities.rag import Retriever
from phasegate.domain.errors import DefinitionError, PhasegateError, TemplateNotFound
from phasegate.domain.orchestration.agents import AGENTS, AgentName, Issue, PlanStep
from phasegate.domain.orchestration.context import (
    MAX_PROMPT_BYTES,
    AgentPrompt,
    AgentPromptRequest,
    ContextSections,
    SectionName,
    check_strategy,
    prompt_sha256,
    render_sections,
    template_data,
)
from phasegate.domain.rag import RetrievalQuery, RetrievedChunk
from phasegate.temporal import application_error

__all__ = [
    "PROMPT_FILE_LIMIT",
    "AgentPrompt",
    "AgentPromptRequest",
    "AgentPrompts",
    "AgentTemplate",
    "current_prompts",
    "render_agent_prompt",
]

PROMPT_FILE_LIMIT = 256 * safe_read.KiB
_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
_KEYS = ("context", "description")
_FRONT_HINT = (
    "start the file with front matter: a line ---, then context: [issue, outputs, ...] "
    "(sections: issue, outputs, replan_request, plan, review, standards), then a line ---"
)
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentTemplate:
    """One parsed prompt file: where it is, its context strategy, its compiled body."""

    path: Path
    strategy: list[SectionName]
    template: Template
    body_line: int  # the file's line number of the body's first line, minus one


def _where(path: Path, line: int | None) -> str:
    return f"{path}:{line}" if line else str(path)


def _key_lines(front: str) -> dict[str, int]:
    """1-based file lines of the top-level keys of the front matter (after its ---)."""
    found: dict[str, int] = {}
    for n, line in enumerate(front.splitlines(), 2):
        m = re.match(r"([A-Za-z_][\w-]*)\s*:", line)
        if m:
            found.setdefault(m.group(1), n)
    return found


def _parse(path: Path, text: str, env: SandboxedEnvironment) -> AgentTemplate:
    """Front matter and body of a prompt file; errors name ``path:line``."""
    m = _FRONT.match(text)
    if not m:
        raise DefinitionError(
            "the agent prompt has no front matter", where=f"{path}:1", hint=_FRONT_HINT
        )
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise DefinitionError(
            f"front matter: {problem}", where=f"{path}:{line}", hint=_FRONT_HINT
        ) from None
    lines = _key_lines(m.group(1))
    if not isinstance(data, dict):
        raise DefinitionError(
            "front matter must be a mapping with a context key", where=f"{path}:2", hint=_FRONT_HINT
        )
    for key in data:
        if key not in _KEYS:
            raise DefinitionError(
                f"unknown front matter key {key!r}",
                where=_where(path, lines.get(str(key))),
                hint=f"the keys are {', '.join(_KEYS)}",
            )
    try:
        strategy = check_strategy(data.get("context"))
    except ValueError as exc:
        raise DefinitionError(
            str(exc), where=_where(path, lines.get("context", 2)), hint=_FRONT_HINT
        ) from None
    offset = m.group(0).count("\n")
    try:
        template = env.from_string(text[m.end() :])
    except TemplateSyntaxError as exc:
        raise DefinitionError(
            f"template syntax error: {exc.message}",
            where=f"{path}:{offset + (exc.lineno or 1)}",
            hint="fix the Jinja2 syntax (wrap literal braces in {% raw %} ... {% endraw %})",
        ) from None
    return AgentTemplate(path=path, strategy=strategy, template=template, body_line=offset)


def _template_line(exc: BaseException) -> int | None:
    """The template line a render error happened on, from its traceback."""
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _standard(hit: RetrievedChunk) -> str:
    title = " > ".join(hit.heading_path) or hit.heading or "(untitled)"
    return f"{hit.file}:{hit.line}: {title}\n\n{hit.text}"


class AgentPrompts:
    """Agent prompt files of a library path, compiled and cached; renders prompts.

    Thread-safe: the activity renders in worker threads.
    """

    def __init__(
        self,
        library_paths: Sequence[str] = (),
        *,
        retriever: Retriever | None = None,
        context_tokens: int = 1200,
        context_k: int = 5,
    ) -> None:
        """Where prompts are found and where standards come from.

        Args:
            library_paths: Library folders searched in order; the shipped library is
                always searched last.
            retriever: The RAG index (``standards``); None retrieves nothing.
            context_tokens: Token budget of the retrieved standards.
            context_k: Most standards chunks retrieved.
        """
        libs = [*library_paths, SHIPPED_LIBRARY]
        self._libraries = list(dict.fromkeys(os.path.realpath(p) for p in libs))
        self._retriever = retriever
        self._tokens = context_tokens
        self._k = context_k
        self._env = SandboxedEnvironment(
            autoescape=False, keep_trailing_newline=True, undefined=StrictUndefined
        )
        self._cache: dict[tuple[str, int, int], AgentTemplate] = {}
        self._lock = threading.Lock()

    def path_of(self, agent: AgentName) -> tuple[Path, Path]:
        """``(prompt file, its library)`` for ``agent``: the first library that has one.

        Raises:
            TemplateNotFound: No library on the path has ``agents/<agent>.md``.
        """
        for lib in self._libraries:
            path = Path(lib) / "agents" / f"{agent}.md"
            if os.path.lexists(path):
                return path, Path(lib)
        raise TemplateNotFound(
            f"no prompt for the {agent} agent in {', '.join(self._libraries)}",
            where=str(Path(SHIPPED_LIBRARY) / "agents" / f"{agent}.md"),
            hint=f"reinstall phasegate, or add agents/{agent}.md to a library on PHASEGATE_LIBRARY",
        )

    def template(self, agent: AgentName) -> AgentTemplate:
        """The parsed prompt file of ``agent`` (re-read only when it changed).

        Raises:
            DefinitionError: Unreadable, too large, bad front matter or Jinja2 syntax.
        """
        path, lib = self.path_of(agent)
        try:
            st = path.stat()
        except OSError:
            st = None
        key = (str(path), st.st_mtime_ns, st.st_size) if st else None
        with self._lock:
            hit = self._cache.get(key) if key else None
        if hit is not None:
            return hit
        try:
            text = safe_read.read_text(
                path,
                limit=PROMPT_FILE_LIMIT,
                what="agent prompt",
                roots=[lib],
                hint=f"an agent prompt must be a regular UTF-8 file of at most "
                f"{safe_read.size_text(PROMPT_FILE_LIMIT)} inside its library",
            )
        except FileNotFoundError:
            raise TemplateNotFound(
                "agent prompt not found",
                where=str(path),
                hint="it vanished or is a dangling symlink: restore it",
            ) from None
        with self._lock:
            parsed = _parse(path, text, self._env)
            if key:
                if len(self._cache) > 64:
                    self._cache.clear()
                self._cache[key] = parsed
        return parsed

    def standards(self, issue: Issue) -> list[str]:
        """Project standards and core docs retrieved for ``issue`` (never a phase's docs).

        A failing index is logged and yields none: an agent still runs without them.
        """
        if self._retriever is None or self._k <= 0 or self._tokens <= 0:
            return []
        query = RetrievalQuery(
            text=f"{issue.title}\n{' '.join(issue.labels)}\n{issue.body[:2000]}",
            max_phase=-1,  # no phased chunk at all: an agent sees no gated phase's content
            k=self._k,
            token_budget=self._tokens,
            tags=["standards", "core"],
        )
        try:
            hits = self._retriever.search(query)
        except Exception as exc:  # noqa: BLE001 - standards are an aid, not a gate
            _log.warning("standards not retrieved for issue %s: %s", issue.id, exc)
            return []
        return [_standard(h) for h in hits if h.phase is None]

    def render(self, req: AgentPromptRequest) -> AgentPrompt:
        """The agent's instructions and user message for ``req``.

        Raises:
            DefinitionError: The prompt file is wrong (``file:line``) or renders more
                than 64 KiB of instructions.
        """
        tpl = self.template(req.agent)
        sections = req.sections
        if "standards" in tpl.strategy:
            found = self.standards(sections.issue)
            merged = list(dict.fromkeys([*sections.standards, *found]))
            sections = ContextSections.model_validate(
                {**sections.model_dump(), "standards": merged}
            )
        variables = {
            "agent": req.agent,
            "context": list(tpl.strategy),
            "working_dir": req.working_dir,
            "session_id": req.session_id,
            **template_data(sections, tpl.strategy),
        }
        try:
            instructions = tpl.template.render(**variables)
        except (UndefinedError, SecurityError, TemplateError) as exc:
            line = _template_line(exc)
            listed = ", ".join(tpl.strategy)
            raise DefinitionError(
                f"agent prompt render failed: {exc}",
                where=_where(tpl.path, tpl.body_line + line if line else None),
                hint=f"this prompt's context lists {listed}: use only their variables and "
                "agent, context, working_dir, session_id, or add the section to context",
            ) from None
        size = len(instructions.encode())
        if size > MAX_PROMPT_BYTES:
            raise DefinitionError(
                f"the rendered instructions are {safe_read.size_text(size)} "
                f"(limit {safe_read.size_text(MAX_PROMPT_BYTES)})",
                where=str(tpl.path),
                hint="shorten the prompt; put long guidance in a standards folder instead",
            )
        prompt, shown = render_sections(sections, tpl.strategy)
        return AgentPrompt(
            instructions=instructions,
            prompt=prompt,
            sections=shown,
            sha256=prompt_sha256(instructions, prompt),
            source=str(tpl.path),
        )

    def check(self) -> list[str]:
        """Render every agent's prompt with sample sections; the problems found.

        Returns:
            One line per agent whose prompt fails (``file:line: problem (hint)``).
        """
        problems = []
        for agent in AGENTS:
            try:
                self.render(_sample_request(agent))
            except PhasegateError as exc:
                problems.append(str(exc))
        return problems

    async def render_in_activity(self, req: AgentPromptRequest) -> AgentPrompt:
        """:meth:`render` in a worker thread, for an activity.

        Raises:
            ApplicationError: Non-retryable, type ``definition_invalid`` or
                ``template_not_found``, with ``file:line`` in its details.
        """
        try:
            return await asyncio.to_thread(self.render, req)
        except PhasegateError as exc:
            raise application_error(exc) from None

    @activity.defn(name="render_agent_prompt")
    async def render_agent_prompt(self, req: AgentPromptRequest) -> AgentPrompt:
        """Render ``req.agent``'s instructions and user message (see the module docstring).

        Raises:
            ApplicationError: Non-retryable, type ``definition_invalid`` or
                ``template_not_found``, with ``file:line`` in its details.
        """
        return await self.render_in_activity(req)

    def plugin(self) -> SimplePlugin:
        """A Temporal worker plugin that makes these the prompts the worker's activities
        render (:func:`current_prompts`; the model-request activities render the
        orchestration agents' prompts with them)."""
        return SimplePlugin("phasegate.AgentPrompts", interceptors=[_Scope(self)])


_CURRENT: ContextVar[AgentPrompts | None] = ContextVar("phasegate_agent_prompts", default=None)


def current_prompts() -> AgentPrompts | None:
    """The prompts of the worker running this activity (its :meth:`AgentPrompts.plugin`),
    or None outside such a worker."""
    return _CURRENT.get()


class _Scope(Interceptor):
    """Makes one worker's prompts current in its activities (each activity runs in a task
    of its own, whose context dies with it: nothing to reset)."""

    def __init__(self, prompts: AgentPrompts) -> None:
        self._prompts = prompts

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _ActivityScope(next, self._prompts)


class _ActivityScope(ActivityInboundInterceptor):
    def __init__(self, next: ActivityInboundInterceptor, prompts: AgentPrompts) -> None:
        super().__init__(next)
        self._prompts = prompts

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        _CURRENT.set(self._prompts)
        return await super().execute_activity(input)


def _sample_request(agent: AgentName) -> AgentPromptRequest:
    issue = Issue(id="1", title="Sample issue", body="A sample body.", labels=["bug"])
    steps = [PlanStep(agent=a, reason="sample") for a in ("analyst", "developer", "reviewer")]
    sections = ContextSections(
        issue=issue,
        replan_request="sample replan request",
        plan=steps,
        current=1,
        review_comments=["sample comment"],
        standards=["sample standard"],
    )
    return AgentPromptRequest(agent=agent, sections=sections, working_dir=".", session_id="s-1")


render_agent_prompt = cast(
    "Callable[[AgentPromptRequest], Awaitable[AgentPrompt]]", AgentPrompts.render_agent_prompt
)
"""The ``render_agent_prompt`` activity (:meth:`AgentPrompts.render_agent_prompt`), for
``workflow.execute_activity``: Temporal schedules it by name; the worker registers the
method of its own :class:`AgentPrompts`."""
