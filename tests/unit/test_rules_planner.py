"""The rules planner (``domain/orchestration/planner.py``): the seed's routing examples, replans
after an analysis, and the invariants every plan keeps (hypothesis). No server needed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasegate.domain.orchestration.agents import (
    MAX_PLAN_STEPS,
    STEP_AGENTS,
    AnalysisResult,
    Issue,
    PlannerDecision,
    StepAgent,
)
from phasegate.domain.orchestration.planner import fixed_plan, rules_plan

TYPO = Issue(
    id="101",
    title="Fix typo in README installation section",
    body="The install command says `pip instal phasegate`; it should be `pip install`.",
    labels=["typo"],
)
UNCLEAR_BUG = Issue(
    id="102",
    title="Uploads sometimes fail with a 500 error",
    body="Users report that large uploads occasionally fail with HTTP 500. We could not "
    "reproduce it locally and the logs show nothing useful.",
    labels=["bug"],
)
CLEAR_FEATURE = Issue(
    id="103",
    title="Add a --json flag to the list command",
    body="`phasegate list` prints a table. Scripts need JSON: with `--json`, print one "
    "JSON array of sessions with id, workflow type and status.",
    labels=["enhancement"],
)
COMPLEX_FEATURE = Issue(
    id="104",
    title="Multi-tenant workspaces with role-based permissions",
    body="Each organisation gets its own workspace, users get roles per workspace, and "
    "existing data must be migrated into a default workspace.",
    labels=["feature", "epic"],
)


def agents(decision: PlannerDecision) -> list[str]:
    return [s.agent for s in decision.steps]


def analysis(scope: str = "complex", **fields: object) -> AnalysisResult:
    return AnalysisResult.model_validate(
        {"findings": ["the cause spans the upload pipeline"], "scope": scope, "confidence": 0.8}
        | fields
    )


# ----------------------------------------------------------------- seed routing examples


@pytest.mark.parametrize(
    ("issue", "steps", "scope"),
    [
        (TYPO, ["developer", "reviewer"], "trivial"),
        (UNCLEAR_BUG, ["analyst", "developer", "reviewer"], "moderate"),
        (CLEAR_FEATURE, ["architect", "developer", "reviewer"], "simple"),
        (COMPLEX_FEATURE, ["analyst", "architect", "developer", "reviewer"], "complex"),
    ],
    ids=["trivial-typo-fix", "unclear-bug", "clear-feature", "complex-feature"],
)
def test_seed_routing_examples(issue: Issue, steps: list[str], scope: str) -> None:
    decision = rules_plan(issue)
    assert agents(decision) == steps
    assert decision.scope == scope
    assert decision.reasoning.startswith(f"Issue {issue.id}: ")
    assert all(step.reason for step in decision.steps)


def test_the_same_routes_without_labels_from_the_wording() -> None:
    def unlabelled(issue: Issue) -> Issue:
        return issue.model_copy(update={"labels": []})

    assert agents(rules_plan(unlabelled(TYPO))) == ["developer", "reviewer"]
    assert agents(rules_plan(unlabelled(UNCLEAR_BUG)))[0] == "analyst"
    assert agents(rules_plan(unlabelled(CLEAR_FEATURE)))[0] == "architect"
    # "multi-tenant" and "migrated" say complex without the epic label
    assert agents(rules_plan(unlabelled(COMPLEX_FEATURE))) == list(STEP_AGENTS)


@pytest.mark.parametrize(
    ("title", "body", "labels", "steps"),
    [
        ("Typo in the error message of phasegate submit", "", [], ["developer", "reviewer"]),
        ("Change the default timeout in config to 30 s", "", [], ["developer", "reviewer"]),
        ("Update the docs", "", ["type: docs"], ["developer", "reviewer"]),
        (
            "Crash in parse_tasks_md on an empty heading",
            'Traceback (most recent call last):\n  File "activities/tasks_parser.py", line 88',
            ["kind/bug"],
            ["developer", "reviewer"],  # a bug the issue locates: no investigation needed
        ),
        ("Config reload crashes the worker", "", [], ["analyst", "developer", "reviewer"]),
        ("Add retry when an upload fails", "", [], ["architect", "developer", "reviewer"]),
        (
            "Add OAuth login",
            "Support single sign-on via OAuth.",
            [],
            ["analyst", "architect", "developer", "reviewer"],
        ),
        ("Something about the dashboard", "", [], ["analyst", "developer", "reviewer"]),
        ("Improve the export", "", ["Feature", "needs-investigation"], list(STEP_AGENTS)),
    ],
)
def test_signals_from_labels_title_and_body(
    title: str, body: str, labels: list[str], steps: list[str]
) -> None:
    assert agents(rules_plan(Issue(id="7", title=title, body=body, labels=labels))) == steps


def test_the_reasoning_names_what_decided() -> None:
    assert "label typo" in rules_plan(TYPO).reasoning
    assert "sometimes" in rules_plan(UNCLEAR_BUG).reasoning
    complex_reasoning = rules_plan(COMPLEX_FEATURE).reasoning
    assert "label epic" in complex_reasoning and "multi-tenant" in complex_reasoning


# ------------------------------------------------------------------------------ replans


def test_replan_after_an_analysis_saying_complex_adds_the_architect() -> None:
    first = rules_plan(UNCLEAR_BUG)
    assert "architect" not in agents(first)
    found = analysis("complex", replan_request="the scope is complex and no architect is planned")
    decision = rules_plan(
        UNCLEAR_BUG, analysis=found, replan_reason=found.replan_request, done=["analyst"]
    )
    assert agents(decision) == ["architect", "developer", "reviewer"]
    assert decision.scope == "complex"
    assert "Replan" in decision.reasoning and "no architect is planned" in decision.reasoning


def test_replan_keeps_work_already_done() -> None:
    # the architect already planned: a complex analysis does not plan again
    done: list[StepAgent] = ["analyst", "architect"]
    assert agents(rules_plan(COMPLEX_FEATURE, analysis=analysis(), done=done)) == [
        "developer",
        "reviewer",
    ]
    decision = rules_plan(COMPLEX_FEATURE, replan_reason="the step failed", done=done)
    assert agents(decision) == ["developer", "reviewer"]
    assert "Already done, outputs kept: analyst, architect." in decision.reasoning


def test_replan_reason_can_ask_for_a_new_design_or_an_investigation() -> None:
    done: list[StepAgent] = ["architect", "developer", "reviewer"]
    redesign = rules_plan(CLEAR_FEATURE, replan_reason="the design does not fit", done=done)
    assert agents(redesign) == ["architect", "developer", "reviewer"]
    investigate = rules_plan(CLEAR_FEATURE, replan_reason="the root cause is unknown")
    assert agents(investigate) == list(STEP_AGENTS)


def test_analysis_recommendations_and_small_scopes() -> None:
    simple = rules_plan(UNCLEAR_BUG, analysis=analysis("simple"), done=["analyst"])
    assert agents(simple) == ["developer", "reviewer"] and simple.scope == "simple"
    moderate = rules_plan(UNCLEAR_BUG, analysis=analysis("moderate"), done=["analyst"])
    assert agents(moderate) == ["architect", "developer", "reviewer"]
    named = analysis("trivial", recommended_agents=["reviewer", "developer"])
    assert agents(rules_plan(UNCLEAR_BUG, analysis=named, done=["analyst"])) == [
        "developer",
        "reviewer",
    ]


def test_fixed_plan_is_the_classic_pipeline() -> None:
    decision = fixed_plan()
    assert agents(decision) == ["architect", "developer", "reviewer"]
    assert decision.scope is None and "Fixed mode" in decision.reasoning
    assert fixed_plan() == decision


# --------------------------------------------------------------------------- invariants

SIGNAL_WORDS = [
    "typo", "docs", "README", "config", "bug", "crash", "error", "fails", "sometimes",
    "randomly", "add", "implement", "support", "feature", "epic", "redesign", "migrate",
    "oauth", "sso", "encryption", "why?", "tasks_parser.py:12", "broken", "investigate",
    "across services", "as a user", "the", "and", "page", "export", "flaky", "root cause",
]  # fmt: skip
KNOWN_LABELS = [
    "bug", "typo", "docs", "config", "feature", "enhancement", "complex", "epic",
    "type: bug", "kind/feature", "needs-investigation", "question", "Size/XL", "good first issue",
]  # fmt: skip
REASONS = [
    "the scope is complex",
    "the design is wrong",
    "the root cause is unknown",
    "the step failed: timeout",
    "the approach does not fit",
    "not complex after all",
    "",
]


def phrases(max_size: int) -> st.SearchStrategy[str]:
    words = st.one_of(st.sampled_from(SIGNAL_WORDS), st.text(max_size=12))
    return st.lists(words, max_size=max_size).map(" ".join)


printable = st.text(st.characters(exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp")), max_size=10)
issues = st.builds(
    Issue,
    id=st.from_regex(r"[A-Z]{1,4}-[0-9]{1,5}", fullmatch=True),
    title=phrases(8).map(lambda t: t.strip()[:300] or "untitled"),
    body=phrases(40),
    labels=st.lists(st.one_of(st.sampled_from(KNOWN_LABELS), printable), max_size=5),
)
analyses = st.builds(
    AnalysisResult,
    findings=st.lists(st.text(max_size=30), max_size=3),
    scope=st.sampled_from(["trivial", "simple", "moderate", "complex"]),
    recommended_agents=st.lists(st.sampled_from(STEP_AGENTS), max_size=6),
    confidence=st.floats(0, 1),
)
done_lists = st.lists(st.sampled_from(STEP_AGENTS), unique=True)


@settings(max_examples=300, deadline=None)
@given(
    issue=issues,
    found=st.none() | analyses,
    reason=st.none() | st.sampled_from(REASONS) | st.text(max_size=60),
    done=done_lists,
)
def test_every_plan_keeps_the_invariants(
    issue: Issue, found: AnalysisResult | None, reason: str | None, done: list[StepAgent]
) -> None:
    decision = rules_plan(issue, analysis=found, replan_reason=reason, done=done)
    steps = agents(decision)
    assert 1 <= len(steps) <= MAX_PLAN_STEPS
    assert len(set(steps)) == len(steps), "each agent at most once"
    assert steps == [a for a in STEP_AGENTS if a in steps], "pipeline order"
    assert steps[-2:] == ["developer", "reviewer"], "the reviewer runs right after the developer"
    assert all(s.reason for s in decision.steps)
    assert decision.scope is not None
    if "analyst" in done:
        assert "analyst" not in steps, "an analysis is never repeated"
    if "architect" in done and not reason:
        assert "architect" not in steps, "a plan is only redone when a reason asks"
    if found is not None and found.scope == "complex" and "architect" not in done:
        assert "architect" in steps, "a complex analysis always gets a design"
    if found is not None and not reason:
        assert decision.scope == found.scope
    # pure: the same input gives the same decision (it runs in replayed workflow code)
    assert rules_plan(issue, analysis=found, replan_reason=reason, done=done) == decision
    PlannerDecision.model_validate(decision.model_dump())
