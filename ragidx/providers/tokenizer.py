"""Token counting offline: tiktoken with the encodings that ship inside llama-index-core.

``tiktoken.get_encoding`` downloads its BPE file on first use; llama-index-core carries
``cl100k_base`` and ``o200k_base`` in ``llama_index/core/_static/tiktoken_cache``, so we point
``TIKTOKEN_CACHE_DIR`` there before loading. Other models' tokenizers differ from tiktoken: the
context budget adds a safety margin on top of these counts.

Example:
    >>> tok = TokenCounter()
    >>> tok.count("hello world")
    2
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

BUNDLED_ENCODINGS = ("cl100k_base", "o200k_base")


def _bundled_cache_dir() -> Path:
    import llama_index.core

    return Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"


@lru_cache(maxsize=4)
def load_encoding(name: str = "cl100k_base") -> tiktoken.Encoding:
    """Load a tiktoken encoding from the copy bundled with llama-index-core (no network)."""
    if name not in BUNDLED_ENCODINGS:
        raise ValueError(
            f"tokenizer {name!r} is not bundled offline; use one of {', '.join(BUNDLED_ENCODINGS)}"
        )
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(_bundled_cache_dir()))
    return tiktoken.get_encoding(name)


class TokenCounter:
    """Counts and cuts text in tokens of one encoding. Cheap to build; loads on first use."""

    def __init__(self, encoding: str = "cl100k_base") -> None:
        self.encoding_name = encoding
        self._enc: tiktoken.Encoding | None = None

    @property
    def _encoding(self) -> tiktoken.Encoding:
        if self._enc is None:
            self._enc = load_encoding(self.encoding_name)
        return self._enc

    def encode(self, text: str) -> list[int]:
        return self._encoding.encode(text, disallowed_special=())

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


class GGUFTokenCounter(TokenCounter):
    """Counts with a GGUF model's own vocabulary (llama.cpp, vocabulary only: fast, no weights loaded).

    tiktoken's encodings undercount Qwen's tokens by 10-15% on help-centre text, enough to overflow a
    small window; the local model's budget therefore counts with the model's own tokenizer.

    Example:
        >>> GGUFTokenCounter("/models/qwen.gguf").encoding_name
        'gguf:qwen'
    """

    def __init__(self, gguf_path: str | Path) -> None:
        super().__init__("cl100k_base")
        self.gguf_path = str(gguf_path)
        self.encoding_name = f"gguf:{Path(self.gguf_path).stem}"
        self._vocab: Any = None

    @property
    def vocab(self) -> Any:
        if self._vocab is None:
            from llama_cpp import Llama

            self._vocab = Llama(model_path=self.gguf_path, vocab_only=True, verbose=False)
        return self._vocab

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self.vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def decode(self, tokens: list[int]) -> str:
        return bytes(self.vocab.detokenize(tokens)).decode("utf-8", errors="ignore")
