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


@pytest.mark.slow
def test_gguf_counter_uses_the_local_models_own_vocabulary() -> None:
    from ragidx.budget.counting import CachedTokenCounter
    from ragidx.providers.local_llm import assemble_gguf
    from ragidx.providers.tokenizer import GGUFTokenCounter

    qwen = GGUFTokenCounter(assemble_gguf("qwen2.5-0.5b"))
    text = "To insert a table of contents, choose Insert - Table of Contents and Index. Вставка оглавления."
    tokens = qwen.encode(text)
    assert tokens and qwen.decode(tokens) == text
    assert qwen.count(text) != TokenCounter().count(text)  # a different vocabulary really is used
    cut = qwen.truncate(text, 7)
    assert qwen.count(cut) <= 7 and text.startswith(cut)
    assert CachedTokenCounter.wrap(qwen).count(text * 3) == qwen.count(text * 3)  # the budget's cache delegates
