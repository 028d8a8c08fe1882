"""What tracing costs a question: p50 seconds per answer with tracing off and with spans exported over OTLP.

Runs the LibreOffice answer set (``answers_libreoffice_en.jsonl``, 29 questions) in separate processes,
alternating off, on, off, on (tracing is per process, and off must not even import the SDK); ``noise`` is how far
the two "off" runs' p50s lie apart. Prints ONE JSON line. Real retrieval (MiniLM, LanceDB, the offline reranker)
over the LibreOffice sample; the chat model is the test suite's scripted one (tests.dashboard.fakes), which
answers at once: the pipeline's own time is the denominator, so a cost shows more here than beside a real model.

    nice python benchmarks/tracing_overhead.py --data-dir /tmp/kb-mcp [--otlp http://127.0.0.1:6006] [--rounds 2]

Without ``--otlp`` the spans go to a small OTLP/HTTP receiver this script runs on a loopback port (it answers 200
to every export), so "on" pays for building, batching, encoding and sending every span.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"
KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"

CHILD = """
import json, sys, time
sys.path.insert(0, {root!r})
from ragidx import telemetry
from ragidx.config import Settings
from tests.dashboard.fakes import make_minilm_engine
questions = json.loads(sys.argv[1])
times = []
with make_minilm_engine(Settings(data_dir={data_dir!r})) as engine:
    engine.ingest({kb!r}, source_name="libreoffice")
    engine.ask(questions[0])  # untimed: models loaded, index opened
    for q in questions:
        t0 = time.perf_counter()
        engine.ask(q)
        times.append(time.perf_counter() - t0)
telemetry.shutdown()
print(json.dumps({{"times": times, "traced": "opentelemetry.sdk" in sys.modules}}))
"""


class _Sink(BaseHTTPRequestHandler):
    exports = 0

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).exports += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def run(mode: str, questions: list[str], data_dir: str, endpoint: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGIDX_"))}
    env.update({"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)})
    if mode == "on":
        env.update({"RAGIDX_TRACING__ENABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    code = CHILD.format(root=str(ROOT), data_dir=data_dir, kb=str(KB))
    done = subprocess.run([sys.executable, "-c", code, json.dumps(questions)], env=env, capture_output=True,
                          text=True, check=True, cwd=ROOT)  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["traced"] == (mode == "on"), (mode, result["traced"])
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--otlp", help="an OTLP/HTTP receiver's base URL (default: one of this script's own)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()]
    endpoint = args.otlp
    sink = None
    if endpoint is None:
        sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
        threading.Thread(target=sink.serve_forever, daemon=True).start()
        endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    p50: dict[str, list[float]] = {"off": [], "on": []}
    started = time.time()
    for _ in range(args.rounds):
        for mode in ("off", "on"):
            times = run(mode, questions, args.data_dir, endpoint)["times"]
            p50[mode].append(statistics.median(times))
    if sink is not None:
        sink.shutdown()
    off, on = statistics.median(p50["off"]), statistics.median(p50["on"])
    result = {
        "benchmark": "tracing_overhead",
        "set": "answers_libreoffice_en (29 questions)",
        "model": "scripted (tests.dashboard.fakes), MiniLM embeddings",
        "receiver": args.otlp or "loopback OTLP/HTTP sink",
        "rounds": args.rounds,
        "p50_ms_off": round(off * 1000, 1),
        "p50_ms_on": round(on * 1000, 1),
        "difference_ms": round((on - off) * 1000, 1),
        "noise_ms": round((max(p50["off"]) - min(p50["off"])) * 1000, 1),
        "p50_ms_each_run": {k: [round(v * 1000, 1) for v in vs] for k, vs in p50.items()},
        "exports_received": _Sink.exports if sink is not None else None,
        "seconds": round(time.time() - started),
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
