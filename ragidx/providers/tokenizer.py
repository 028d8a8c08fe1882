"""Token counting offline: tiktoken with the encodings that ship inside llama-index-core.

``tiktoken.get_encoding`` downloads its BPE file on first use; llama-index-core carries
``cl100k_base`` and ``o200k_base`` in ``llama_index/core/_static/tiktoken_cache``, so we point
``TIKTOKEN_CACHE_DIR`` there before loading. Other models' tokenizers differ from tiktoken: the
context budget adds a safety margin on top of these counts.

A GGUF model's vocabulary (the local models') is counted by ``GGUFTokenCounter``: with tiktoken where
the vocabulary is one tiktoken can run exactly (Qwen2's, see :func:`gguf_encoding`), else with llama.cpp.

Example:
    >>> tok = TokenCounter()
    >>> tok.count("hello world")
    2
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

logger = logging.getLogger(__name__)

BUNDLED_ENCODINGS = ("cl100k_base", "o200k_base")
_PROBE = (
    'Choose Insert - Table of Contents and Index.\n\n  Tip:  the "Update" button (F9) isn\'t shown; '
    "it's under Tools > Update.\tКнопка «Обновить» в меню Сервис. Done  \r\n1999 items, 3.5 MB x\n "
)


def _bundled_cache_dir() -> Path:
    import llama_index.core

    return Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"


@lru_cache(maxsize=4)
def load_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Load a tiktoken encoding from the copy bundled with llama-index-core (no network)."""
    if name not in BUNDLED_ENCODINGS:
        raise ValueError(f"tokenizer {name!r} is not bundled offline; use one of {', '.join(BUNDLED_ENCODINGS)}")
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_bundled_cache_dir()))
    return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts and cuts text in tokens of one encoding (tiktoken). Cheap to build; loads on first use."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding_name = encoding
        self._enc: tiktoken.Encoding | None = None

    @property
    def _encoding(self) -> tiktoken.Encoding:
        if self._enc is None:
            self._enc = load_encoding(self.encoding_name)
        return self._enc

    def encode(self, text: str) -> list[int]:
        # Special tokens' text counts as plain text (what ``encode(text, disallowed_special=())`` does, faster).
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encode(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` with at most ``max_tokens`` tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        if len(tokens) <= max_tokens:
            return text
        cut = self.decode(tokens[:max_tokens])
        # Decoding a prefix can end inside a multi-byte character and re-encode longer: shrink until it fits.
        while cut and self.count(cut) > max_tokens:
            cut = cut[:-1]
        return cut

    def __call__(self, text: str) -> list[Any]:
        """LlamaIndex's tokenizer protocol: a callable returning a list of tokens."""
        return self.encode(text)


QWEN2_PATTERN = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
"""llama.cpp's pre-tokenizer regex for GGUF vocabularies with ``tokenizer.ggml.pre == "qwen2"``."""
GGUF_PATTERNS = {"qwen2": QWEN2_PATTERN}
"""Pre-tokenizers whose GGUF vocabularies are counted with tiktoken (see :func:`gguf_encoding`)."""
_GGUF_PROBES = (
    _PROBE,
    "def f(x):\n    return x  # 12345 678\n\n\n\tЁлка ёжик 😀👍🏽 naïve café ﬁ ½ ²\u00a0\u200b",
    "  SELECT count(*) FROM t WHERE a >= 10;\r\n-- it's 3.14159, isn't it?   \n",
)


_VOCABS: dict[str, Any] = {}
_ENCODINGS: dict[str, tiktoken.Encoding | None] = {}
_GGUF_LOCK = threading.RLock()
"""Guards the GGUF caches and llama.cpp's ``suppress_stdout_stderr``, which points the process's file descriptors 1
and 2 at /dev/null and back: two threads inside it at once restore each other's /dev/null, and the process's
output stayed silenced for good (four questions asked at once loaded the vocabulary four times)."""


def load_gguf_vocab(gguf_path: str) -> Any:
    """A GGUF model's vocabulary (llama.cpp ``vocab_only``: no weights), loaded once per process, by one thread.

    llama.cpp writes "n_ctx_seq (512) > n_ctx_train (0)" straight to stderr while it makes the context of a
    vocabulary-only model (which has no training context): nothing a user can act on, so it is silenced.
    """
    vocab = _VOCABS.get(gguf_path)
    if vocab is not None:
        return vocab
    with _GGUF_LOCK:
        if gguf_path in _VOCABS:
            return _VOCABS[gguf_path]
        from llama_cpp import Llama
        from llama_cpp._utils import suppress_stdout_stderr

        with suppress_stdout_stderr(disable=False):
            vocab = Llama(model_path=gguf_path, vocab_only=True, verbose=False)
        atexit.register(vocab.close)  # while llama_cpp is still loaded (its finalizer fails at shutdown)
        _VOCABS[gguf_path] = vocab
        return vocab


def _llama_tokens(vocab: Any, text: str) -> list[int]:
    """llama.cpp's tokens of ``text`` (no BOS, special-token text as plain text), in one call."""
    import llama_cpp

    data = text.encode("utf-8")
    size = len(data) + 1  # a token is at least one byte
    out = (llama_cpp.llama_token * size)()
    n = llama_cpp.llama_tokenize(vocab._model.vocab, data, len(data), out, size, False, False)
    if n < 0:
        raise RuntimeError(f"llama.cpp failed to tokenize {len(data)} bytes")
    return out[:n]


def gguf_encoding(gguf_path: str) -> tiktoken.Encoding | None:
    """A tiktoken encoding that tokenizes exactly as llama.cpp does with a GGUF model's vocabulary, or
    ``None`` where that is not known to hold.

    A byte-level BPE vocabulary (``tokenizer.ggml.model == "gpt2"``) whose token ids are its merge
    ranks, with a pre-tokenizer regex from :data:`GGUF_PATTERNS`, is what tiktoken implements: its
    ``CoreBPE`` then gives llama.cpp's tokens 5-7 times faster (``benchmarks/gguf_tokenizer.py`` compares
    them over a whole knowledge base; Qwen2.5's vocabulary: 0 differences). One known difference, an
    over-count (safe for a budget): llama.cpp matches a user-defined token's text (Qwen's
    ``<tool_call>``) as one token, tiktoken as its pieces. Built from the vocabulary once per process
    (one to two seconds for 152K tokens, most of it loading the vocabulary into llama.cpp) and checked
    against llama.cpp on probe texts; a mismatch logs a warning and returns ``None`` (the counter then
    asks llama.cpp for every count).
    """
    if gguf_path in _ENCODINGS:
        return _ENCODINGS[gguf_path]
    with _GGUF_LOCK:  # built once: one to two seconds that four first questions at once would each spend
        if gguf_path not in _ENCODINGS:
            _ENCODINGS[gguf_path] = _build_gguf_encoding(gguf_path)
        return _ENCODINGS[gguf_path]


def _build_gguf_encoding(gguf_path: str) -> tiktoken.Encoding | None:
    name = f"gguf:{Path(gguf_path).stem}"
    import ctypes

    import llama_cpp

    vocab = load_gguf_vocab(gguf_path)
    meta = getattr(vocab, "metadata", None) or {}
    pre = str(meta.get("tokenizer.ggml.pre"))
    pattern = GGUF_PATTERNS.get(pre)
    if meta.get("tokenizer.ggml.model") != "gpt2" or pattern is None:
        return None
    handle = vocab._model.vocab
    normal, control = llama_cpp.LLAMA_TOKEN_ATTR_NORMAL, llama_cpp.LLAMA_TOKEN_ATTR_CONTROL
    size = 256
    buf = ctypes.create_string_buffer(size)
    ranks: dict[bytes, int] = {}
    for token in range(llama_cpp.llama_vocab_n_tokens(handle)):
        attr = llama_cpp.llama_vocab_get_attr(handle, token)
        if not attr & normal or attr & control:
            continue
        n = llama_cpp.llama_token_to_piece(handle, token, buf, size, 0, False)
        if n < 0:  # longer than the buffer
            big = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(handle, token, big, -n, 0, False)
            piece = big.raw[:n]
        else:
            piece = buf.raw[:n]
        if piece:
            ranks.setdefault(piece, token)
    try:
        enc = tiktoken.Encoding(name=name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
        same = all(enc.encode_ordinary(text) == _llama_tokens(vocab, text) for text in _GGUF_PROBES)
    except Exception as exc:  # e.g. a vocabulary without all 256 byte tokens
        logger.warning("cannot count %s with tiktoken (%s); counting with llama.cpp (slower)", gguf_path, exc)
        return None
    if not same:
        logger.warning("tiktoken and llama.cpp tokenize %s differently; counting with llama.cpp (slower)", gguf_path)
        return None
    return enc


class GGUFTokenCounter(TokenCounter):
    """Counts with a GGUF model's own vocabulary (vocabulary only: fast, no weights loaded).

    tiktoken's encodings undercount Qwen's tokens by 10-15% on help-centre text, enough to overflow a
    small window; the local model's budget therefore counts with the model's own tokenizer. Where the
    vocabulary allows (:func:`gguf_encoding`: Qwen2 and 2.5), tiktoken runs it with llama.cpp's exact
    results; otherwise llama.cpp counts (about 2.4 µs per token here). The vocabulary is loaded once per
    process and shared by all counters of the same file.

    Example:
        >>> GGUFTokenCounter("/models/qwen.gguf").encoding_name
        'gguf:qwen'
    """

    def __init__(self, gguf_path: str | Path) -> None:
        super().__init__("cl100k_base")
        self.gguf_path = str(gguf_path)
        self.encoding_name = f"gguf:{Path(self.gguf_path).stem}"

    @property
    def vocab(self) -> Any:
        return load_gguf_vocab(self.gguf_path)

    @property
    def fast_encoding(self) -> tiktoken.Encoding | None:
        """The vocabulary as a tiktoken encoding, or ``None`` (llama.cpp counts)."""
        return gguf_encoding(self.gguf_path)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        enc = self.fast_encoding
        return enc.encode_ordinary(text) if enc is not None else _llama_tokens(self.vocab, text)

    def decode(self, tokens: list[int]) -> str:
        enc = self.fast_encoding
        if enc is not None:
            return enc.decode(tokens)
        return bytes(self.vocab.detokenize(tokens)).decode("utf-8", errors="ignore")
