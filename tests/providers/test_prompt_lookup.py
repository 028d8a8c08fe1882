"""Prompt-lookup decoding: what the draft proposes, and that on a copy the local model writes the same text with it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragidx.providers.llama_server import PROMPT_LOOKUP_FLAG, pop_prompt_lookup
from ragidx.providers.local_llm import LocalLLMServer, assemble_gguf
from ragidx.providers.prompt_lookup import PromptLookupDraft, attach

KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


def ids(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.intc)


def test_the_draft_continues_the_latest_match_of_the_longest_suffix() -> None:
    draft = PromptLookupDraft(num_pred_tokens=2, max_ngram=3, min_ngram=2)
    # "1 2" occurs twice before the end; the later one (followed by 7 8) wins over the first (followed by 3 4)
    assert draft(ids(1, 2, 3, 4, 0, 1, 2, 7, 8, 9, 1, 2)).tolist() == [7, 8]
    # the 3-token suffix "9 1 2" matches only once, so it decides even though "1 2" alone is later elsewhere
    assert draft(ids(9, 1, 2, 5, 6, 1, 2, 7, 0, 9, 1, 2)).tolist() == [5, 6]


def test_the_draft_proposes_nothing_without_a_long_enough_match() -> None:
    draft = PromptLookupDraft(num_pred_tokens=4, min_ngram=2)
    assert draft(ids(1, 2, 3, 4, 5, 3)).size == 0  # "3" recurs, but one token predicts badly
    assert draft(ids(7)).size == 0
    assert draft(ids(1, 2, 1, 2)).tolist() == [1, 2]  # a match at the very end still has tokens after it


def test_bad_draft_settings_are_refused_with_the_rule() -> None:
    with pytest.raises(ValueError, match="num_pred_tokens >= 1"):
        PromptLookupDraft(0)
    with pytest.raises(ValueError, match="min_ngram <= max_ngram"):
        PromptLookupDraft(4, max_ngram=1, min_ngram=2)


def test_the_server_takes_its_own_flag_off_the_command_line() -> None:
    argv = ["x", "--model", "m.gguf", PROMPT_LOOKUP_FLAG, "8", "--port", "1"]
    assert pop_prompt_lookup(argv) == (["x", "--model", "m.gguf", "--port", "1"], 8)
    assert pop_prompt_lookup(["x", "--port", "1"]) == (["x", "--port", "1"], 0)
    with pytest.raises(SystemExit, match="whole number"):
        pop_prompt_lookup(["x", PROMPT_LOOKUP_FLAG, "many"])
    server = LocalLLMServer("qwen2.5-0.5b", prompt_lookup=6)
    server.port = 40124
    command = server.command(Path("m.gguf"))
    assert command[command.index(PROMPT_LOOKUP_FLAG) + 1] == "6"
    assert PROMPT_LOOKUP_FLAG not in LocalLLMServer("qwen2.5-0.5b").command(Path("m.gguf"))


@pytest.mark.slow
def test_greedy_text_is_the_same_with_the_draft_and_copied_tokens_are_accepted() -> None:
    from llama_cpp import Llama

    article = json.loads(KB.read_text(encoding="utf-8").splitlines()[0])["text"][:1500]
    prompt = (
        "<|im_start|>system\nCopy the article's first paragraph word for word.<|im_end|>\n"
        f"<|im_start|>user\n{article}<|im_end|>\n<|im_start|>assistant\n"
    )
    gguf = str(assemble_gguf("qwen2.5-0.5b"))
    texts: list[str] = []
    calls: list[int] = []  # the length of every batch read while the draft is on

    def counted(inner: Any) -> Any:
        def evaluate(tokens: Any) -> Any:
            calls.append(len(tokens))
            return inner(tokens)

        return evaluate

    for draft in (None, PromptLookupDraft(8)):
        llama = Llama(model_path=gguf, n_ctx=2048, n_threads=2, verbose=False)
        if draft is not None:
            attach(llama, draft)
            llama.eval = counted(llama.eval)  # type: ignore[method-assign]
        reply: Any = llama.create_completion(prompt, max_tokens=60, temperature=0.0)
        texts.append(reply["choices"][0]["text"])
    assert texts[0] == texts[1] and len(texts[0].split()) > 10
    assert max(calls[1:]) > 1  # some steps checked a drafted run of tokens, not one token at a time
