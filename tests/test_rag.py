"""RAG retrieval: heading chunker, FTS5 index, visibility rule, packing. No server needed."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from temporalio.testing import ActivityEnvironment

from phasegate.activities.rag import (
    MAX_CHUNK_TOKENS,
    FtsIndex,
    RagActivities,
    chunk_markdown,
    fts_match_query,
    split_front_matter,
)
from phasegate.domain.rag import (
    RetrievalQuery,
    RetrievedChunk,
    context_sections,
    estimate_tokens,
    normalize_tags,
    pack,
    query_terms,
    visible,
)

REPO = Path(__file__).resolve().parent.parent
LIBRARY = str(REPO / "library")
RAG = REPO / "tests" / "fixtures" / "rag"
STANDARDS = str(RAG / "standards")


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FtsIndex]:
    """Shipped library + the fixture standards, indexed once for the module."""
    idx = FtsIndex(str(tmp_path_factory.mktemp("rag") / "index.db"))
    idx.index_paths([LIBRARY], [STANDARDS])
    yield idx
    idx.close()


def _source_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")


# ----------------------------------------------------------------------------- chunking


def test_chunks_follow_headings_with_paths_and_lines() -> None:
    path = RAG / "chunking-sample.md"
    chunks = chunk_markdown(path.read_text(encoding="utf-8"), file="sample.md")
    got = [(c.line, c.heading_path) for c in chunks]
    assert got == [
        (4, []),
        (6, ["Guide"]),
        (10, ["Guide", "Install"]),
        (22, ["Guide", "Install", "Linux"]),
        (26, ["Guide", "Setext Section"]),
        # "## Empty Parent" has no body: dropped, but it stays in its child's path
        (35, ["Guide", "Empty Parent", "Child"]),
    ]
    assert all(c.file == "sample.md" for c in chunks)
    assert chunks[2].heading == "Install" and chunks[0].heading == ""
    assert all(c.tokens == estimate_tokens(c.text) for c in chunks)


def test_fenced_code_stays_in_its_chunk() -> None:
    chunks = chunk_markdown((RAG / "chunking-sample.md").read_text(), file="s.md")
    install = next(c for c in chunks if c.heading == "Install")
    assert "# not a heading: a shell comment" in install.text
    assert "## still code" in install.text
    assert install.text.count("```") == 2 and "After the code." in install.text
    setext = next(c for c in chunks if c.heading == "Setext Section")
    assert "> # A quoted heading is content" in setext.text
    assert not any(
        "not a heading" in h or "still code" in h for c in chunks for h in c.heading_path
    )


def test_chunk_lines_point_at_the_source_everywhere() -> None:
    files = [*Path(LIBRARY).rglob("*.md"), *Path(STANDARDS).rglob("*.md")]
    files.append(RAG / "chunking-sample.md")
    for path in files:
        lines = _source_lines(path)
        for c in chunk_markdown(path.read_text(encoding="utf-8"), file=str(path)):
            assert lines[c.line - 1].rstrip() == c.text.split("\n")[0].rstrip(), (path, c.line)


def test_chunker_edge_cases() -> None:
    assert chunk_markdown("", file="e.md") == []
    assert chunk_markdown("\n\n   \n", file="e.md") == []
    only = chunk_markdown("just a paragraph\nover two lines\n", file="p.md")
    assert [(c.line, c.heading_path, c.text) for c in only] == [
        (1, [], "just a paragraph\nover two lines")
    ]
    crlf = chunk_markdown("# A\r\n\r\ntext a\r\n## B\r\ntext b\r\n", file="c.md")
    assert [(c.line, c.heading_path) for c in crlf] == [(1, ["A"]), (4, ["A", "B"])]
    assert "\r" not in crlf[0].text
    # an H2 after an H3 pops back; a second H1 starts a new path
    flat = chunk_markdown("# A\nx\n### C\ny\n## B\nz\n# D\nw\n", file="f.md")
    assert [c.heading_path for c in flat] == [["A"], ["A", "C"], ["A", "B"], ["D"]]
    # inline markup in headings is not kept in the path
    assert chunk_markdown("# **Bold** `code`\nx\n", file="h.md")[0].heading_path == ["Bold code"]


def test_long_section_is_split_at_block_boundaries_never_inside_code() -> None:
    para = "Lorem ipsum dolor sit amet consectetur " * 10  # ~400 chars
    code = "```python\n" + "\n".join(f"# line {i} of code" for i in range(150)) + "\n```"
    text = "# Big\n\n" + "\n\n".join([para] * 12 + [code] + [para] * 12) + "\n"
    chunks = chunk_markdown(text, file="big.md")
    assert len(chunks) > 3
    assert all(c.heading_path == ["Big"] for c in chunks)
    lines = text.split("\n")
    for c in chunks:
        assert c.text.count("```") in (0, 2)  # the fence is whole in one chunk
        assert lines[c.line - 1] == c.text.split("\n")[0]
        if "```" not in c.text:
            assert c.tokens <= MAX_CHUNK_TOKENS
    assert "".join(c.text for c in chunks).count("# line 149 of code") == 1


_FRAGMENTS = [
    "# Title",
    "## Section",
    "### Sub",
    "#### Deep",
    "",
    "Some paragraph text.",
    "- a list item",
    "1. numbered",
    "```\n# code comment\n## more code\n```",
    "    # indented code",
    "> # quoted",
    "Text with a # hash inside",
    "<!-- # html comment -->",
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=30))
def test_chunks_lose_no_content(parts: list[str]) -> None:
    text = "\n".join(parts)
    src = text.split("\n")
    covered: set[int] = set()
    for c in chunk_markdown(text, file="f.md"):
        for j, line in enumerate(c.text.split("\n")):
            assert src[c.line - 1 + j].rstrip() == line.rstrip()
            covered.add(c.line - 1 + j)
        assert c.text.count("```") % 2 == 0
    for n, line in enumerate(src):  # only headings of empty sections may be left out
        assert n in covered or not line.strip() or line.startswith("#"), (n, line, text)


def test_front_matter_is_stripped_and_counted() -> None:
    data, body, offset = split_front_matter("---\ntags: [a, b]\n---\n# T\nx\n")
    assert data == {"tags": ["a", "b"]} and body == "# T\nx\n" and offset == 3
    assert split_front_matter("# no front matter\n")[0] == {}
    assert split_front_matter("---\n: : bad yaml [\n---\nx\n")[0] == {}
    assert normalize_tags("frontend, ux  ops") == ["frontend", "ux", "ops"]
    assert normalize_tags(["a", 1, " ", "a"]) == ["a", "1"]
    assert normalize_tags(None) == [] and normalize_tags({"x": 1}) == []


# ----------------------------------------------------------------------------- metadata


def test_library_metadata_and_front_matter_tags(index: FtsIndex) -> None:
    hits = index.search(RetrievalQuery(text="blameless postmortem", k=1))
    assert hits[0].file.endswith("incident-response.md")
    assert hits[0].workflow_type is None and hits[0].phase is None
    assert hits[0].tags == ["ops", "oncall", "standards"]
    only = index.search(RetrievalQuery(text="keyboard tests coverage", tags=["ux"], k=10))
    assert only and all(h.file.endswith("accessibility.md") for h in only)
    task = index.search(RetrievalQuery(text="choose mock boundaries", tags=["task"], k=3))
    assert task[0].workflow_type == "test_generation_v3" and task[0].phase == 1
    assert task[0].tags == ["task"] and task[0].file.endswith("task-2-choose-mock-boundaries.md")
    core = index.search(RetrievalQuery(text="mocking guide real fake", tags=["core"], k=3))
    assert core and all(h.phase is None and "core" in h.tags for h in core)
    phase = index.search(RetrievalQuery(text="target code analysis", tags=["phase"], k=3))
    assert phase and all(h.file.endswith("phase.md") for h in phase)


def test_dynamic_templates_are_not_indexed(index: FtsIndex) -> None:
    files = {row[0] for row in index._db.execute("SELECT path FROM files")}
    assert files and not any("/dynamic/" in f for f in files)
    assert any(f.endswith("spec_execution_v1/core/task-parser.md") for f in files)
    assert not any(f.endswith(("metadata.json", ".yaml")) for f in files)


# ----------------------------------------------------------------------------- relevance

RELEVANCE = [
    ("how do I rename a column without downtime", "database-migrations.md", "Renaming a column"),
    ("exponential backoff with jitter for retries", "error-handling.md", "Retries"),
    ("cursor based pagination for list endpoints", "api-design.md", "Pagination"),
    ("commit message format", "git-workflow.md", "Commit messages"),
    (
        "redact personal data such as email addresses from logs",
        "logging.md",
        "Redacting personal data",
    ),
    ("where do API keys and secrets live", "security.md", "Secrets"),
    ("quarantine a flaky test", "testing.md", "Flaky tests"),
    ("N+1 query problem on slow pages", "performance.md", "N+1 queries"),
    ("keyboard navigation and focus order", "accessibility.md", "Keyboard navigation"),
    ("blameless postmortem after an incident", "incident-response.md", "Postmortems"),
    ("when to remove a feature flag", "configuration.md", "Feature flags"),
    ("OpenTelemetry spans and trace context", "observability.md", "Tracing"),
    ("backfilling a large table in batches", "database-migrations.md", "Large table backfills"),
    ("which licences need legal approval", "dependency-management.md", "Licences"),
]


@pytest.mark.parametrize(("query", "file", "heading"), RELEVANCE)
def test_right_chunk_ranks_first(index: FtsIndex, query: str, file: str, heading: str) -> None:
    hits = index.search(RetrievalQuery(text=query, k=3))
    assert hits, query
    assert (Path(hits[0].file).name, hits[0].heading) == (file, heading)
    assert hits[0].score > 0 and [h.score for h in hits] == sorted(
        (h.score for h in hits), reverse=True
    )


def test_porter_stemming(index: FtsIndex) -> None:
    hits = index.search(RetrievalQuery(text="migrating schemas", k=3))
    assert any(Path(h.file).name == "database-migrations.md" for h in hits)


# ----------------------------------------------------------------------------- visibility


def _phase_files(workflow: str) -> dict[int, list[Path]]:
    root = Path(LIBRARY) / workflow / "phases"
    return {int(d.name): sorted(d.glob("*.md")) for d in root.iterdir() if d.name.isdigit()}


def _queries_for(workflow: str) -> list[str]:
    """Queries from every phase's own words: headings, first lines, and unique words."""
    queries = ["tests coverage mocks", "write code", "review report", "phase evidence gate"]
    vocab: dict[int, set[str]] = {}
    for phase, files in _phase_files(workflow).items():
        vocab[phase] = set()
        for path in files:
            text = path.read_text(encoding="utf-8")
            vocab[phase] |= set(query_terms(text))
            for c in chunk_markdown(text, file=str(path)):
                queries.append(" ".join(c.heading_path))
                queries.append(" ".join(c.text.split()[:12]))
    for phase, words in vocab.items():  # words found only in this phase (or later ones)
        earlier = set().union(*(vocab[p] for p in vocab if p < phase))
        unique = sorted(words - earlier)
        queries += [" ".join(unique[i : i + 4]) for i in range(0, min(len(unique), 40), 4)]
    return queries


@pytest.mark.parametrize("workflow", ["test_generation_v3", "production_code_v2"])
def test_no_future_phase_chunk_is_ever_returned(index: FtsIndex, workflow: str) -> None:
    phases = sorted(_phase_files(workflow))
    assert phases == [0, 1, 2, 3, 4, 5]
    queries = _queries_for(workflow)
    assert len(queries) > 100
    leaked_without_rule: set[int] = set()
    for p in phases:
        for text in queries:  # k and budget large: everything the filter lets through
            q = RetrievalQuery(
                text=text, workflow_type=workflow, max_phase=p, k=20, token_budget=10**6
            )
            for hit in index.search(q):
                if hit.workflow_type == workflow:
                    assert hit.phase is None or hit.phase <= p, (p, text, hit.file)
    # the test has teeth: without the rule, these queries do reach every later phase
    for text in queries:
        for h in index.search(RetrievalQuery(text=text, k=50, token_budget=10**6)):
            if h.workflow_type == workflow and h.phase is not None:
                leaked_without_rule.add(h.phase)
    assert leaked_without_rule == set(phases)


def test_other_workflows_and_standards_stay_visible(index: FtsIndex) -> None:
    q = RetrievalQuery(
        text="write unit tests integration tests coverage",
        k=50,
        token_budget=100_000,
        workflow_type="test_generation_v3",
        max_phase=0,
    )
    hits = index.search(q)
    assert any(h.workflow_type == "production_code_v2" and (h.phase or 0) > 0 for h in hits)
    assert any(h.workflow_type is None for h in hits)
    assert any(h.workflow_type == "test_generation_v3" and h.phase is None for h in hits)


def test_visible_rule() -> None:
    q = RetrievalQuery(text="x", workflow_type="w", max_phase=2)
    assert visible("w", 2, q) and visible("w", 0, q) and not visible("w", 3, q)
    assert visible("w", None, q) and visible(None, None, q) and visible("other", 9, q)
    assert visible("w", 9, RetrievalQuery(text="x", workflow_type="w"))  # no current phase
    closed = RetrievalQuery(text="x", max_phase=1)  # no workflow: fails closed
    assert (
        visible("any", 1, closed) and not visible("any", 2, closed) and visible(None, None, closed)
    )


def test_fail_closed_without_workflow_type(index: FtsIndex) -> None:
    for text in ("lint format type check changelog", "review assertions isolation speed"):
        hits = index.search(RetrievalQuery(text=text, max_phase=1, k=50, token_budget=10**6))
        assert all(h.phase is None or h.phase <= 1 for h in hits)


# ----------------------------------------------------------------------------- injection

NASTY = [
    '"',
    '""',
    "NEAR(",
    "NEAR(a b",
    "a OR",
    "OR",
    "AND NOT",
    "*",
    "a*",
    "^start",
    "col:val",
    "headings:secrets",
    "'); DROP TABLE chunks; --",
    '"); DELETE FROM files; --',
    "(((",
    "-",
    "{a b}",
    "a + b",
    "",
    "   ",
    "\x00",
    "日本語のテスト",
    "émigré naïve café",
    "🙂🔥",
    "x" * 5000,
    " ".join(["term"] * 500),
    'secrets" OR "',
    "NOT secrets",
    "_",
    "__init__",
]


@pytest.mark.parametrize("text", NASTY)
def test_query_text_cannot_inject(index: FtsIndex, text: str) -> None:
    hits = index.search(RetrievalQuery(text=text, k=5))
    assert isinstance(hits, list) and len(hits) <= 5
    match = fts_match_query(text)
    assert all(part.startswith('"') and part.endswith('"') for part in match.split(" OR ") if match)
    # the index is intact
    assert index.search(RetrievalQuery(text="secrets manager", k=1))[0].heading == "Secrets"


def test_injection_words_are_just_words(index: FtsIndex) -> None:
    assert fts_match_query('"') == "" and fts_match_query("") == ""
    assert fts_match_query("a OR b NEAR(c)") == '"b" OR "near" OR "c"'
    assert fts_match_query("DROP TABLE chunks") == '"drop" OR "table" OR "chunks"'
    assert query_terms("the of and") == ["the", "of", "and"]  # all stopwords: kept
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


# ----------------------------------------------------------------------------- incremental


def test_incremental_reindex(tmp_path: Path) -> None:
    docs = tmp_path / "standards"
    shutil.copytree(STANDARDS, docs)
    (docs / ".drafts").mkdir()
    (docs / ".drafts" / "hidden.md").write_text("# Hidden\n\nzebracorn\n")
    n = len([p for p in docs.rglob("*.md") if ".drafts" not in p.parts])
    db = str(tmp_path / "idx" / "rag.db")
    idx = FtsIndex(db)
    first = idx.index_paths([], [str(docs)])
    assert (first.indexed_files, first.skipped_files, first.removed_files) == (n, 0, 0)
    assert first.chunks > n and first.seconds >= 0
    assert idx.search(RetrievalQuery(text="zebracorn")) == []

    again = idx.index_paths([], [str(docs)])
    assert (again.indexed_files, again.skipped_files, again.chunks) == (0, n, 0)

    target = docs / "security.md"
    old_count = _chunk_count(idx, str(target))
    target.write_text(target.read_text() + "\n## Quokka policy\n\nEvery quokka is audited.\n")
    third = idx.index_paths([], [str(docs)])
    assert (third.indexed_files, third.skipped_files) == (1, n - 1)
    assert third.chunks == old_count + 1 == _chunk_count(idx, str(target))
    assert idx.search(RetrievalQuery(text="quokka"))[0].heading == "Quokka policy"

    # same content, new mtime: read and hashed, but not re-indexed
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    touched = idx.index_paths([], [str(docs)])
    assert (touched.indexed_files, touched.skipped_files) == (0, n)

    gone = docs / "backend" / "performance.md"
    gone.unlink()
    fourth = idx.index_paths([], [str(docs)])
    assert (fourth.indexed_files, fourth.removed_files, fourth.skipped_files) == (0, 1, n - 1)
    assert _chunk_count(idx, str(gone)) == 0
    assert not any(h.file == str(gone) for h in idx.search(RetrievalQuery(text="N+1 queries")))
    fts_rows = idx._db.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
    assert fts_rows == idx._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
    idx.close()

    reopened = FtsIndex(db)  # persisted: a new process skips everything
    assert reopened.index_paths([], [str(docs)]).skipped_files == n - 1
    assert reopened.search(RetrievalQuery(text="quokka"))[0].heading == "Quokka policy"
    reopened.close()


def test_role_change_reindexes_same_content(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    shutil.copytree(Path(LIBRARY) / "test_generation_v3", lib / "test_generation_v3")
    idx = FtsIndex(str(tmp_path / "rag.db"))
    idx.index_paths([str(lib)])
    # the same folder now also indexed as standards: library role wins (first seen)
    report = idx.index_paths([str(lib)], [str(lib / "test_generation_v3" / "core")])
    assert report.indexed_files == 0
    # library dropped, core kept as standards: metadata changes, so it is re-indexed
    report = idx.index_paths([], [str(lib / "test_generation_v3" / "core")])
    assert report.indexed_files == 2 and report.removed_files > 0
    hit = idx.search(RetrievalQuery(text="mocking guide", k=1))[0]
    assert hit.workflow_type is None and hit.tags == ["standards"]
    idx.close()


def _chunk_count(idx: FtsIndex, file: str) -> int:
    return idx._db.execute("SELECT count(*) FROM chunks WHERE file = ?", (file,)).fetchone()[0]


# ----------------------------------------------------------------------------- budget, pack


def test_token_budget_and_k_respected(index: FtsIndex) -> None:
    text = "tests coverage mocks fixtures review"
    for budget in (0, 50, 120, 300, 1200, 5000):
        for k in (0, 1, 3, 10):
            hits = index.search(RetrievalQuery(text=text, k=k, token_budget=budget))
            assert len(hits) <= k and sum(h.tokens for h in hits) <= budget
    big = index.search(RetrievalQuery(text=text, k=10, token_budget=5000))
    assert len(big) == 10


def _hit(score: float, tokens: int) -> RetrievedChunk:
    return RetrievedChunk(file=f"f{score}", text="t", tokens=tokens, score=score)


def test_pack_best_first_skips_what_does_not_fit() -> None:
    chunks = [_hit(1, 10), _hit(5, 80), _hit(3, 30), _hit(4, 50), _hit(2, 10)]
    assert [c.score for c in pack(chunks, 100, 5)] == [5, 2, 1]  # 4 and 3 no longer fit
    assert [c.score for c in pack(chunks, 1000, 2)] == [5, 4]
    assert pack(chunks, 100, 0) == [] and pack([], 100, 5) == []
    assert [c.score for c in pack(chunks, 9, 5)] == []


def test_models_and_context_sections() -> None:
    hit = RetrievedChunk(file="a.md", heading_path=["A", "B"], line=7, text="x", score=1.5)
    assert hit.heading == "B"
    assert RetrievedChunk(file="a.md", text="x").heading == ""
    [section] = context_sections([hit])
    assert (section.source, section.title, section.text) == ("a.md:7", "A > B", "x")
    assert json.loads(hit.model_dump_json())["heading"] == "B"
    assert (
        estimate_tokens("") == 0 and estimate_tokens("abcd") == 1 and estimate_tokens("abcde") == 2
    )


# ----------------------------------------------------------------------------- activity


def test_activity_builds_lazily_and_is_thread_safe(tmp_path: Path) -> None:
    db = tmp_path / "home" / "rag.db"
    acts = RagActivities(str(db), [LIBRARY], [STANDARDS])
    assert not db.exists()
    q = RetrievalQuery(text="rename a column without downtime", k=2)
    hits = ActivityEnvironment().run(acts.retrieve_context, q)
    assert db.exists() and hits[0].heading == "Renaming a column"

    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for text, _file, heading in RELEVANCE * 3:
                got = acts.retrieve_context(RetrievalQuery(text=text, k=1))
                assert got[0].heading == heading
            if i % 4 == 0:
                acts.reindex()
        except BaseException as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert acts.reindex().indexed_files == 0
    acts.close()
