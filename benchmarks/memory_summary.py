"""What a memory summary keeps of the facts a long conversation asks about later: extractive against LLM.

A 12-turn conversation over the LibreOffice sample (``ragidx/data/kb/libreoffice_en_sample.jsonl``): turns 1-11
ask how to do something and are answered from the article (its opening and the sentence naming the menu), so
each answer carries one fact, a menu path ("Insert - Caption"). Turn 12 asks back about three of the early
facts. The history before turn 12 is folded the way the context budget folds it (``ConversationMemory``,
``keep_last=2``, a summary of ``--summary-tokens``: 409 is what the budget asks on a 4K window), once
extractively and once by the LLM (``--model``; ``none`` skips it), with turn 12 as the question the summary is
written for. Prints ONE JSON line: facts kept (the three asked about, and all ten folded), summary tokens,
seconds and the machine's load.

    python benchmarks/memory_summary.py [--model qwen2.5-0.5b] [--summary-tokens 409]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core.base.llms.types import ChatMessage, MessageRole  # noqa: E402

from ragidx.budget.memory import ConversationMemory  # noqa: E402
from ragidx.providers.tokenizer import TokenCounter  # noqa: E402

KB = ROOT / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"
PREFIX = "libreoffice-7.4-help-en:"
# (article, the fact its answer carries); the last one is the turn kept verbatim before the late question.
TURNS = [
    ("text/swriter/guide/words_count.html", "Tools - Word Count"),
    ("text/scalc/guide/text_rotate.html", "Format - Cells"),
    ("text/swriter/guide/captions_numbers.html", "Insert - Caption"),
    ("text/shared/guide/xsltfilter_distribute.html", "Tools - XML Filter Settings"),
    ("text/swriter/guide/auto_numbering.html", "Tools - AutoCorrect - AutoCorrect Options"),
    ("text/sdraw/guide/graphic_insert.html", "Insert - Image"),
    ("text/scalc/guide/print_details.html", "Format - Page"),
    ("text/swriter/guide/text_centervert.html", "Insert - Frame"),
    ("text/simpress/guide/line_arrow_styles.html", "Format - Line"),
    ("text/shared/guide/scripting.html", "Tools - Customize"),
    ("text/swriter/guide/indenting.html", "Format - Paragraph - Indents & Spacing"),
]
ASKED = [1, 2, 8]  # turns (0-based) whose facts the late question asks about
LATE_QUESTION = (
    "Going back to the start: which menus did you give me for rotating text in Calc, for adding chapter "
    "numbers to captions, and for loading line styles in Impress?"
)


def conversation() -> list[ChatMessage]:
    """Turns 1-11 as user/assistant messages, answered from the sample's articles."""
    articles = {}
    for line in KB.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        articles[row["id"].removeprefix(PREFIX)] = row
    messages = []
    for path, fact in TURNS:
        article = articles[path]
        text = " ".join(article["text"].split())
        at = text.find(fact)
        if at < 0:
            raise SystemExit(f"{path} no longer says {fact!r}: update TURNS")
        start = text.rfind(". ", 0, at) + 2 if text.rfind(". ", 0, at) > 0 else 0
        end = text.find(".", at + len(fact))
        sentence = text[start : end + 1 if end > 0 else len(text)]
        opening = text[:300].rsplit(" ", 1)[0]
        messages.append(ChatMessage(role=MessageRole.USER, content=f"How do I do this: {article['title']}?"))
        messages.append(ChatMessage(role=MessageRole.ASSISTANT, content=f"{opening} … {sentence} [1]"))
    return messages


def kept(summary: str, facts: list[str]) -> list[bool]:
    flat = " ".join(summary.lower().split())
    return [" ".join(f.lower().split()) in flat for f in facts]


def run(memory: ConversationMemory, history: list[ChatMessage], size: int, folded_facts: list[str]) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = memory.summarize(history, question=LATE_QUESTION, summary_tokens=size)
    seconds = time.perf_counter() - t0
    summary = result.messages[0].content or ""
    flags = kept(summary, folded_facts)
    asked = [flags[i] for i in ASKED]
    return {
        "method": result.method,
        "kept_asked": sum(asked),
        "kept_all": sum(flags),
        "summary_tokens": result.summary_tokens,
        "messages_folded": result.summarized_messages,
        "seconds": round(seconds, 1),
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-0.5b", help="local model name, or 'none' (extractive only)")
    parser.add_argument("--summary-tokens", type=int, default=409, help="the summary's size (4K window: 409)")
    parser.add_argument("--out", type=Path, default=None, help="write the summaries here (JSON)")
    args = parser.parse_args(argv)
    history = conversation()
    tokens = TokenCounter()
    keep_last = 2
    folded_facts = [fact for _, fact in TURNS[: len(TURNS) - keep_last // 2]]
    row: dict[str, Any] = {
        "turns": len(TURNS) + 1,
        "history_tokens": sum(tokens.count(m.content or "") for m in history),
        "facts_folded": len(folded_facts),
        "facts_asked": len(ASKED),
        "summary_tokens": args.summary_tokens,
        "load_before": [round(x, 2) for x in os.getloadavg()],
    }
    runs = {"extractive": run(ConversationMemory(token_counter=tokens, keep_last=keep_last), history,
                              args.summary_tokens, folded_facts)}  # fmt: skip
    if args.model != "none":
        from ragidx.config import LLMEndpoint
        from ragidx.providers.llms import LLMProvider

        with LLMProvider(threads=2) as provider:
            llm = provider.get(LLMEndpoint(model=args.model, temperature=0.0))
            memory = ConversationMemory(llm, token_counter=tokens, keep_last=keep_last)
            runs["llm"] = run(memory, history, args.summary_tokens, folded_facts)
        row["model"] = args.model
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.out is not None:
        args.out.write_text(json.dumps({k: v["summary"] for k, v in runs.items()}, indent=2), encoding="utf-8")
    row.update({k: {m: v for m, v in r.items() if m != "summary"} for k, r in runs.items()})
    print(json.dumps(row, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
