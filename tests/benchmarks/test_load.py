"""benchmarks/load.py's bookkeeping: clients at once, errors by kind, answers compared with the ones asked alone."""

from __future__ import annotations

import threading
import time
from typing import Any

from ragidx.providers.model_queue import EngineBusyError
from tests.benchmarks.helpers import load_benchmark


def test_a_run_counts_answers_errors_by_kind_and_the_ones_that_match_asked_alone() -> None:
    load = load_benchmark("load")
    questions = ["q0", "q1", "q2", "q3"]
    alone = {q: (f"answer to {q}", None) for q in questions}
    inside = 0
    most = 0
    lock = threading.Lock()

    def ask(question: str) -> dict[str, Any]:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.05)
        with lock:
            inside -= 1
        if question == "q3":
            raise EngineBusyError("busy", retry_after_s=5, waiting=3)
        text = "something else" if question == "q2" else f"answer to {question}"
        return {"text": text, "not_found": False, "reason": None, "timings": {"queue_wait": 0.5, "total": 2.0}}

    result = load.run(ask, questions, clients=4, per_client=2, alone=alone, max_seconds=60)

    assert most == 4  # the clients asked at once
    assert result["asked"] == 8 and result["answered"] == 6 and result["errors"] == {"EngineBusyError": 2}
    assert result["same_as_alone"] == 4 and result["differ"] == ["q2"]
    assert result["wait_p95_s"] == 0.5 and result["answer_p50_s"] == 2.0 and result["answers_per_min"] > 0
