"""How fast the local model reads and writes, and the prompt a user's deadline can afford.

On a CPU almost all of an answer's wait is the model reading its prompt (prefill), then writing the answer
(decode). :class:`ModelSpeed` holds both rates and a typical answer length; :func:`probe_speed` measures
them once with one short streamed call; :class:`SpeedLog` keeps them per model, thread count and CPU in a
small JSON file so the probe runs once per machine; :class:`AnswerDeadline` turns "answer within N
seconds" into a cap on the answer call's prompt tokens and refreshes the rates from every real answer.

Example:
    >>> speed = ModelSpeed(prefill_tps=30.0, decode_tps=4.0, answer_tokens=40.0)
    >>> speed.prompt_tokens_within(40.0)      # (40 s - 40 tokens / 4 tokens/s) * 30 tokens/s
    900
    >>> speed.observed(prompt_tokens=1200, ttft_s=30.0, completion_tokens=41, total_s=40.0).prefill_tps
    33.0
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ragidx.providers.chat import capped
from ragidx.providers.machine import cpu_name
from ragidx.providers.native_runtime import runtime_id

logger = logging.getLogger(__name__)

# A reading that implies a prefill this many times faster than the estimate came from llama.cpp's prompt
# cache (the same prompt prefix was read before): it says nothing about speed and is ignored.
_CACHE_HIT_RATIO = 3.0
_PROBE_TEXT = (
    "The knowledge base describes configuration parameters, their default values, the units they are "
    "given in and the conditions under which the server reads them again. "
)


@dataclass(frozen=True)
class ModelSpeed:
    """A model's measured rates on this machine: prompt tokens read and answer tokens written per second.

    ``answer_tokens`` is how long an answer usually is (tokens), for the time the writing will take.
    """

    prefill_tps: float
    decode_tps: float
    answer_tokens: float = 48.0
    samples: int = 0

    def seconds_for(self, prompt_tokens: int, answer_tokens: float | None = None) -> float:
        """Expected seconds to read ``prompt_tokens`` and write an answer."""
        written = self.answer_tokens if answer_tokens is None else answer_tokens
        return prompt_tokens / self.prefill_tps + written / self.decode_tps

    def prompt_tokens_within(self, seconds: float) -> int:
        """The most prompt tokens that leave time to write a usual answer within ``seconds``."""
        reading = seconds - self.answer_tokens / self.decode_tps
        return max(0, int(reading * self.prefill_tps))

    def observed(
        self, *, prompt_tokens: int, ttft_s: float, completion_tokens: int, total_s: float, weight: float = 0.3
    ) -> ModelSpeed:
        """These rates moved toward one real call's (exponential average); cache hits are ignored. Pass only
        the tokens the call had to read (``prompt_tokens=0`` for a call whose prompt an earlier one read): a
        first token under three times the estimate passes as a reading, and calls that mostly hit the cache
        once pulled a real ~150 tokens/s up to 706. A slower reading always counts, so such an estimate heals."""
        rates = {}
        if ttft_s > 0 and prompt_tokens > 0:
            prefill = prompt_tokens / ttft_s
            if prefill < _CACHE_HIT_RATIO * self.prefill_tps:
                rates["prefill_tps"] = _blend(self.prefill_tps, prefill, weight)
        writing = total_s - ttft_s
        if completion_tokens > 1 and writing > 0:
            decode = (completion_tokens - 1) / writing
            # Writing is never faster than reading on these machines: such a sample is tokens that arrived in
            # one burst (the server holds text back while it could still be a stop string or half a UTF-8
            # character), not a rate. A stored rate past the reading rate is one such burst from before this
            # check: the first plausible sample replaces it.
            if decode <= self.prefill_tps:
                plausible = self.decode_tps <= self.prefill_tps
                rates["decode_tps"] = _blend(self.decode_tps, decode, weight) if plausible else round(decode, 3)
        if completion_tokens > 0:
            rates["answer_tokens"] = _blend(self.answer_tokens, float(completion_tokens), weight)
        return replace(self, **rates, samples=self.samples + 1) if rates else self


def _blend(old: float, new: float, weight: float) -> float:
    return round((1 - weight) * old + weight * new, 3)


def machine_key(model: str, threads: int) -> str:
    """What a speed depends on: the model, the thread count, the CPU and the llama.cpp build (release and
    whether its ggml is the portable or a native one, see :mod:`ragidx.providers.native_runtime`)."""
    return f"{Path(model).name}|threads={threads}|{cpu_name()}|{runtime_id()}"


class SpeedLog:
    """Measured speeds in one JSON file, keyed by :func:`machine_key`. Thread-safe; a broken file is ignored.

    Example:
        >>> import tempfile
        >>> log = SpeedLog(Path(tempfile.mkdtemp()) / "speeds.json")
        >>> log.put("m|threads=2", ModelSpeed(30.0, 4.0))
        >>> log.get("m|threads=2").prefill_tps
        30.0
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def get(self, key: str) -> ModelSpeed | None:
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return ModelSpeed(**entry)
        except TypeError:
            return None

    def put(self, key: str, speed: ModelSpeed) -> None:
        with self._lock:
            data = self._read()
            data[key] = asdict(speed)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            tmp.replace(self.path)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def probe_speed(llm: Any, count_tokens: Any, *, prompt_tokens: int = 320, answer_tokens: int = 24) -> ModelSpeed:
    """Measure ``llm``'s prefill and decode rates with one streamed call (about 15 s for 1.5B on 2 cores).

    The prompt starts with a fresh nonce so no cached prefix shortens the reading.
    """
    unit = _PROBE_TEXT
    text = f"[{uuid.uuid4().hex}] " + unit * max(1, prompt_tokens // max(1, count_tokens(unit)))
    messages = [
        ChatMessage(role=MessageRole.USER, content=f"{text}\nRepeat the first sentence above, word for word."),
    ]
    sent = count_tokens(messages[0].content) + 10
    pieces: list[str] = []
    first: float | None = None
    t0 = time.perf_counter()
    for chunk in capped(llm, answer_tokens).stream_chat(messages, max_tokens=answer_tokens):
        if chunk.delta:
            if first is None:
                first = time.perf_counter() - t0
            pieces.append(chunk.delta)
    total = time.perf_counter() - t0
    ttft = first if first is not None else total
    written = max(1, count_tokens("".join(pieces)))
    decode = (written - 1) / (total - ttft) if written > 1 and total > ttft else 4.0
    speed = ModelSpeed(prefill_tps=round(sent / ttft, 3), decode_tps=round(decode, 3), samples=1)
    logger.info(
        "measured the local model: %.1f prompt tokens/s, %.1f answer tokens/s", speed.prefill_tps, speed.decode_tps
    )
    return speed


class AnswerDeadline:
    """An answer-time target turned into a prompt-token cap for the answer call, learning from real calls.

    Args:
        deadline_s: the whole answer's target, from the question to the last token.
        speed: the model's current rates.
        floor_tokens: never cap the prompt below this (below it answers get worse faster than they get quicker).
        ceiling_tokens: never let the prompt grow past this however fast the model reads (past it a small model
            answers worse, not better); None: no ceiling.
        log / key: where to keep refreshed rates (optional).

    Example:
        >>> d = AnswerDeadline(40.0, ModelSpeed(30.0, 4.0, answer_tokens=40.0), floor_tokens=256)
        >>> d.prompt_cap(elapsed_s=0.0)
        900
    """

    def __init__(
        self,
        deadline_s: float,
        speed: ModelSpeed,
        *,
        floor_tokens: int = 768,
        ceiling_tokens: int | None = None,
        log: SpeedLog | None = None,
        key: str = "",
    ) -> None:
        self.deadline_s = deadline_s
        self.speed = speed
        self.floor_tokens = floor_tokens
        self.ceiling_tokens = ceiling_tokens
        self.log = log
        self.key = key
        self._lock = threading.Lock()

    def prompt_cap(self, elapsed_s: float) -> int:
        """Prompt tokens the answer call may use, ``elapsed_s`` into the turn."""
        cap = max(self.floor_tokens, self.speed.prompt_tokens_within(self.deadline_s - elapsed_s))
        return cap if self.ceiling_tokens is None else min(cap, max(self.ceiling_tokens, self.floor_tokens))

    def observe(self, *, prompt_tokens: int, ttft_s: float, completion_tokens: int, total_s: float) -> None:
        with self._lock:
            self.speed = self.speed.observed(
                prompt_tokens=prompt_tokens, ttft_s=ttft_s, completion_tokens=completion_tokens, total_s=total_s
            )
            speed = self.speed
        if self.log is not None:
            try:
                self.log.put(self.key, speed)
            except OSError as exc:  # the cap still works from memory
                logger.warning("could not save the model's measured speed to %s: %s", self.log.path, exc)
