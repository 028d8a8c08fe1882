"""The question log's redaction target, and what logging costs a question.

1. Planted personal data: ``--planted`` e-mail addresses, phone numbers (five formats), card numbers (Luhn-valid,
   four brands, three spacings) and keys (OpenAI, Stripe, AWS, GitHub, Slack, JWT) drawn with ``--seed``, one in
   each question, are asked through a real ``ragidx serve`` on loopback (hash embeddings and a scripted chat model:
   the log, not the model, is measured), a third as an earlier turn, a third streamed; each answer is then voted
   down with the same item in the comment. The database's rows and its file's bytes are scanned for every item
   (and for its digits, however spaced): ``leaked`` must be 0.
2. Ordinary questions kept: the gaps benchmark's question sets (``benchmarks/data/gaps_*.jsonl``, written by
   another engineer, not tuned on here) are redacted; ``altered`` counts those redaction changed (over-redaction
   costs the gaps report its words).
3. Cost: the median and 95th-percentile time of one ``QuestionLog.record`` on SQLite (a question with five
   articles shown), beside a question's own time.

    python benchmarks/question_log.py --planted 200

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from ragidx.article import Article  # noqa: E402
from ragidx.config import ServerKey, ServerSettings, Settings  # noqa: E402
from ragidx.questions.log import QuestionLog  # noqa: E402
from ragidx.questions.records import QuestionRecord, ShownArticle  # noqa: E402
from ragidx.questions.redaction import Redactor, luhn_valid  # noqa: E402
from ragidx.server import create_app  # noqa: E402
from ragidx.stores.article_store import ArticleStore  # noqa: E402
from tests.dashboard.fakes import make_engine  # noqa: E402
from tests.server.helpers import running  # noqa: E402

KEY = "sk-bench-reader"


def planted(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """``n`` (kind, item) pairs, the kinds in turn."""

    def digits(k: int) -> str:
        return "".join(rng.choice("0123456789") for _ in range(k))

    def alnum(k: int, alphabet: str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") -> str:
        return "".join(rng.choice(alphabet) for _ in range(k))

    def card() -> str:
        prefix, length = rng.choice([("4", 16), ("51", 16), ("37", 15), ("6011", 16)])
        body = prefix + digits(length - len(prefix) - 1)
        number = next(body + d for d in "0123456789" if luhn_valid(body + d))
        sep = rng.choice(["", " ", "-"])
        return sep.join(re.findall(".{1,4}", number)) if sep else number

    def phone() -> str:
        return rng.choice([
            f"+1 {digits(3)} {digits(3)} {digits(4)}",
            f"({digits(3)}) {digits(3)}-{digits(4)}",
            f"+44 20 {digits(4)} {digits(4)}",
            f"0{digits(1)} {digits(2)} {digits(2)} {digits(2)} {digits(2)}",
            f"+49-30-{digits(7)}",
        ])  # fmt: skip

    def key() -> str:
        return rng.choice([
            f"sk-{alnum(32)}",
            f"sk_live_{alnum(24)}",
            f"AKIA{alnum(16, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567')}",
            f"ghp_{alnum(36)}",
            f"xoxb-{digits(12)}-{alnum(24)}",
            f"eyJ{alnum(20)}.eyJ{alnum(30)}.{alnum(43)}",
        ])  # fmt: skip

    def email() -> str:
        user = rng.choice(["ann", "j.smith", "b.o.b+help", "maria_garcia", "li.wei"]) + digits(2)
        return f"{user}@{rng.choice(['example', 'mail', 'corp-x'])}{digits(1)}.{rng.choice(['com', 'de', 'co.uk'])}"

    makers = {"email": email, "phone": phone, "card": card, "key": key}
    kinds = list(makers)
    return [(kinds[i % len(kinds)], makers[kinds[i % len(kinds)]]()) for i in range(n)]


def ask_all(items: list[tuple[str, str]], data_dir: Path) -> None:
    settings = Settings(
        data_dir=data_dir, top_k=2, max_tool_rounds=1, plan_searches="never",
        serve=ServerSettings(keys=[ServerKey(key=KEY, user="reader")]),
    )  # fmt: skip
    headers = {"Authorization": f"Bearer {KEY}"}
    with make_engine(settings) as engine:
        text = "To print labels choose File New Labels and print them on the printer."
        engine.ingest([Article("labels", "Printing labels", "https://help/labels", text, "en")], source_name="kb")
        with running(create_app(engine)) as url, httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for i, (_, item) in enumerate(items):
                question = f"How do I print labels for {item} on the printer?"
                messages = [{"role": "user", "content": question}]
                if i % 3 == 0:
                    messages = [{"role": "user", "content": f"Hi, I am {item}."},
                                {"role": "assistant", "content": "Hello."}, *messages]  # fmt: skip
                body: dict[str, Any] = {"model": "ragidx", "messages": messages, "stream": i % 3 == 1}
                reply = http.post("/v1/chat/completions", json=body)
                reply.raise_for_status()
                if body["stream"]:
                    first = next(line for line in reply.text.splitlines() if line.startswith("data: {"))
                    qid = json.loads(first[6:])["id"]
                else:
                    qid = reply.json()["id"]
                vote = http.post("/v1/feedback", json={"id": qid, "vote": "down", "comment": f"reach me: {item}"})
                vote.raise_for_status()


def leaks(items: list[tuple[str, str]], data_dir: Path) -> tuple[dict[str, int], int]:
    db = data_dir / "articles.sqlite"
    with sqlite3.connect(db) as conn:
        rows = [
            str(r) for t in ("ragidx_questions", "ragidx_question_feedback") for r in conn.execute(f"SELECT * FROM {t}")
        ]  # noqa: S608,E501
    raw = "\n".join(rows)
    on_disk = b"".join(p.read_bytes() for p in data_dir.glob("articles.sqlite*"))
    row_digits = re.sub(r"\D", "", raw)
    leaked: dict[str, int] = {}
    for kind, item in items:
        digits = re.sub(r"\D", "", item)
        if item in raw or item.encode() in on_disk or (kind in ("phone", "card") and digits in row_digits):
            leaked[kind] = leaked.get(kind, 0) + 1
    return leaked, len(rows)


def record_cost(n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as folder:
        store = ArticleStore(Path(folder) / "articles.sqlite")
        log = QuestionLog(store, tenant=None, retention_days=90)
        shown = tuple(ShownArticle(f"kb-{i}", i + 1, i == 0) for i in range(5))
        times = []
        for i in range(n):
            rec = QuestionRecord(
                f"q{i}", datetime.now(UTC), None, "user:reader", ("support",), f"How do I print label {i}?",
                (), "answered", None, 1.2, shown, {"total": 3.0}, "qwen", "small-model", "serve",
            )  # fmt: skip
            t0 = time.perf_counter()
            log.record(rec)
            times.append(time.perf_counter() - t0)
        store.close()
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--planted", type=int, default=200)
    parser.add_argument("--seed", type=int, default=60)
    parser.add_argument("--writes", type=int, default=300)
    args = parser.parse_args()
    items = planted(args.planted, random.Random(args.seed))
    with tempfile.TemporaryDirectory() as folder:
        data_dir = Path(folder) / "data"
        ask_all(items, data_dir)
        leaked, rows = leaks(items, data_dir)
    redactor = Redactor()
    ordinary = [
        json.loads(line)["question"]
        for path in sorted((ROOT / "benchmarks" / "data").glob("gaps_*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and "question" in json.loads(line)
    ]
    altered = [q for q in ordinary if redactor.redact(q) != q]
    median_s, p95_s = record_cost(args.writes)
    by_kind = {k: sum(1 for kind, _ in items if kind == k) for k in ("email", "phone", "card", "key")}
    print(json.dumps({
        "planted": len(items), "by_kind": by_kind,
        "rows_scanned": rows, "leaked": sum(leaked.values()), "leaked_by_kind": leaked,
        "ordinary_questions": len(ordinary), "altered": len(altered), "altered_examples": altered[:3],
        "record_ms_median": round(median_s * 1000, 2), "record_ms_p95": round(p95_s * 1000, 2), "writes": args.writes,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
