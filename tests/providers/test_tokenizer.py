from __future__ import annotations

import json

import pytest

from ragidx.providers import tokenizer
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
    from ragidx.providers.local_llm import assemble_gguf
    from ragidx.providers.tokenizer import GGUFTokenCounter

    qwen = GGUFTokenCounter(assemble_gguf("qwen2.5-0.5b"))
    text = "To insert a table of contents, choose Insert - Table of Contents and Index. Вставка оглавления."
    tokens = qwen.encode(text)
    assert tokens and qwen.decode(tokens) == text
    assert qwen.count(text) != TokenCounter().count(text)  # a different vocabulary really is used
    cut = qwen.truncate(text, 7)
    assert qwen.count(cut) <= 7 and text.startswith(cut)


# Texts that stress the pre-tokenizers' whitespace rules: runs of spaces, spaces after line breaks and
# tabs, punctuation before breaks, contractions, digits, Cyrillic, emoji, JSON escapes.
TRICKY = [
    'Choose Insert - Table of Contents and Index.\n\n  Tip:  the "Update" button (F9) isn\'t shown;',
    "a  b   c    d\n  e\t f \r\n g\u00a0 h\u2003 i",
    "It's 1999-12-31, 3.5 MB; don't   panic!!  ...   \n\n\n   end  ",
    "Кнопка «Обновить» в меню Сервис.  Готово 📄 \n - пункт",
    json.dumps({"content": 'line one\nline "two"\t tab \\ slash', "title": "A  B"}, ensure_ascii=False),
    " leading space",
    "trailing space ",
    "   ",
    "word",
]


def test_encode_treats_special_token_text_as_plain_text() -> None:
    tok = TokenCounter()
    text = "Say <|endoftext|> and <|fim_prefix|> literally."
    assert tok.encode(text) == tok._encoding.encode(text, disallowed_special=())


@pytest.mark.slow
def test_gguf_counter_tokenizes_exactly_as_llama_cpp() -> None:
    from ragidx.providers.local_llm import assemble_gguf
    from ragidx.providers.tokenizer import GGUFTokenCounter, _llama_tokens

    qwen = GGUFTokenCounter(assemble_gguf("qwen2.5-0.5b"))
    assert qwen.fast_encoding is not None
    for text in TRICKY:
        assert (
            qwen.encode(text)
            == _llama_tokens(qwen.vocab, text)
            == list(qwen.vocab.tokenize(text.encode("utf-8"), add_bos=False, special=False))
        )
    # A user-defined token's text is one token to llama.cpp, its pieces to tiktoken: an over-count, never under.
    assert qwen.count("a <tool_call> b") > len(_llama_tokens(qwen.vocab, "a <tool_call> b"))
    assert GGUFTokenCounter(qwen.gguf_path).vocab is qwen.vocab  # loaded once per process


@pytest.mark.slow
def test_gguf_counter_falls_back_to_llama_cpp_where_tiktoken_would_differ(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from ragidx.providers.local_llm import assemble_gguf

    path = str(assemble_gguf("qwen2.5-0.5b"))
    # Without the rule that leaves a run of spaces' last space to the next word, "a  b" splits differently.
    monkeypatch.setitem(tokenizer.GGUF_PATTERNS, "qwen2", tokenizer.QWEN2_PATTERN.replace(r"\s+(?!\S)|", ""))
    monkeypatch.setattr(tokenizer, "_ENCODINGS", {})  # built again, with the changed pattern
    with caplog.at_level("WARNING", logger="ragidx.providers.tokenizer"):
        slow = tokenizer.GGUFTokenCounter(path)
        assert slow.fast_encoding is None
    assert "tokenize" in caplog.text and "llama.cpp" in caplog.text
    text = "Version  1999 of 3.14159 " + TRICKY[1]
    assert slow.encode(text) == tokenizer._llama_tokens(slow.vocab, text)
    assert slow.decode(slow.encode(text)) == text


def test_loading_a_vocabulary_prints_nothing_a_user_cannot_act_on() -> None:
    """llama.cpp's "n_ctx_seq (512) > n_ctx_train (0)" used to reach the terminal of every `ragidx ask`."""
    import subprocess
    import sys

    from ragidx.providers.local_llm import assemble_gguf

    code = (
        "import sys; from ragidx.providers.tokenizer import load_gguf_vocab; "
        "v = load_gguf_vocab(sys.argv[1]); print(v.n_vocab())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(assemble_gguf("qwen2.5-0.5b"))], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and int(done.stdout.strip()) > 100_000  # loaded, and its output still works
    assert "n_ctx" not in done.stderr and "llama" not in done.stderr, done.stderr


def test_four_threads_loading_the_vocabulary_at_once_leave_the_output_working() -> None:
    """llama.cpp's ``suppress_stdout_stderr`` points file descriptors 1 and 2 at /dev/null while the vocabulary
    loads; four threads inside it at once left them there for good (4 of 5 runs), and every later line was lost."""
    import subprocess
    import sys

    from ragidx.providers.local_llm import assemble_gguf

    code = (
        "import sys, threading; from ragidx.providers.tokenizer import load_gguf_vocab, gguf_encoding\n"
        "got = []\n"
        "def load(): got.append((load_gguf_vocab(sys.argv[1]), gguf_encoding(sys.argv[1])))\n"
        "threads = [threading.Thread(target=load) for _ in range(4)]\n"
        "[t.start() for t in threads]; [t.join() for t in threads]\n"
        "print(len(got), len({id(v) for v, _ in got}), len({id(e) for _, e in got}), flush=True)\n"
        "print('still here', file=sys.stderr, flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(assemble_gguf("qwen2.5-0.5b"))], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "1", "1"]  # four loads, one vocabulary and one encoding between them
    assert "still here" in done.stderr
