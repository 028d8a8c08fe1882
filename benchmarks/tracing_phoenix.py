"""Check ragidx's traces in a real OTLP receiver: Arize Phoenix, through its REST API.

Asks N questions of the LibreOffice answer set with tracing on, exporting to Phoenix (OTLP over HTTP), then reads
the project's spans back from Phoenix and checks that it holds one trace per question, each rooted at
``ragidx.ask`` with the retrieval stages, the budget and a GenAI model-call span, and no question text. Prints ONE
JSON line. Real retrieval (MiniLM, LanceDB, the offline reranker) over the LibreOffice sample; the chat model is
the test suite's scripted one (tests.dashboard.fakes), so no answer check runs (that span needs the local model).

    python -m venv /tmp/phoenix && /tmp/phoenix/bin/pip install arize-phoenix
    PHOENIX_PORT=6606 PHOENIX_WORKING_DIR=/tmp/phoenix-data /tmp/phoenix/bin/phoenix serve &
    nice python benchmarks/tracing_phoenix.py --phoenix http://127.0.0.1:6606 --data-dir /tmp/kb-mcp [--questions 10]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from ragidx import telemetry  # noqa: E402
from ragidx.config import Settings  # noqa: E402
from ragidx.telemetry.settings import TracingSettings  # noqa: E402
from tests.dashboard.fakes import make_minilm_engine  # noqa: E402

KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"
NEEDED = {"ragidx.ask", "ragidx.retrieve", "ragidx.hybrid_search", "ragidx.chunk_rerank", "ragidx.group",
          "ragidx.budget", "chat scripted"}  # fmt: skip


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Phoenix returns attributes nested by their dots; flat again (``gen_ai.usage.input_tokens``)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(flat(inner, f"{prefix}.{key}" if prefix else key))
    return out


def spans_of(base: str, project: str) -> list[dict[str, Any]]:
    spans: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{base}/v1/projects/{project}/spans", params=params, timeout=30)
        if page.status_code == 404:  # the project appears with its first span
            return []
        page.raise_for_status()
        body = page.json()
        spans += body["data"]
        if not (cursor := body.get("next_cursor")):
            return spans


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phoenix", default="http://127.0.0.1:6006")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--questions", type=int, default=10)
    args = p.parse_args()
    project = f"ragidx-check-{uuid.uuid4().hex[:8]}"
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = args.phoenix
    os.environ["OTEL_SERVICE_NAME"] = "ragidx"
    os.environ["OTEL_RESOURCE_ATTRIBUTES"] = f"openinference.project.name={project}"
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()[: args.questions]]
    settings = Settings(data_dir=Path(args.data_dir), tracing=TracingSettings(enabled=True))
    with make_minilm_engine(settings) as engine:
        engine.ingest(KB, source_name="libreoffice")
        for i, question in enumerate(questions):
            if i % 2:
                list(engine.stream_ask(question, user="ann"))
            else:
                engine.ask(question)
    telemetry.shutdown()  # exports what is buffered

    deadline = time.monotonic() + 60
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:  # Phoenix writes what it received in batches
        spans = spans_of(args.phoenix, project)
        if sum(s["name"] == "ragidx.ask" for s in spans) >= len(questions):
            break
        time.sleep(2)
    traces: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        traces.setdefault(span["context"]["trace_id"], []).append(span)
    asked = {t: s for t, s in traces.items() if any(x["name"] == "ragidx.ask" and not x.get("parent_id") for x in s)}
    complete = [t for t, s in asked.items() if {x["name"] for x in s} >= NEEDED]
    chats = [flat(x.get("attributes") or {}) for s in asked.values() for x in s if x["name"] == "chat scripted"]
    genai = all(
        c.get("gen_ai.request.model") == "scripted" and isinstance(c.get("gen_ai.usage.input_tokens"), int)
        and isinstance(c.get("gen_ai.usage.output_tokens"), int) and "gen_ai.response.time_to_first_chunk" in c
        for c in chats
    )  # fmt: skip
    text = json.dumps([x.get("attributes") for s in asked.values() for x in s])
    result = {
        "benchmark": "tracing_phoenix",
        "receiver": "arize-phoenix (OTLP/HTTP, REST /v1/projects/{project}/spans)",
        "questions": len(questions),
        "traces_with_ragidx_ask_root": len(asked),
        "traces_with_every_stage": len(complete),
        "spans": len(spans),
        "span_names": sorted({s["name"] for s in spans}),
        "chat_spans": len(chats),
        "chat_spans_with_genai_attributes": genai,
        "question_text_in_spans": any(q in text for q in questions),
        "ok": len(asked) == len(complete) == len(questions) and genai and not any(q in text for q in questions),
    }
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
