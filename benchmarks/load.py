"""Load test: many clients asking one engine at once, through ``ragidx serve`` and through the Python API.

For each client count (``--clients 1,4,8``) and each way in (``--via server,api``) every client asks
``--per-client`` questions from the question set, one after the other, all clients at once. The server runs on a
loopback port in this process (uvicorn) and is asked with the ``openai`` package; the API is ``Engine.ask`` from
threads. Before that every question used is asked once, alone: with greedy decoding (temperature 0) an answer
asked among others should be the same text, and each run counts how many are. ``--ingest KB`` ingests a second
knowledge base beside the largest run (into the same index, so later runs read a bigger one). ``--kill`` ends
with the fault check: the local model server killed in the middle of a streamed answer (that question should get a
clear error, the next one an answer).

Bounded: ``--max-seconds`` stops a run from starting new questions (those not asked are counted as such), and the
queue refuses past ``--max-waiting`` / ``--max-wait-s`` with a clear "busy" error (counted by kind). Prints ONE JSON
line: per run, the answers returned, not-found answers, errors by kind, p50/p95 of the queue wait, of the answer's
own time and of the whole request, the throughput, and the answers equal to the one-at-a-time ones.

    python benchmarks/load.py --data-dir /tmp/load --clients 1,4,8 --per-client 3 [--model qwen2.5-0.5b]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ragidx.config import LLMEndpoint, QueueSettings, Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402

DEFAULT_KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
DEFAULT_QUESTIONS = ROOT / "ragidx" / "evaluation" / "data" / "answers_libreoffice_en.jsonl"


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def error_kind(exc: BaseException) -> str:
    """A short name for an error a client saw (the HTTP status for the server, the exception for the API)."""
    status = getattr(exc, "status_code", None)
    if status is not None:
        return f"http_{status}"
    return type(exc).__name__


class Served:
    """``ragidx serve``'s app over ``engine`` on a free loopback port, in a thread."""

    def __init__(self, engine: Engine) -> None:
        import uvicorn

        from ragidx.server import create_app

        config = uvicorn.Config(create_app(engine), host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def ask_api(engine: Engine, question: str) -> dict[str, Any]:
    answer = engine.ask(question)
    return {"text": answer.text, "not_found": answer.not_found, "reason": answer.not_found_reason,
            "timings": answer.timings}  # fmt: skip


def ask_server(client: Any, question: str) -> dict[str, Any]:
    completion = client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": question}])
    extra = (completion.model_extra or {})["ragidx"]
    return {"text": extra["text"], "not_found": extra["not_found"], "reason": extra["reason"],
            "timings": extra["timings"]}  # fmt: skip


def run(
    ask: Any,
    questions: list[str],
    clients: int,
    per_client: int,
    alone: dict[str, tuple[str, str | None]],
    max_seconds: float,
) -> dict[str, Any]:
    """``clients`` threads each asking ``per_client`` questions in turn; the figures of the run."""
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()

    def client(n: int) -> None:
        for j in range(per_client):
            question = questions[(n * per_client + j) % len(questions)]
            if time.perf_counter() - t0 > max_seconds:
                with lock:
                    rows.append({"question": question, "skipped": True})
                continue
            start = time.perf_counter()
            row: dict[str, Any] = {"question": question}
            try:
                row.update(ask(question))
            except Exception as exc:
                row["error"] = error_kind(exc)
                row["message"] = str(exc)[:200]
            row["latency"] = time.perf_counter() - start
            with lock:
                rows.append(row)

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(client, range(clients)))
    elapsed = time.perf_counter() - t0
    for r in rows:  # each question's story, for reading the figures (stderr)
        brief = {k: r.get(k) for k in ("question", "not_found", "reason", "error", "latency")}
        brief["question"] = str(brief["question"])[:50]
        brief["timings"] = {k: r.get("timings", {}).get(k) for k in ("queue_wait", "total", "llm")}
        print(json.dumps(brief), file=sys.stderr, flush=True)
    answered = [r for r in rows if "text" in r]
    same = [r for r in answered if (r["text"], r["reason"]) == alone.get(r["question"])]
    return {
        "clients": clients,
        "asked": sum(1 for r in rows if not r.get("skipped")),
        "not_asked": sum(1 for r in rows if r.get("skipped")),
        "answered": len(answered),
        "not_found": sum(1 for r in answered if r["not_found"]),
        "errors": dict(Counter(r["error"] for r in rows if "error" in r)),
        "error_examples": sorted({r["message"] for r in rows if "error" in r})[:3],
        "same_as_alone": len(same),  # the same text, and for a declined one the same reason (with its log-odds)
        "differ": sorted({r["question"][:60] for r in answered if r not in same}),
        "wait_p50_s": pct([float(r["timings"].get("queue_wait", 0.0)) for r in answered], 0.5),
        "wait_p95_s": pct([float(r["timings"].get("queue_wait", 0.0)) for r in answered], 0.95),
        "answer_p50_s": pct([float(r["timings"].get("total", 0.0)) for r in answered], 0.5),
        "answer_p95_s": pct([float(r["timings"].get("total", 0.0)) for r in answered], 0.95),
        "latency_p50_s": pct([r["latency"] for r in rows if "latency" in r], 0.5),
        "latency_p95_s": pct([r["latency"] for r in rows if "latency" in r], 0.95),
        "seconds": round(elapsed, 1),
        "answers_per_min": round(60 * len(answered) / elapsed, 2) if elapsed else None,
    }


def kill_mid_answer(engine: Engine, question: str) -> dict[str, Any]:
    """Kill the local model server as the model is about to read the answer's prompt; then ask again."""
    from ragidx.agent.answer import Progress

    server = engine.llm_provider.local_server(engine.settings.llm)
    outcome: dict[str, Any] = {}
    t0 = time.perf_counter()
    try:
        for item in engine.stream_ask(question, progress=True):
            if isinstance(item, Progress) and item.stage == "prompt" and server._proc is not None:
                server._proc.kill()  # as the model is about to read the answer's prompt
        outcome["killed_question"] = "answered (the kill came too late)"
    except Exception as exc:
        outcome["killed_question"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    outcome["killed_question_s"] = round(time.perf_counter() - t0, 1)
    t1 = time.perf_counter()
    try:
        again = engine.ask(question)
        outcome["next_question"] = "not found" if again.not_found else "answered"
    except Exception as exc:
        outcome["next_question"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    outcome["next_question_s"] = round(time.perf_counter() - t1, 1)
    outcome["queue_after"] = engine.model_queue.stats().__dict__
    return outcome


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--kb", default=str(DEFAULT_KB), help="ingested first (idempotent)")
    p.add_argument("--questions", default=str(DEFAULT_QUESTIONS))
    p.add_argument("--model", default=LLMEndpoint().model)
    p.add_argument("--clients", default="1,4,8", help="client counts, one run each (default 1,4,8)")
    p.add_argument("--per-client", type=int, default=3, help="questions each client asks (default 3)")
    p.add_argument("--distinct", type=int, default=None, help="distinct questions drawn (default clients*per-client)")
    p.add_argument("--via", default="server,api", help="server, api or both (default)")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="no new question after this long in a run")
    p.add_argument("--max-waiting", type=int, default=32, help="Settings.queue.max_waiting")
    p.add_argument("--max-wait-s", type=float, default=1200.0, help="Settings.queue.max_wait_s")
    p.add_argument("--ingest", help="a second KB ingested beside the largest server run")
    p.add_argument("--kill", action="store_true", help="end with the fault check: the model server killed mid-answer")
    p.add_argument(
        "--no-answer-check",
        action="store_true",
        help="the model answers without the answer check first (more written answers to compare)",
    )
    args = p.parse_args()

    load_before = os.getloadavg()
    settings = Settings(
        data_dir=Path(args.data_dir),
        llm=LLMEndpoint(model=args.model, temperature=0.0, answer_check=False if args.no_answer_check else None),
        queue=QueueSettings(max_waiting=args.max_waiting, max_wait_s=args.max_wait_s),
    )
    counts = [int(c) for c in args.clients.split(",")]
    ways = [w.strip() for w in args.via.split(",")]
    rows = [json.loads(line) for line in Path(args.questions).read_text().splitlines() if line.strip()]
    wanted = args.distinct or max(counts) * args.per_client
    questions = [r["question"] for r in rows][:wanted]
    out: dict[str, Any] = {
        "benchmark": "load",
        "model": args.model,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "load_before": [round(x, 2) for x in load_before],
        "questions": len(questions),
        "answer_check": not args.no_answer_check,
        "per_client": args.per_client,
    }
    with Engine(settings) as engine:
        report = engine.ingest(args.kb)
        out["kb_articles"] = engine.article_store.count()
        out["kb_ingest_new"] = report.new
        t0 = time.perf_counter()
        engine.warm_up()
        out["warm_up_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        alone = {q: (a["text"], a["reason"]) for q in questions for a in [ask_api(engine, q)]}
        out["alone_s_per_question"] = round((time.perf_counter() - t0) / len(questions), 2)
        runs = []
        for via in ways:
            for clients in counts:
                ingest_report: dict[str, Any] | None = None
                ingester: threading.Thread | None = None
                if args.ingest and via == ways[0] and clients == max(counts):

                    def ingest_beside() -> None:
                        nonlocal ingest_report
                        t = time.perf_counter()
                        r = engine.ingest(args.ingest)
                        ingest_report = {**r.as_dict(), "seconds": round(time.perf_counter() - t, 1)}

                    ingester = threading.Thread(target=ingest_beside)
                    ingester.start()
                if via == "server":
                    import openai

                    with Served(engine) as base:
                        client = openai.OpenAI(base_url=base, api_key="-", max_retries=0, timeout=3600)
                        ask = functools.partial(ask_server, client)
                        result = run(ask, questions, clients, args.per_client, alone, args.max_seconds)
                else:
                    ask = functools.partial(ask_api, engine)
                    result = run(ask, questions, clients, args.per_client, alone, args.max_seconds)
                if ingester is not None:
                    ingester.join()
                    result["ingest_beside"] = ingest_report
                    result["kb_articles_after"] = engine.article_store.count()
                runs.append({"via": via, **result, "load_after": [round(x, 2) for x in os.getloadavg()]})
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
        out["runs"] = runs
        if args.kill:
            out["fault_kill_mid_answer"] = kill_mid_answer(engine, questions[0])
    out["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
