"""RAG index and retrieval: full index, no-change re-index, search latency vs raw FTS5.

Generates a corpus of markdown files (default 1,000: 600 as a library workflow
with 10 phases, 400 as a standards directory; headings, paragraphs of Zipf-
distributed vocabulary, lists; ~2.5 chunks per file) in a temp dir, then:

* times a full ``FtsIndex.index_paths`` (target <= 10 s), a no-change re-index
  and a one-file-changed re-index;
* times ``FtsIndex.search`` over varied queries (with the session's workflow and
  phase, so the visibility filter is in play) interleaved with two baselines on
  the same connection and the same query terms: a raw
  ``SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 5`` and the same
  ranked by bm25. Target: search p50 <= 10 ms.

    .venv/bin/python bench/rag_bench.py [--files 1000] [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

import _common  # noqa: F401  (sys.path)
from _common import median, ms, pct

from phasegate.activities.rag import FtsIndex, fts_match_query
from phasegate.domain.rag import RetrievalQuery

WORKFLOW = "bench_rag_v1"
PHASES = 10
_COMMON_TEXT = (
    "service request response database table column index query cache token user session "
    "error retry timeout deploy release branch commit review test fixture mock coverage log "
    "metric trace span alert config secret key permission role schema migration backfill "
    "queue worker job schedule batch stream event handler endpoint client server api version "
    "page cursor limit offset filter sort field record payload header cookie auth login "
    "password hash encrypt certificate network latency throughput memory cpu disk file path "
    "module package dependency build lint format type check doc readme changelog incident"
)
_FILLER_TEXT = (
    "the a an and or of to in for with on by from when each every must should may never "
    "always only before after then also not is are be this that it its"
)
_SYLLABLES_TEXT = "ka lo mi nu re sa ti vo ze bri cla dro fen gli hap jun kor lum mes nor"
COMMON, FILLER, SYLLABLES = (t.split() for t in (_COMMON_TEXT, _FILLER_TEXT, _SYLLABLES_TEXT))


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    """Real software words first (frequent), then pseudo-words (the long tail)."""
    words = list(COMMON)
    seen = set(words)
    while len(words) < size:
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Corpus:
    """Zipf-weighted word sampling for documents and queries."""

    def __init__(self, seed: int = 7, vocab: int = 4000) -> None:
        self.rng = random.Random(seed)
        self.words = _vocabulary(self.rng, vocab)
        self.weights = [1 / (rank + 1) ** 0.9 for rank in range(len(self.words))]

    def terms(self, n: int) -> list[str]:
        return self.rng.choices(self.words, self.weights, k=n)

    def sentence(self) -> str:
        out = []
        for w in self.terms(self.rng.randint(8, 18)):
            out.append(w)
            if self.rng.random() < 0.35:
                out.append(self.rng.choice(FILLER))
        return " ".join(out).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 5)))

    def title(self) -> str:
        return " ".join(self.terms(self.rng.randint(2, 4))).title()

    def document(self) -> str:
        parts = [f"# {self.title()}", "", self.paragraph(), ""]
        for _ in range(self.rng.choice((1, 1, 2, 2, 3))):
            parts += [f"## {self.title()}", "", self.paragraph(), ""]
            if self.rng.random() < 0.5:
                parts += [f"- {self.sentence()}" for _ in range(self.rng.randint(2, 5))] + [""]
            if self.rng.random() < 0.3:
                parts += ["```", f"# {self.sentence()}", "```", ""]
        return "\n".join(parts)

    def query(self) -> str:
        kind = self.rng.random()
        if kind < 0.5:  # a few keywords
            return " ".join(self.terms(self.rng.randint(2, 5)))
        if kind < 0.8:  # an agent's question
            a, b = self.terms(2)
            return f"how should I handle {a} when the {b} fails"
        return " ".join(self.rng.sample(self.words[: len(COMMON)], 3))  # only common words


def write_corpus(root: Path, files: int, corpus: Corpus) -> tuple[Path, Path]:
    """60% of the files as a library workflow's phase tasks, 40% as standards."""
    lib, std = root / "library", root / "standards"
    wdir = lib / WORKFLOW
    in_library = files * 6 // 10
    per_phase = max(1, in_library // PHASES)
    meta = {
        "workflow_type": WORKFLOW,
        "name": "RAG bench",
        "phases": [{"phase_number": p, "phase_name": f"Phase {p}"} for p in range(PHASES)],
    }
    wdir.mkdir(parents=True)
    (wdir / "metadata.json").write_text(json.dumps(meta))
    for i in range(in_library):
        pdir = wdir / "phases" / str(min(i // per_phase, PHASES - 1))
        pdir.mkdir(parents=True, exist_ok=True)
        (pdir / f"task-{i}-doc.md").write_text(corpus.document())
    for i in range(files - in_library):
        sub = std / f"area-{i % 8}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"standard-{i}.md").write_text(corpus.document())
    return lib, std


def main(files: int, queries: int, warmup: int) -> dict[str, float]:
    tmp = Path(tempfile.mkdtemp(prefix="phasegate-rag-bench-"))
    try:
        corpus = Corpus()
        lib, std = write_corpus(tmp, files, corpus)
        index = FtsIndex(str(tmp / "rag.db"))
        full = index.index_paths([str(lib)], [str(std)])
        again = index.index_paths([str(lib)], [str(std)])
        changed = next(std.rglob("*.md"))
        changed.write_text(changed.read_text() + "\n## Extra\n\nOne more section.\n")
        one = index.index_paths([str(lib)], [str(std)])
        chunks = index._db.execute("SELECT count(*) FROM chunks").fetchone()[0]

        texts = [corpus.query() for _ in range(queries + warmup)]
        raw_sql = "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT 5"
        ranked_sql = (
            "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?"
            " ORDER BY bm25(chunks_fts, 2.0, 1.0) LIMIT 5"
        )
        db = index._db
        raw_t: list[float] = []
        ranked_t: list[float] = []
        search_t: list[float] = []
        hits = 0
        for i, text in enumerate(texts):
            q = RetrievalQuery(text=text, workflow_type=WORKFLOW, max_phase=i % PHASES, k=5)
            t0 = time.perf_counter()
            db.execute(raw_sql, (fts_match_query(text),)).fetchall()
            t1 = time.perf_counter()
            db.execute(ranked_sql, (fts_match_query(text),)).fetchall()
            t2 = time.perf_counter()
            found = index.search(q)
            t3 = time.perf_counter()
            if i >= warmup:
                raw_t.append(t1 - t0)
                ranked_t.append(t2 - t1)
                search_t.append(t3 - t2)
                hits += len(found)
        index.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    f = {
        "full_index_s": full.seconds,
        "noop_reindex_s": again.seconds,
        "one_file_reindex_s": one.seconds,
        "chunks": chunks,
        "search_p50": pct(search_t, 50),
        "search_p95": pct(search_t, 95),
        "raw_p50": pct(raw_t, 50),
        "raw_p95": pct(raw_t, 95),
        "ranked_p50": pct(ranked_t, 50),
        "ranked_p95": pct(ranked_t, 95),
    }
    f["ratio_raw_p50"] = f["search_p50"] / f["raw_p50"]
    f["ratio_ranked_p50"] = f["search_p50"] / f["ranked_p50"]
    print(
        f"RAG over {full.indexed_files} files, {chunks} chunks "
        f"({chunks / max(full.indexed_files, 1):.1f} per file)"
    )
    print(
        f"  full index          {full.seconds:6.2f} s   "
        f"(target <= 10 s: {'OK' if full.seconds <= 10 else 'OVER TARGET'})"
    )
    print(f"  no-change re-index  {ms(again.seconds)}   ({again.skipped_files} files skipped)")
    print(f"  one file changed    {ms(one.seconds)}   ({one.indexed_files} file re-indexed)")
    print(
        f"search over {len(search_t)} varied queries (after {warmup} warm-up), "
        f"{hits / len(search_t):.1f} chunks returned on average, visibility filter on"
    )
    print(f"  raw MATCH LIMIT 5      p50 {ms(f['raw_p50'])}   p95 {ms(f['raw_p95'])}")
    print(f"  MATCH + bm25 LIMIT 5   p50 {ms(f['ranked_p50'])}   p95 {ms(f['ranked_p95'])}")
    print(
        f"  FtsIndex.search        p50 {ms(f['search_p50'])}   p95 {ms(f['search_p95'])}"
        f"   mean {ms(sum(search_t) / len(search_t))}, median {ms(median(search_t))}"
    )
    print(
        f"  ratio search/raw p50 = {f['ratio_raw_p50']:.2f}x, "
        f"search/ranked p50 = {f['ratio_ranked_p50']:.2f}x"
    )
    verdict = "OK" if f["search_p50"] <= 0.010 else "OVER TARGET"
    print(f"  search p50 {ms(f['search_p50'])} (target <= 10 ms: {verdict})")
    return f


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    main(args.files, args.queries, args.warmup)
