"""Run every phasegate benchmark in turn (``make bench``). Not a test: it prints figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = [
    ["advance_latency.py"],
    ["advance_latency.py", "--no-prefetch", "--phases", "120"],
    ["shipped_advance.py"],
    ["sealed_prefetch.py"],
    ["parse_render.py"],
    ["verify_latency.py"],
    ["rag_bench.py"],
    ["concurrent_agents.py"],
    ["concurrent_agents.py", "--sealed"],
    ["scale_sessions.py", "--sessions", "3000", "--probes", "200"],
    ["load.py"],
    ["fault_suite.py"],
    ["orchestration_overhead.py"],
]

if __name__ == "__main__":
    failed = 0
    for argv in BENCHES:
        print(f"\n### {' '.join(argv)}", flush=True)
        failed |= subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]])
    sys.exit(failed)
