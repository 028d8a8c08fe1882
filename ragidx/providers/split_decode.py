"""Split decoding: the local model reads prompts with one weight layout and writes answers with another.

llama.cpp's CPU backend keeps Q4_K weights either as the GGUF file has them (``plain``) or re-laid out at load time
for its interleaved kernels (``repacked``: llama.cpp's "extra buffer types", which also hold Intel's AMX copies).
Which layout is faster depends on the work and the CPU. On the 2-core AVX-512 EPYC of the benchmarks page the plain
layout reads a prompt about 1.5 times as fast and the repacked one writes 1.2 to 1.4 times as fast (less after a
long prompt): no layout is best at both, and an answer is reading (the articles) and then writing.

``ragidx runtime native`` measures both layouts on the machine (:mod:`ragidx.providers.native_runtime`) and
records the faster one for each job. When they differ, the local server loads the model twice, once per layout,
and :class:`SplitContext` stands in for the ``Llama``'s context: a batch of more than :data:`WRITE_BATCH_MAX`
tokens (a prompt) runs on the reader, shorter ones (the tokens written one by one, or a short draft) on the
writer. Before a context runs, it is brought up to date by copying the other's sequence state into it when it
is behind (about 20 MB and 20 ms for an 800-token prompt with the 1.5B model). The cost is memory: the repacked
weights again and a second KV cache: the 1.5B model's server takes 2.3 GB instead of 1.4 GB (proportional
set size, 8K window).

The two layouts compute the same products in a different order, so their logits differ in the last bits: where
two tokens are nearly tied the other can win, and an answer may be worded differently, deterministically so
(``benchmarks/decoding_ab.py --setting split_decode`` counts how often).

Example:
    >>> with layout("plain"):              # a model loaded here keeps the file's layout  # doctest: +SKIP
    ...     reader = Llama(model_path, n_ctx=8192)
    >>> writer = Llama(model_path, n_ctx=8192)  # llama.cpp's default: repacked  # doctest: +SKIP
    >>> split(reader, writer).decodes           # the reader writes with the writer's context  # doctest: +SKIP
    {'reader': 0, 'writer': 0}
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

__all__ = ["LAYOUTS", "WRITE_BATCH_MAX", "Layout", "SplitContext", "layout", "split"]

Layout = Literal["plain", "repacked"]
LAYOUTS: tuple[Layout, ...] = ("plain", "repacked")

WRITE_BATCH_MAX = 16
"""Batches of at most this many tokens run on the writer: tokens written one at a time, a prompt-lookup draft, the
few template tokens an answer reads after its articles are cached. Longer batches are prompts: the reader's."""


@contextmanager
def layout(name: Layout) -> Iterator[None]:
    """Models loaded inside keep the weights ``plain`` or ``repacked`` (llama.cpp's extra buffer types; its default).
    ``Llama`` takes its model parameters from ``llama_model_default_params``, which this swaps for the duration."""
    if name not in LAYOUTS:
        raise ValueError(f"unknown weight layout {name!r}; the layouts are {', '.join(LAYOUTS)}")
    import llama_cpp.llama_cpp as lib

    default = lib.llama_model_default_params

    def params() -> Any:
        p = default()
        p.use_extra_bufts = name == "repacked"
        return p

    lib.llama_model_default_params = params
    try:
        yield
    finally:
        lib.llama_model_default_params = default


class SplitContext:
    """Stands in for a ``Llama``'s context (``llama._ctx``): long batches decode on ``reader``, short ones on
    ``writer``, each context first brought up to date from the other. Everything else (sizes, pooling, timings)
    is the reader's; the logits and the raw context the sampler reads are those of the context that ran last.

    ``decodes`` counts the batches each context ran and ``copies`` the state copies, for tests and benchmarks.
    """

    def __init__(self, reader: Any, writer: Any, *, write_batch_max: int = WRITE_BATCH_MAX) -> None:
        self.reader = reader
        self.writer = writer
        self.write_batch_max = write_batch_max
        self.active = reader
        self._contexts = {"reader": reader, "writer": writer}
        self._held = {"reader": 0, "writer": 0}  # how many leading tokens of the sequence each context holds
        self._buffer: ctypes.Array[ctypes.c_uint8] | None = None
        self.decodes = {"reader": 0, "writer": 0}
        self.copies = 0

    def __getattr__(self, name: str) -> Any:
        if name in {"reader", "writer", "active", "_contexts"}:  # not set yet: never ask the reader for them
            raise AttributeError(name)
        return getattr(self.reader, name)

    # --- what the sampler and Llama read from the context that ran last ----------------------------------
    @property
    def ctx(self) -> Any:
        return self.active.ctx

    def get_logits(self) -> Any:
        return self.active.get_logits()

    def get_logits_ith(self, i: int) -> Any:
        return self.active.get_logits_ith(i)

    # --- the sequence, kept the same in both --------------------------------------------------------------
    def kv_cache_clear(self) -> None:
        self.reader.kv_cache_clear()
        self.writer.kv_cache_clear()
        self._held = {"reader": 0, "writer": 0}

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        removed = self.reader.kv_cache_seq_rm(seq_id, p0, p1)
        removed = self.writer.kv_cache_seq_rm(seq_id, p0, p1) and removed
        start = max(p0, 0)
        self._held = {k: min(v, start) for k, v in self._held.items()}
        return bool(removed)

    def decode(self, batch: Any) -> None:
        n = int(batch.n_tokens())
        start = int(batch.batch.pos[0]) if n else 0
        name = "writer" if n <= self.write_batch_max else "reader"
        target = self._contexts[name]
        self._bring_up(name, start)
        target.decode(batch)
        self._held[name] = start + n
        self.decodes[name] += 1
        self.active = target

    def _bring_up(self, name: str, start: int) -> None:
        """Make context ``name`` hold exactly the sequence's first ``start`` tokens, copying the other's state."""
        held = self._held[name]
        if held == start:
            return
        target = self._contexts[name]
        if held > start:
            target.kv_cache_seq_rm(0, start, -1)
            self._held[name] = start
            return
        other_name = "reader" if name == "writer" else "writer"
        if self._held[other_name] < start:
            raise RuntimeError(
                f"split decoding lost the sequence: a batch starts at token {start}, but the reader holds "
                f"{self._held['reader']} and the writer {self._held['writer']} tokens"
            )
        self._copy(self._contexts[other_name], target)
        if self._held[other_name] > start:
            target.kv_cache_seq_rm(0, start, -1)
        self._held[name] = start

    def _copy(self, source: Any, target: Any) -> None:
        import llama_cpp.llama_cpp as lib

        size = int(lib.llama_state_seq_get_size(source.ctx, 0))
        if self._buffer is None or len(self._buffer) < size:
            self._buffer = (ctypes.c_uint8 * size)()
        got = int(lib.llama_state_seq_get_data(source.ctx, self._buffer, size, 0))
        target.kv_cache_seq_rm(0, 0, -1)
        if got == 0 or int(lib.llama_state_seq_set_data(target.ctx, self._buffer, got, 0)) == 0:
            raise RuntimeError("split decoding could not copy the sequence state between the two contexts")
        self.copies += 1


def split(reader: Any, writer: Any, *, write_batch_max: int = WRITE_BATCH_MAX) -> SplitContext:
    """Make ``reader`` (a ``Llama``) run its short batches on ``writer``'s context (another ``Llama`` of the same
    model file and context size, loaded with the other layout); ``writer`` is kept alive by the returned context,
    which replaces ``reader._ctx``. Returns that context."""
    if writer.n_ctx() != reader.n_ctx():
        raise ValueError(f"the writer's context holds {writer.n_ctx()} tokens, the reader's {reader.n_ctx()}")
    context = SplitContext(reader._ctx, writer._ctx, write_batch_max=write_batch_max)
    context.writer_llama = writer  # type: ignore[attr-defined]  # the writer's model must outlive its context
    reader._ctx = context
    return context
