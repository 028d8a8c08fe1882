"""Split decoding: prompts read on one context, answers written on another, the sequence kept the same in both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragidx.providers.llama_server import LAYOUTS_FLAG, pop_layouts
from ragidx.providers.local_llm import LocalLLMServer, assemble_gguf
from ragidx.providers.split_decode import SplitContext, layout, split

KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


class Batch:
    """The two things SplitContext reads of a llama-cpp-python batch: its length and its first position."""

    def __init__(self, start: int, n: int) -> None:
        self.n = n
        self.batch = type("raw", (), {"pos": [start]})()

    def n_tokens(self) -> int:
        return self.n


class Context:
    """A context that records the tokens it holds (positions only)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ctx = name
        self.held = 0
        self.ran: list[tuple[int, int]] = []

    def decode(self, batch: Batch) -> None:
        start = batch.batch.pos[0]
        assert start == self.held, f"{self.name} asked to decode at {start} while holding {self.held}"
        self.held = start + batch.n
        self.ran.append((start, batch.n))

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        self.held = min(self.held, max(p0, 0))
        return True

    def kv_cache_clear(self) -> None:
        self.held = 0

    def n_ctx(self) -> int:
        return 4096


def copying(context: SplitContext) -> SplitContext:
    """``context`` with the state copy done on the fakes (the real one goes through llama.cpp's state API)."""

    def copy(source: Context, target: Context) -> None:
        target.held = source.held
        context.copies += 1

    context._copy = copy  # type: ignore[method-assign]
    return context


def test_prompts_run_on_the_reader_and_written_tokens_on_the_writer() -> None:
    reader, writer = Context("reader"), Context("writer")
    split = copying(SplitContext(reader, writer))
    split.kv_cache_seq_rm(-1, 0, -1)
    split.decode(Batch(0, 700))  # the prompt
    assert split.ctx == "reader"  # the sampler reads the first token's logits from the reader
    for position in range(700, 705):  # five tokens written
        split.decode(Batch(position, 1))
        assert split.ctx == "writer"
    assert reader.ran == [(0, 700)] and len(writer.ran) == 5
    assert split.copies == 1 and writer.held == 705 and reader.held == 700  # one copy, after the prompt


def test_a_prompt_that_shares_written_tokens_is_read_after_the_writer_state_is_copied_back() -> None:
    reader, writer = Context("reader"), Context("writer")
    split = copying(SplitContext(reader, writer))
    split.decode(Batch(0, 700))
    for position in range(700, 760):
        split.decode(Batch(position, 1))
    # the next call's prompt repeats the whole reply (a conversation) and adds 100 tokens: the reader must first
    # hold the 60 written tokens, so it takes the writer's state
    split.kv_cache_seq_rm(-1, 760, -1)
    split.decode(Batch(760, 100))
    assert reader.ran[-1] == (760, 100) and split.copies == 2
    # a prompt that shares only the articles: both drop what follows them, and the reader needs no copy
    split.kv_cache_seq_rm(-1, 650, -1)
    assert reader.held == writer.held == 650
    split.decode(Batch(650, 120))
    assert split.copies == 2 and reader.ran[-1] == (650, 120)


def test_a_short_batch_is_written_and_a_long_one_read() -> None:
    reader, writer = Context("reader"), Context("writer")
    split = copying(SplitContext(reader, writer, write_batch_max=4))
    split.decode(Batch(0, 5))
    split.decode(Batch(5, 4))  # a drafted run of tokens: the writer's
    assert reader.ran == [(0, 5)] and writer.ran == [(5, 4)]


def test_a_lost_sequence_is_an_error_not_a_wrong_answer() -> None:
    reader, writer = Context("reader"), Context("writer")
    split = copying(SplitContext(reader, writer))
    with pytest.raises(RuntimeError, match="lost the sequence"):
        split.decode(Batch(10, 1))  # neither context holds the 10 tokens before it


def test_everything_else_is_the_readers() -> None:
    split = SplitContext(Context("reader"), Context("writer"))
    assert split.n_ctx() == 4096
    with pytest.raises(ValueError, match="unknown weight layout"), layout("sideways"):  # type: ignore[arg-type]
        pass


def test_the_server_takes_the_layouts_off_the_command_line() -> None:
    argv = ["x", "--model", "m.gguf", LAYOUTS_FLAG, "plain,repacked", "--port", "1"]
    assert pop_layouts(argv) == (["x", "--model", "m.gguf", "--port", "1"], ("plain", "repacked"))
    assert pop_layouts(["x", "--port", "1"]) == (["x", "--port", "1"], None)
    for bad in ("plain", "plain,sideways", "plain,plain,plain"):
        with pytest.raises(SystemExit, match="READ,WRITE"):
            pop_layouts(["x", LAYOUTS_FLAG, bad])


def test_the_local_server_writes_in_the_measured_layout_unless_told_not_to() -> None:
    def command(**kwargs: Any) -> list[str]:
        server = LocalLLMServer("qwen2.5-0.5b", **kwargs)
        server.port = 40125
        return server.command(Path("m.gguf"))

    assert command(layouts=("plain", "repacked"))[-2:] == [LAYOUTS_FLAG, "plain,repacked"]
    assert command(layouts=("plain", "repacked"), split_decode=False)[-2:] == [LAYOUTS_FLAG, "plain,plain"]


FOLLOW_UP = (
    "Thank you. Now say in one word which part of LibreOffice this article is about, so that I know where to "
    "look for it in the menus."
)  # longer than WRITE_BATCH_MAX tokens: read by the reader, after the writer's reply


def chat_prompt(*turns: tuple[str, str]) -> str:
    return "".join(f"<|im_start|>{role}\n{text}<|im_end|>\n" for role, text in turns) + "<|im_start|>assistant\n"


@pytest.mark.slow
def test_split_decoding_writes_what_one_model_writes_and_follows_a_conversation() -> None:
    """Both contexts in the same layout: the split must give exactly one model's text, on a first question and on a
    follow-up whose prompt holds the first reply (so the reader takes the writer's state). The other layout then
    writes through the same machinery."""
    from llama_cpp import Llama

    article = json.loads(KB.read_text(encoding="utf-8").splitlines()[0])["text"][:1500]
    first = chat_prompt(("user", f"{article}\n\nWhat does this article explain? Two sentences."))
    gguf = str(assemble_gguf("qwen2.5-0.5b"))
    kwargs: dict[str, Any] = {"n_ctx": 2048, "n_threads": 2, "verbose": False}

    def conversation(llama: Llama) -> list[str]:
        reply = llama.create_completion(first, max_tokens=40, temperature=0.0)["choices"][0]["text"]
        follow_up = first + reply + "<|im_end|>\n" + chat_prompt(("user", FOLLOW_UP))
        again = llama.create_completion(follow_up, max_tokens=10, temperature=0.0)["choices"][0]["text"]
        return [reply, again]

    with layout("plain"):
        one = conversation(Llama(model_path=gguf, **kwargs))
        reader, writer = Llama(model_path=gguf, **kwargs), Llama(model_path=gguf, **kwargs)
    context = split(reader, writer)
    assert conversation(reader) == one and len(one[0].split()) > 5
    written = len(reader.tokenize(one[0].encode(), add_bos=False))
    assert context.decodes["writer"] >= written - 1 and context.decodes["reader"] >= 2  # every token but the first
    assert context.copies >= 2  # after each prompt, and back to the reader for the follow-up

    with layout("plain"):
        reader = Llama(model_path=gguf, **kwargs)
    with layout("repacked"):
        writer = Llama(model_path=gguf, **kwargs)
    context = split(reader, writer)
    text = reader.create_completion(first, max_tokens=40, temperature=0.0)["choices"][0]["text"]
    assert len(text.split()) > 5 and context.decodes["writer"] >= len(reader.tokenize(text.encode(), add_bos=False)) - 1
