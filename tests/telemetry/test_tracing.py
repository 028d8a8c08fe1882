"""ragidx's OpenTelemetry traces, with the SDK's in-memory exporter and a real OTLP/HTTP receiver on loopback: a
trace per question (``ragidx.ask``) with its retrieval stages, budget and model calls as children, GenAI attributes
on each model call, the reader as a keyed hash and never the question's text unless asked; ingest runs traced;
off by default, where the SDK is never imported. Real stores, retriever and agent; hash embeddings and a scripted
chat model (tests.dashboard.fakes)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import SecretStr

from ragidx import telemetry
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.telemetry.settings import TracingSettings
from tests.agent.helpers import make_agent
from tests.dashboard.fakes import make_engine
from tests.server.test_readers import KB, QUESTION

ROOT = Path(__file__).resolve().parents[2]
STAGES = {"ragidx.retrieve", "ragidx.hybrid_search", "ragidx.chunk_rerank", "ragidx.group", "ragidx.budget"}


def kb_settings(data_dir: Path, **tracing: Any) -> Settings:
    return Settings(
        data_dir=data_dir, top_k=4, max_tool_rounds=1, plan_searches="never",
        tracing=TracingSettings(enabled=True, **tracing),
    )  # fmt: skip


@pytest.fixture
def traced() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    assert telemetry.configure(TracingSettings(enabled=True, reader_key=SecretStr("k1")), exporter=exporter)
    try:
        yield exporter
    finally:
        telemetry.shutdown()


def traces(spans: tuple[ReadableSpan, ...]) -> dict[int, list[ReadableSpan]]:
    out: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.context.trace_id, []).append(span)
    return out


def parent_name(span: ReadableSpan, spans: list[ReadableSpan]) -> str | None:
    by_id = {s.context.span_id: s.name for s in spans}
    return by_id.get(span.parent.span_id) if span.parent else None


def test_each_question_is_one_trace_with_its_stages_budget_and_model_calls(
    traced: InMemorySpanExporter, tmp_path: Path
) -> None:
    with make_engine(kb_settings(tmp_path)) as engine:
        engine.ingest(KB, source_name="kb")
        traced.clear()
        engine.ask(QUESTION, user="ann")
        items = list(engine.stream_ask(QUESTION, groups=["hr"]))  # the streamed form: its own trace
    assert items[-1].citations
    by_trace = traces(traced.get_finished_spans())
    assert len(by_trace) == 2
    for spans, reader in zip(by_trace.values(), ("ann", "hr"), strict=True):
        roots = [s for s in spans if s.parent is None]
        assert [r.name for r in roots] == ["ragidx.ask"]
        root = roots[0]
        names = {s.name for s in spans}
        assert names >= STAGES and "chat scripted" in names
        parents = {s.name: parent_name(s, spans) for s in spans}
        assert parents["ragidx.retrieve"] == "ragidx.ask" and parents["ragidx.budget"] == "ragidx.ask"
        assert {parents[n] for n in ("ragidx.hybrid_search", "ragidx.chunk_rerank", "ragidx.group")} == {
            "ragidx.retrieve"
        }
        assert parents["chat scripted"] == "ragidx.ask"
        attrs = dict(root.attributes or {})
        assert attrs["ragidx.citations"] >= 1 and attrs["ragidx.not_found"] is False
        principal = "user:ann" if reader == "ann" else "group:hr"
        assert attrs["ragidx.reader.hash"] == hmac.new(b"k1", principal.encode(), hashlib.sha256).hexdigest()[:16]
        budget = dict(next(s for s in spans if s.name == "ragidx.budget").attributes or {})
        assert budget["ragidx.budget.tokens_after"] <= budget["ragidx.budget.tokens_before"]
        assert budget["ragidx.budget.articles_kept"] >= 1 and "ragidx.budget.articles_dropped" in budget
        chat = dict(next(s for s in spans if s.name == "chat scripted").attributes or {})
        assert chat["gen_ai.operation.name"] == "chat" and chat["gen_ai.request.model"] == "scripted"
        assert chat["gen_ai.usage.input_tokens"] == budget["ragidx.budget.tokens_after"]  # the prompt as sent
        assert chat["gen_ai.usage.output_tokens"] >= 1 and chat["gen_ai.response.time_to_first_chunk"] >= 0
        # who asked and what: never in a span (a keyed hash of the reader; no question, query or article text)
        shown = json.dumps([dict(s.attributes or {}) for s in spans], default=str)
        assert QUESTION not in shown and "ann" not in shown and "hr" not in shown.replace("ragidx", "")
        assert "Printing payroll slips" not in shown and "pub-labels" not in shown


def test_question_text_only_when_configured(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    telemetry.configure(TracingSettings(enabled=True, record_questions=True), exporter=exporter)
    try:
        with make_engine(kb_settings(tmp_path)) as engine:
            engine.ingest(KB, source_name="kb")
            engine.ask(QUESTION)
    finally:
        telemetry.shutdown()
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "ragidx.ask")
    assert (root.attributes or {})["ragidx.question"] == QUESTION
    assert (next(s for s in spans if s.name == "ragidx.retrieve").attributes or {})["ragidx.query"] == QUESTION


def test_ingest_runs_are_traced_with_their_counts(traced: InMemorySpanExporter, tmp_path: Path) -> None:
    with make_engine(kb_settings(tmp_path)) as engine:
        engine.ingest(KB, source_name="kb")
        engine.ingest(KB, source_name="kb")
    first, again = [dict(s.attributes or {}) for s in traced.get_finished_spans() if s.name == "ragidx.ingest"]
    assert first["ragidx.ingest.source"] == "kb" and first["ragidx.ingest.new"] == len(KB)
    assert again["ragidx.ingest.new"] == 0 and again["ragidx.ingest.unchanged"] == len(KB)


def test_a_sync_run_is_a_span_around_its_ingests(traced: InMemorySpanExporter, tmp_path: Path) -> None:
    from ingestion.sync.config import SourceConfig
    from ingestion.sync.runner import SyncRunner

    folder = tmp_path / "docs"
    folder.mkdir()
    for n, article in enumerate(KB[:3]):
        (folder / f"page{n}.md").write_text(f"# {article.title}\n\n{article.content}\n", encoding="utf-8")
    with make_engine(kb_settings(tmp_path / "data")) as engine:
        report = SyncRunner(engine).sync(SourceConfig(name="docs", kind="folder", path=str(folder)))
    assert report.count("new") == 3
    spans = list(traced.get_finished_spans())
    sync = dict(next(s for s in spans if s.name == "ragidx.sync").attributes or {})
    assert sync["ragidx.sync.source"] == "docs" and sync["ragidx.sync.kind"] == "folder"
    assert sync["ragidx.sync.new"] == 3 and sync["ragidx.sync.deleted"] == 0 and sync["ragidx.sync.status"] == "ok"
    assert parent_name(next(s for s in spans if s.name == "ragidx.ingest"), spans) == "ragidx.sync"


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: keeps each POST /v1/traces body (protobuf) and answers 200."""

    bodies: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        type(self).bodies.append((self.path, self.headers.get("content-type", ""), body))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_spans_reach_an_otlp_receiver_named_by_the_otel_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_address[1]}")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "kb-answers")
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    try:
        with make_engine(kb_settings(tmp_path)) as engine:  # the engine switches tracing on from its settings
            assert telemetry.enabled()
            engine.ingest(KB, source_name="kb")
            engine.ask(QUESTION)
        telemetry.shutdown()  # flushes the batch
    finally:
        telemetry.shutdown()
        receiver.shutdown()
    names, services = [], set()
    for path, content_type, body in _Receiver.bodies:
        assert path == "/v1/traces" and content_type == "application/x-protobuf"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            services |= {a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"}
            names += [s.name for scope in resource_spans.scope_spans for s in scope.spans]
    assert services == {"kb-answers"}
    assert names.count("ragidx.ask") == 1 and names.count("ragidx.ingest") == 1 and set(names) >= STAGES


OFF_PROBE = """
import json, sys, tempfile
from ragidx.config import Settings
from ragidx import telemetry
from tests.dashboard.fakes import make_engine
from tests.server.test_readers import KB, QUESTION
with make_engine(Settings(data_dir=tempfile.mkdtemp(), plan_searches="never", max_tool_rounds=1)) as engine:
    engine.ingest(KB, source_name="kb")
    engine.ask(QUESTION)
print(json.dumps({"enabled": telemetry.enabled(), "sdk": "opentelemetry.sdk" in sys.modules}))
"""


@pytest.mark.parametrize(
    "env",
    [{}, {"RAGIDX_TRACING__ENABLED": "true", "OTEL_SDK_DISABLED": "true"}],
    ids=["default", "otel-sdk-disabled"],
)
def test_off_nothing_is_traced_and_the_sdk_is_never_imported(env: dict[str, str]) -> None:
    done = subprocess.run(
        [sys.executable, "-c", OFF_PROBE],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"enabled": False, "sdk": False}


def test_an_engine_does_not_switch_tracing_on_by_default(tmp_path: Path) -> None:
    engine = Engine(Settings(data_dir=tmp_path))
    assert not telemetry.enabled() and engine.settings.tracing.enabled is False


def test_the_answer_check_is_a_span_holding_its_model_call(traced: InMemorySpanExporter) -> None:
    agent, _ = make_agent(["YES", "Use Table > Insert Table [1]."], tool_mode="forced", plan="never", answer_check=0.5)

    async def run() -> Any:
        return await agent.run(question="How do I insert a table?")

    answer = asyncio.run(run())
    assert not answer.not_found
    spans = list(traced.get_finished_spans())
    check = next(s for s in spans if s.name == "ragidx.answer_check")
    calls = [s for s in spans if s.name == "chat scripted"]
    assert [parent_name(s, spans) for s in calls].count("ragidx.answer_check") == 1  # the check's one-token call
    assert len(calls) == 2 and check.status.is_ok


def test_a_turn_span_names_the_guards_that_fired_and_never_their_reasons(traced: InMemorySpanExporter) -> None:
    from ragidx.agent.answer import Answer
    from ragidx.stores.access import Principal

    answer = Answer(
        question="q", text="not found", not_found=True, not_found_reason="the articles do not answer it",
        guards=[{"name": "ungrounded", "reason": "the reply names Acme Payroll, which no article holds"}],
        answer_check=-1.7,
    )  # fmt: skip

    async def turn() -> Answer:
        return answer

    tracing = telemetry._tracing
    assert tracing is not None
    asyncio.run(tracing.traced_ask("q", Principal(), None, turn()))
    [span] = traced.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["ragidx.guards_fired"] == ("ungrounded",) and attrs["ragidx.answer_check.log_odds"] == -1.7
    assert [dict(e.attributes or {}) for e in span.events] == [{"name": "ungrounded"}]
    assert "Acme" not in json.dumps([attrs, [dict(e.attributes or {}) for e in span.events]], default=str)
