"""Time MCP's ``search`` and ``ask`` through the SDK's own client, over stdio and streamable HTTP, against
``ragidx serve``'s ``/v1/search`` and ``/v1/chat/completions`` on the same server.

Prints ONE JSON line: the median milliseconds per call of each path, and how many calls. Real retrieval (LanceDB,
the bundled MiniLM, the offline reranker, the article store) over the LibreOffice sample knowledge base; the chat
model is the test suite's scripted one (tests.dashboard.fakes: it answers at once, citing the first two sources
listed), so the figures are the protocol's and the pipeline's own cost, not a model's.

    nice python benchmarks/mcp_latency.py --data-dir /tmp/kb-mcp [--questions N]

stdio runs ``ragidx mcp`` as a subprocess (its engine built by ``RAGIDX_MCP_ENGINE_FACTORY``); HTTP runs
``create_app`` with ``mcp.serve`` under uvicorn on a loopback port in this process. One untimed call of each kind
first (the model of each process loaded, the index opened).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from ragidx.config import Settings  # noqa: E402
from ragidx.integrations.mcp_settings import McpSettings  # noqa: E402
from ragidx.server import create_app  # noqa: E402
from tests.dashboard.fakes import make_minilm_engine  # noqa: E402
from tests.server.helpers import running  # noqa: E402

KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"
FACTORY = "tests.dashboard.fakes:make_minilm_engine"


def ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


async def mcp_calls(client: Client, questions: list[str]) -> dict[str, list[float]]:
    await client.call_tool("search", {"query": questions[0], "top_k": 5})  # untimed: warm
    await client.call_tool("ask", {"question": questions[0]})
    times: dict[str, list[float]] = {"search": [], "ask": []}
    for q in questions:
        t0 = time.perf_counter()
        found = await client.call_tool("search", {"query": q, "top_k": 5})
        times["search"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        asked = await client.call_tool("ask", {"question": q})
        times["ask"].append(time.perf_counter() - t0)
        assert not found.is_error and not asked.is_error, (found, asked)
    return times


def http_calls(base: str, questions: list[str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"search": [], "ask": []}
    with httpx.Client(base_url=base, timeout=300) as http:
        http.post("/v1/search", json={"query": questions[0], "top_k": 5})
        http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": questions[0]}]})
        for q in questions:
            t0 = time.perf_counter()
            found = http.post("/v1/search", json={"query": q, "top_k": 5})
            times["search"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            asked = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": q}]})
            times["ask"].append(time.perf_counter() - t0)
            assert found.status_code == 200 and asked.status_code == 200
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--questions", type=int, default=10)
    args = p.parse_args()
    data_dir = Path(args.data_dir)
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines()[: args.questions]]
    settings = Settings(data_dir=data_dir, mcp=McpSettings(serve=True))
    with make_minilm_engine(settings) as engine:
        engine.ingest(KB, source_name="libreoffice")  # unchanged articles are skipped on a second run
        with running(create_app(engine)) as base:
            http = http_calls(base, questions)

            async def over_http() -> dict[str, list[float]]:
                async with Client(f"{base}/mcp") as client:
                    return await mcp_calls(client, questions)

            mcp_http = asyncio.run(over_http())

    async def over_stdio() -> dict[str, list[float]]:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "ragidx.cli", "--data-dir", str(data_dir), "mcp"],
            env={"PYTHONPATH": str(ROOT), "RAGIDX_MCP_ENGINE_FACTORY": FACTORY, "HF_HUB_OFFLINE": "1"},
            cwd=str(ROOT),
        )
        async with Client(server, read_timeout_seconds=600) as client:
            return await mcp_calls(client, questions)

    mcp_stdio = asyncio.run(over_stdio())
    result: dict[str, Any] = {
        "benchmark": "mcp_latency",
        "model": "scripted (tests.dashboard.fakes), MiniLM embeddings, LibreOffice sample KB",
        "calls_each": len(questions),
        "median_ms": {
            "v1_search": ms(http["search"]),
            "mcp_http_search": ms(mcp_http["search"]),
            "mcp_stdio_search": ms(mcp_stdio["search"]),
            "v1_chat_completions": ms(http["ask"]),
            "mcp_http_ask": ms(mcp_http["ask"]),
            "mcp_stdio_ask": ms(mcp_stdio["ask"]),
        },
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
