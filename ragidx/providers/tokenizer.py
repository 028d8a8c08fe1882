"""Token counting offline: tiktoken with the encodings that ship inside llama-index-core.

``tiktoken.get_encoding`` downloads its BPE file on first use; llama-index-core carries
``cl100k_base`` and ``o200k_base`` in ``llama_index/core/_static/tiktoken_cache``, so we point
``TIKTOKEN_CACHE_DIR`` there before loading. Other models' tokenizers differ from tiktoken: the
context budget adds a safety margin on top of these counts.

Word-additive counters: both tiktoken encodings and Qwen's GGUF vocabulary split text with a regex
before byte-pair merging, and no regex piece holds a space after any other character but whitespace;
so where ``a`` ends with a non-whitespace character and ``b`` starts with a space,
``count(a + b) == count(a) + count(b)`` exactly (see :func:`space_segments`). ``word_additive`` says
whether a counter has this property; the budget then counts an edited text by its edits
(``count_edited``) instead of tokenizing it again.

A GGUF model's vocabulary (the local models') is counted by ``GGUFTokenCounter``: with tiktoken where
the vocabulary is one tiktoken can run exactly (Qwen2's, see :func:`gguf_encoding`), else with llama.cpp.

Example:
    >>> tok = TokenCounter()
    >>> tok.count("hello world")
    2
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import logging
import os
import re
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

logger = logging.getLogger(__name__)

BUNDLED_ENCODINGS = ("cl100k_base", "o200k_base")
WORD_ADDITIVE_ENCODINGS = frozenset(BUNDLED_ENCODINGS)
"""tiktoken encodings whose pre-tokenizer regex never puts a space after a non-space in one piece."""

_SPACE_AFTER_SPACE = re.compile(r"\s ")
_CUT_BEFORE_SPACE = re.compile(r"(?<=\S) ")
_PROBE = (
    'Choose Insert - Table of Contents and Index.\n\n  Tip:  the "Update" button (F9) isn\'t shown; '
    "it's under Tools > Update.\tКнопка «Обновить» в меню Сервис. Done  \r\n1999 items, 3.5 MB x\n "
)


def space_segments(text: str) -> list[str]:
    """``text`` cut before every space that follows a non-whitespace character, that space dropped:
    ``text == segments[0] + "".join(" " + s for s in segments[1:])``.

    Why a word-additive counter's ``count(text)`` is ``count(segments[0])`` plus ``count(" " + s)`` for
    the others: tiktoken's ``cl100k_base`` / ``o200k_base`` patterns and Qwen2's cut text into regex pieces
    before byte-pair merging, and a space inside a piece is either its first character or follows
    whitespace; the patterns look at nothing before a piece, and their one lookahead (``\\s+(?!\\S)``)
    ends whitespace-only pieces. So the pieces of ``text`` are those of its parts, and so are the tokens.

    Example:
        >>> space_segments("Open the menu.\\nChoose  it")
        ['Open', 'the', 'menu.\\nChoose', ' it']
    """
    if _SPACE_AFTER_SPACE.search(text) is None:
        return text.split(" ")  # every space follows a non-space (or starts the text): cut at each
    return _CUT_BEFORE_SPACE.split(text)


_ADDITIVE_CHECKED: dict[str, bool] = {}


def _checked_additive(kind: str, counter: TokenCounter) -> bool:
    """``_is_word_additive(counter)``, checked once per encoding or vocabulary (``kind``)."""
    additive = _ADDITIVE_CHECKED.get(kind)
    if additive is None:
        additive = _ADDITIVE_CHECKED[kind] = _is_word_additive(counter)
    return additive


def _is_word_additive(counter: TokenCounter) -> bool:
    """Spot check of the property on a probe text (guards a tokenizer whose pre-tokenizer changed)."""
    head, *rest = space_segments(_PROBE)
    return len(rest) > 10 and counter.count(_PROBE) == counter.count(head) + sum(counter.count(" " + s) for s in rest)


def _edited_window(old: str, new: str) -> tuple[int, int, int]:
    """``(start, old_end, new_end)``: ``old[:start] == new[:start]``, ``old[old_end:] == new[new_end:]``,
    the edit lies between, and ``start`` and the ends are 0, the text's end, or a space after a
    non-space whose neighbour on the outer side is shared too (so both texts cut there alike)."""
    shortest, n_old, n_new = min(len(old), len(new)), len(old), len(new)
    lo, hi = 0, shortest  # common prefix length, by halving; only the untested part is compared (in C)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new.startswith(old[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    prefix = lo
    lo, hi = 0, shortest - prefix  # common suffix, not overlapping the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if new.endswith(old[n_old - mid : n_old - lo], 0, n_new - lo):
            lo = mid
        else:
            hi = mid - 1
    suffix = lo
    start = old.rfind(" ", 0, prefix)  # old[start] and old[start - 1] both in the shared prefix
    while start > 0 and old[start - 1].isspace():
        start = old.rfind(" ", 0, start)
    start = max(start, 0)
    end = old.find(" ", len(old) - suffix + 1)  # old[end - 1] and old[end] both in the shared suffix
    while end != -1 and old[end - 1].isspace():
        end = old.find(" ", end + 1)
    if end == -1:
        return start, len(old), len(new)
    return start, end, end - len(old) + len(new)


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
        self._additive: bool | None = None

    @property
    def _encoding(self) -> tiktoken.Encoding:
        if self._enc is None:
            self._enc = load_encoding(self.encoding_name)
        return self._enc

    @property
    def _tiktoken_encode(self) -> bool:
        """Whether ``encode`` is this class's (tiktoken's), not a subclass's own tokenizer."""
        return type(self).encode is TokenCounter.encode

    @property
    def word_additive(self) -> bool:
        """Whether ``count(a + b) == count(a) + count(b)`` when ``a`` ends in a letter and ``b`` starts
        with a space (see :func:`space_segments`): true for the bundled tiktoken encodings, false for a
        subclass that counts its own way unless it says otherwise."""
        if self._additive is None:
            own = self._tiktoken_encode and type(self).count is TokenCounter.count
            self._additive = (
                own and self.encoding_name in WORD_ADDITIVE_ENCODINGS and _checked_additive(self.encoding_name, self)
            )
        return self._additive

    def encode(self, text: str) -> list[int]:
        # Special tokens' text counts as plain text (what ``encode(text, disallowed_special=())`` does, faster).
        return self._encoding.encode_ordinary(text)

    def decode(self, tokens: list[int]) -> str:
        return self._encoding.decode(tokens)

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encode(text))

    def count_edited(self, old: str, old_count: int, new: str) -> int:
        """``count(new)``, given ``old_count == count(old)`` for a text that differs from ``new`` in one
        region: a word-additive counter counts only that region, widened to the nearest cuts before a
        space (:func:`space_segments`) inside the parts both texts share."""
        if not self.word_additive:
            return self.count(new)
        start, old_end, new_end = _edited_window(old, new)
        return old_count - self.count(old[start:old_end]) + self.count(new[start:new_end])

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


@lru_cache(maxsize=4)
def load_gguf_vocab(gguf_path: str) -> Any:
    """A GGUF model's vocabulary (llama.cpp ``vocab_only``: no weights), loaded once per process.

    llama.cpp writes "n_ctx_seq (512) > n_ctx_train (0)" straight to stderr while it makes the context of a
    vocabulary-only model (which has no training context): nothing a user can act on, so it is silenced.
    """
    from llama_cpp import Llama
    from llama_cpp._utils import suppress_stdout_stderr

    with suppress_stdout_stderr(disable=False):
        vocab = Llama(model_path=gguf_path, vocab_only=True, verbose=False)
    atexit.register(vocab.close)  # while llama_cpp is still loaded (its finalizer fails at shutdown)
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


VOCAB_CACHE_FORMAT = "ragidx-gguf-vocab 1"
"""First line of a cached vocabulary file (a new format gets new files)."""


def default_vocab_cache_dir() -> Path:
    """Where vocabularies read from GGUF files are kept for the next process: ``~/.cache/ragidx/vocab``."""
    return Path.home() / ".cache" / "ragidx" / "vocab"


def _vocab_cache_file(gguf_path: str, cache_dir: Path) -> Path:
    """The cache file of one GGUF file as it is now (its size and modification time are in the name)."""
    st = os.stat(gguf_path)
    return cache_dir / f"{Path(gguf_path).stem}-{st.st_size}-{st.st_mtime_ns}.tiktoken"


def _pattern_id(pattern: str) -> str:
    """The pattern's hash and the llama.cpp release it was checked against (either changing means the
    vocabulary is read and checked again)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        llama = version("llama_cpp_python")
    except PackageNotFoundError:
        llama = "none"
    return f"{hashlib.sha256(pattern.encode('utf-8')).hexdigest()[:16]}/llama-cpp-python-{llama}"


def _read_vocab_cache(path: Path) -> tuple[str, dict[bytes, int]] | None:
    """``(pre-tokenizer name, ranks)`` from a cache file written by :func:`_write_vocab_cache` for the
    pattern the code has now; ``None`` when it is missing, stale, damaged (its body's SHA-256 is in the
    header) or unreadable: it is then rebuilt."""
    try:
        with open(path, "rb") as f:
            header = f.readline().decode("ascii").split()
            body = f.read()
        *fmt, pre, pattern_id, digest = header
        pattern = GGUF_PATTERNS.get(pre)
        if " ".join(fmt) != VOCAB_CACHE_FORMAT or pattern is None or _pattern_id(pattern) != pattern_id:
            return None
        if hashlib.sha256(body).hexdigest() != digest:  # cut short or damaged
            return None
        ranks = {base64.b64decode(piece): int(rank) for piece, rank in (line.split() for line in body.splitlines())}
    except (OSError, ValueError, UnicodeError):
        return None
    return (pre, ranks) if len(ranks) >= 256 else None


def _write_vocab_cache(path: Path, pre: str, ranks: dict[bytes, int]) -> None:
    """Write the checked vocabulary for the next process (atomically; a read-only disk only costs speed)."""
    body = b"".join(base64.b64encode(piece) + b" %d\n" % rank for piece, rank in ranks.items())
    header = f"{VOCAB_CACHE_FORMAT} {pre} {_pattern_id(GGUF_PATTERNS[pre])} {hashlib.sha256(body).hexdigest()}\n"
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(header.encode("ascii") + body)
        os.replace(tmp, path)
    except OSError as exc:
        logger.info("cannot cache the vocabulary of %s in %s (%s); it is read again next time", path.stem, path, exc)
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


@lru_cache(maxsize=4)
def gguf_encoding(gguf_path: str, cache_dir: str | None = None) -> tiktoken.Encoding | None:
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
    asks llama.cpp for every count). A vocabulary that passed is kept in ``cache_dir`` (default
    :func:`default_vocab_cache_dir`), so later processes build the encoding from that file (a quarter
    of a second) without loading llama.cpp; the file is tied to the GGUF file's size and modification
    time, the pre-tokenizer pattern and the llama-cpp-python release, and is rebuilt when one changes.
    """
    name = f"gguf:{Path(gguf_path).stem}"
    try:
        cache_file: Path | None = _vocab_cache_file(gguf_path, Path(cache_dir or default_vocab_cache_dir()))
    except OSError:  # no such file: llama.cpp says so below
        cache_file = None
    cached = _read_vocab_cache(cache_file) if cache_file is not None else None
    if cached is not None:
        cached_pre, cached_ranks = cached
        try:
            return tiktoken.Encoding(
                name=name, pat_str=GGUF_PATTERNS[cached_pre], mergeable_ranks=cached_ranks, special_tokens={}
            )
        except Exception as exc:  # a damaged file that still parsed: build it again below
            logger.info("ignoring the cached vocabulary %s (%s)", cache_file, exc)
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
    if cache_file is not None:
        _write_vocab_cache(cache_file, pre, ranks)
    return enc


class GGUFTokenCounter(TokenCounter):
    """Counts with a GGUF model's own vocabulary (vocabulary only: fast, no weights loaded).

    tiktoken's encodings undercount Qwen's tokens by 10-15% on help-centre text, enough to overflow a
    small window; the local model's budget therefore counts with the model's own tokenizer. Where the
    vocabulary allows (:func:`gguf_encoding`: Qwen2 and 2.5), tiktoken runs it with llama.cpp's exact
    results; otherwise llama.cpp counts (about 2.4 µs per token here). The vocabulary is loaded once per
    process and shared by all counters of the same file; ``vocab_cache_dir`` keeps it for the next
    process (default :func:`default_vocab_cache_dir`).

    Example:
        >>> GGUFTokenCounter("/models/qwen.gguf").encoding_name
        'gguf:qwen'
    """

    def __init__(self, gguf_path: str | Path, *, vocab_cache_dir: str | Path | None = None) -> None:
        super().__init__("cl100k_base")
        self.gguf_path = str(gguf_path)
        self.vocab_cache_dir = str(vocab_cache_dir) if vocab_cache_dir is not None else None
        self.encoding_name = f"gguf:{Path(self.gguf_path).stem}"

    @property
    def vocab(self) -> Any:
        return load_gguf_vocab(self.gguf_path)

    @property
    def fast_encoding(self) -> tiktoken.Encoding | None:
        """The vocabulary as a tiktoken encoding, or ``None`` (llama.cpp counts)."""
        return gguf_encoding(self.gguf_path, self.vocab_cache_dir)

    @property
    def word_additive(self) -> bool:
        """True where tiktoken runs the vocabulary with Qwen2's regex (spaces split as in cl100k's)."""
        if self._additive is None:
            self._additive = self.fast_encoding is not None and _checked_additive(f"gguf:{self.gguf_path}", self)
        return self._additive

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
