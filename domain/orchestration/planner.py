"""The rules planner: which agents run for an issue, decided from its text and labels.

The embedded default planner (model id ``rules``): no model call, no API key, so an
orchestration runs offline. It follows the routing guidelines an LLM planner is also
given (``library/agents/planner.md``):

========================  ============================================  ==========
issue                     steps                                         scope
========================  ============================================  ==========
typo, docs, config        developer, reviewer                           trivial
bug, clearly located      developer, reviewer                           simple
bug, unclear              analyst, developer, reviewer                  moderate
feature, clear            architect, developer, reviewer                simple or moderate
feature, unclear          analyst, architect, developer, reviewer       moderate
feature, complex          analyst, architect, developer, reviewer       complex
nothing recognised        analyst, developer, reviewer                  moderate
========================  ============================================  ==========

Labels weigh most (``bug``, ``typo``, ``docs``, ``config``, ``feature``,
``enhancement``, ``complex``, ``epic``...; ``type: bug`` and ``kind/bug`` count as
``bug``), then the title, then the body. On a replan, an analysis decides the scope
(complex with no architect done -> ``[architect, developer, reviewer]``), a replan
reason can ask for a design or an investigation, and steps already done (analyst,
architect) are not run again unless the reason says the design was wrong.

Every plan it returns keeps these invariants (tests/test_rules_planner.py checks them
with hypothesis): each agent at most once, in the order analyst, architect, developer,
reviewer; the developer always runs and the reviewer right after it, last.

Pure and deterministic: called from workflow code.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from phasegate.domain.orchestration.agents import (
    STEP_AGENTS,
    AnalysisResult,
    Issue,
    PlannerDecision,
    PlanStep,
    Scope,
    StepAgent,
)

__all__ = ["fixed_plan", "rules_plan"]

_WHY: dict[StepAgent, str] = {
    "analyst": "investigate what the issue is really about, how big it is and where it lives",
    "architect": "write the plan (tasks.md) the developer's gated session follows",
    "developer": "make the change through a gated session: evidence and tests decide each phase",
    "reviewer": "review the change against the issue; a rejection sends it back to the developer",
}


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_LABELS: dict[str, frozenset[str]] = {
    "trivial": _set(
        "typo typos spelling grammar docs doc documentation config configuration chore "
        "trivial wording copy readme"
    ),
    "bug": _set("bug bugs defect regression crash incident fix bugfix hotfix"),
    "feature": _set(
        "feature features enhancement enhancements improvement feature-request "
        "new-feature story user-story request"
    ),
    "complex": _set(
        "complex epic large xl xxl size-l size-xl breaking breaking-change architecture "
        "needs-design design rfc migration"
    ),
    "unclear": _set(
        "needs-investigation investigate investigation needs-triage triage question "
        "unconfirmed needs-repro needs-reproduction cannot-reproduce flaky"
    ),
}


def _words(*patterns: str) -> re.Pattern[str]:
    """Whole words or phrases, matched in lower-cased text (faster than IGNORECASE)."""
    return re.compile(r"\b(?:" + "|".join(patterns) + r")\b")


_TEXTUAL = _words(  # in a title, these beat bug words: "Typo in an error message"
    r"typos?",
    r"misspell\w*",
    r"spelling",
    r"grammar",
    r"wording",
    r"(?:broken|dead) links?",
    r"readme",
    r"docs?",
    r"documentation",
    r"docstrings?",
)
_CONFIGISH = _words(  # small changes, unless the title also names a failure
    r"(?:code )?comments?",
    r"bump\w*",
    r"config(?:uration)?",
    r"(?:default|env(?:ironment)?) (?:value|setting|variable|option|timeout|port)s?",
    r"rename",
    r"indent\w*",
    r"whitespace",
    r"formatting",
)
_BUG = _words(
    r"bugs?",
    r"crash\w*",
    r"errors?",
    r"exceptions?",
    r"traceback",
    r"stack ?trace",
    r"fail(?:s|ed|ing|ure|ures)?",
    r"broken",
    r"breaks",
    r"regression",
    r"wrong(?:ly)?",
    r"incorrect(?:ly)?",
    r"does(?:n't| not) work",
    r"no longer",
    r"unexpected(?:ly)?",
    r"hang(?:s|ing)?",
    r"freez\w*",
    r"leak(?:s|ing)?",
    r"5\d\d",
)
_UNCLEAR = _words(
    r"sometimes",
    r"intermittent(?:ly)?",
    r"randomly",
    r"flak(?:y|iness)",
    r"occasional(?:ly)?",
    r"unclear",
    r"unknown",
    r"not sure",
    r"no idea",
    r"can(?:'t|not) reproduce",
    r"(?:hard|unable) to reproduce",
    r"investigat\w*",
    r"root cause",
    r"mysterious(?:ly)?",
    r"somehow",
    r"weird",
    r"strange(?:ly)?",
    r"under load",
)
_FEATURE_TITLE = re.compile(
    r"^\W*(?:feat(?:ure)?\W+)?(?:add|adds|adding|implement|support|introduce|create|allow|"
    r"enable|provide|expose|build|let|offer|new)\b"
)
_FEATURE = _words(
    r"feature(?: request)?",
    r"as an? (?:user|developer|admin\w*|customer|operator|maintainer)",
    r"should be able to",
    r"would like",
    r"it would be (?:nice|great|useful)",
    r"new (?:endpoint|command|option|flag|page|api|field|setting)",
)
_COMPLEX = _words(  # one is enough
    r"epic",
    r"architecture",
    r"re-?architect\w*",
    r"redesign\w*",
    r"rewrite",
    r"migrat(?:e|ion|ions)",
    r"multi-?tenan\w*",
    r"distributed",
    r"across (?:all |every |multiple |several |the )?(?:services|modules|packages|components|"
    r"repos|repositories|systems)",
    r"breaking changes?",
)
_COMPLEX_WEAK = _words(  # two of these (or one in a long issue)
    r"authentication",
    r"authori[sz]ation",
    r"single sign-on|sso|oauth",
    r"role-based|rbac|permissions? (?:model|system)",
    r"shard\w*",
    r"real-?time (?:sync|collaboration)",
    r"plugin (?:system|architecture)",
    r"offline(?:-first)? sync",
    r"encrypt\w*",
    r"concurren\w*",
)
_LOCATED = re.compile(  # a source file (path.py, path.py:12), a line number, a traceback
    r"(?<=\w)\.(?:py|pyi|js|jsx|ts|tsx|go|rs|java|kt|rb|php|c|cc|cpp|h|hpp|cs|swift|scala|sql|"
    r"ya?ml|toml|json|sh)\b|\bline \d+\b|traceback \(most recent call last\)"
)
_REASON_DESIGN = _words(  # the design itself was wrong: the architect runs (again)
    r"design",
    r"architect\w*",
    r"plan(?:s|ned)? (?:is|was) (?:wrong|missing|incomplete|unclear)",
    r"approach",
)
_REASON_COMPLEX = re.compile(r"(?<!not )(?<!less )\bcomplex\b")
_REASON_INVESTIGATE = _words(
    r"unclear",
    r"investigat\w*",
    r"root cause",
    r"unknown",
    r"not understood",
    r"misunderst\w*",
)
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+", re.MULTILINE)
_LONG_BODY = 4000  # characters: a body this long describes more than one change
_SCANNED = 8000  # characters of the body searched for words: the signal is at the top
_MANY_ITEMS = 8  # requirement bullets


@dataclass(frozen=True)
class _Signals:
    labels: frozenset[str]  # kinds named by a label
    trivial: bool
    bug: int  # weight: label 3, title 2, body 1
    feature: int  # weight: label 3, title starting with "Add"/"Support"... 3, title 2, body 1
    complex_: list[str]  # what made it look complex
    unclear: list[str]
    located: bool
    big: bool


def _label_kinds(labels: Iterable[str]) -> frozenset[str]:
    kinds: set[str] = set()
    for label in labels:
        norm = re.sub(r"[\s_]+", "-", label.strip().lower())
        names = {norm, norm.rsplit(":", 1)[-1].strip("- "), norm.rsplit("/", 1)[-1].strip("- ")}
        names |= {re.sub(r"^(?:type|kind|size|scope|area)-", "", n) for n in names}
        kinds.update(kind for kind, words in _LABELS.items() if names & words)
    return frozenset(kinds)


def _found(pattern: re.Pattern[str], text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0).lower() for m in pattern.finditer(text)))


def _signals(issue: Issue) -> _Signals:
    labels = _label_kinds(issue.labels)
    title, body = issue.title.lower(), issue.body[:_SCANNED].lower()
    text = f"{title}\n{body}"
    bug = 3 * ("bug" in labels) + 2 * bool(_BUG.search(title)) + bool(_BUG.search(body))
    feature = max(
        3 * ("feature" in labels),
        3 * bool(_FEATURE_TITLE.search(title)),
        2 * bool(_FEATURE.search(title)),
        bool(_FEATURE.search(body)),
    )
    big = len(issue.body) > _LONG_BODY or len(_LIST_ITEM.findall(body)) >= _MANY_ITEMS
    complex_ = ["label " + label for label in issue.labels if _label_kinds([label]) & {"complex"}]
    complex_ += _found(_COMPLEX, text)
    weak = _found(_COMPLEX_WEAK, text)
    if len(weak) >= 2 or (weak and big):
        complex_ += weak
    unclear = ["label " + label for label in issue.labels if _label_kinds([label]) & {"unclear"}]
    unclear += _found(_UNCLEAR, text)
    if title.rstrip().endswith("?"):
        unclear.append("the title is a question")
    textual = bool(_TEXTUAL.search(title))
    configish = bool(_CONFIGISH.search(title)) and not _BUG.search(title)
    return _Signals(
        labels=labels,
        trivial=("trivial" in labels and "bug" not in labels) or textual or configish,
        bug=bug,
        feature=feature,
        complex_=complex_,
        unclear=unclear,
        located=bool(_LOCATED.search(text)),
        big=big,
    )


def _route(issue: Issue) -> tuple[list[StepAgent], Scope, str]:
    """The first plan for ``issue``: steps, scope and why, from its signals."""
    s = _signals(issue)
    if "complex" in s.labels or (s.complex_ and s.feature >= s.bug and not s.trivial):
        return (
            ["analyst", "architect", "developer", "reviewer"],
            "complex",
            f"a complex change ({', '.join(s.complex_)})",
        )
    if s.trivial and not s.unclear:
        labels = [label for label in issue.labels if _label_kinds([label]) & {"trivial"}]
        named = f"label {', '.join(labels)}" if labels else f"title {issue.title.strip()[:80]!r}"
        return ["developer", "reviewer"], "trivial", f"a small textual or config change ({named})"
    if s.bug > s.feature or (s.bug and s.bug == s.feature and "feature" not in s.labels):
        if s.located and not s.unclear:
            return ["developer", "reviewer"], "simple", "a bug whose place the issue names"
        why = ", ".join(s.unclear) if s.unclear else "the issue does not say where it happens"
        return ["analyst", "developer", "reviewer"], "moderate", f"an unclear bug ({why})"
    if s.feature:
        if s.unclear:
            why = f"a feature with open questions ({', '.join(s.unclear)})"
            return ["analyst", "architect", "developer", "reviewer"], "moderate", why
        scope: Scope = "moderate" if s.big else "simple"
        return ["architect", "developer", "reviewer"], scope, "a clear feature"
    if s.big:
        why = "a long issue of no recognised kind"
        return ["analyst", "architect", "developer", "reviewer"], "moderate", why
    return ["analyst", "developer", "reviewer"], "moderate", "no kind recognised: look first"


def _after_analysis(analysis: AnalysisResult) -> tuple[list[StepAgent], str]:
    if analysis.scope == "complex":
        return ["architect", "developer", "reviewer"], "the analysis found the scope complex"
    if analysis.recommended_agents:
        named = ", ".join(analysis.recommended_agents)
        return list(analysis.recommended_agents), f"the analysis recommends {named}"
    if analysis.scope == "moderate":
        return ["architect", "developer", "reviewer"], "the analysis found the scope moderate"
    return ["developer", "reviewer"], f"the analysis found the scope {analysis.scope}"


def _ordered(agents: Iterable[str]) -> list[StepAgent]:
    """Known step agents, each once, in pipeline order, ending developer, reviewer."""
    wanted = set(agents) | {"developer", "reviewer"}
    return [a for a in STEP_AGENTS if a in wanted]


def rules_plan(
    issue: Issue,
    *,
    analysis: AnalysisResult | None = None,
    replan_reason: str | None = None,
    done: Sequence[StepAgent] = (),
) -> PlannerDecision:
    """The rules planner's decision for ``issue`` (first plan or replan).

    Args:
        issue: The issue; its labels weigh most, then its title, then its body.
        analysis: The latest analyst output, on a replan after an analysis: its
            scope (and recommended agents) decide the remaining steps.
        replan_reason: Why a new plan is wanted (an agent's ``replan_request``, a
            person's ``request_replan`` or a failed step). A reason that calls the
            design wrong or the problem unclear adds the architect or the analyst.
        done: Agents whose steps already completed. The analyst and architect are
            not run again (their outputs carry over), except the architect when the
            reason says the design or approach was wrong. The developer and reviewer
            always run: a replan means the change is still to be made.

    Returns:
        A decision with a non-empty reason per step and a scope.
    """
    steps, scope, why = _route(issue)
    notes = [f"Issue {issue.id}: {why}."]
    if analysis is not None:
        steps, because = _after_analysis(analysis)
        scope = analysis.scope
        notes.append(f"Replan: {because}.")
    finished = set(done)
    if replan_reason:
        notes.append(f"Replan requested: {replan_reason.strip()[:400].rstrip('.')}.")
        reason = replan_reason.lower()
        if _REASON_DESIGN.search(reason):  # the plan itself was wrong: design again
            steps = [*steps, "architect"]
            finished.discard("architect")
        if _REASON_COMPLEX.search(reason):
            steps, scope = [*steps, "architect"], "complex"
        if _REASON_INVESTIGATE.search(reason):
            steps = [*steps, "analyst"]
    skipped = [a for a in ("analyst", "architect") if a in finished and a in steps]
    if skipped:
        notes.append(f"Already done, outputs kept: {', '.join(skipped)}.")
    ordered = [a for a in _ordered(steps) if a not in skipped]
    return PlannerDecision(
        reasoning=" ".join(notes) + f" Plan: {' -> '.join(ordered)} (rules planner).",
        steps=[PlanStep(agent=a, reason=_WHY[a]) for a in ordered],
        scope=scope,
    )


def fixed_plan() -> PlannerDecision:
    """The classic pipeline of ``orchestration_mode: fixed``: architect, developer, reviewer."""
    return PlannerDecision(
        reasoning="Fixed mode: the classic pipeline architect -> developer -> reviewer.",
        steps=[PlanStep(agent=a, reason=_WHY[a]) for a in ("architect", "developer", "reviewer")],
        scope=None,
    )
