from __future__ import annotations

import pytest

from ragidx.providers.tokenizer import TokenCounter, load_encoding


def test_counts_offline_with_the_bundled_encodings() -> None:
    for name in ("cl100k_base", "o200k_base"):
        assert TokenCounter(name).count("Insert a table of contents.") > 3


def test_truncate_never_exceeds_the_limit_even_inside_multibyte_text() -> None:
    tok = TokenCounter()
    text = "Вставка оглавления в документ Writer 📄 " * 20
    for limit in (1, 2, 7, 50):
        cut = tok.truncate(text, limit)
        assert tok.count(cut) <= limit and text.startswith(cut)
    assert tok.truncate("short", 10) == "short" and tok.truncate("x", 0) == ""


def test_unbundled_encoding_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not bundled offline"):
        load_encoding("p50k_base")
