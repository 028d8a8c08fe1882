"""Guards as a registry (issue 56.4): profiles list their rules by name, a program passes its own gates and guards as
objects declaring a name, a stream form and a check, and one without a stream form is refused."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import ChatMessage

from ragidx.agent.answer import Answer
from ragidx.agent.guards import GateInput, GuardChain, GuardInput, GuardResult, StreamFilter
from ragidx.agent.guards import chain as chain_module
from ragidx.agent.guards.chain import ALL_NAMES, GATE_NAMES, PROFILES, checked_rule
from ragidx.agent.guards.stream import STREAM_FORMS, stream_form_of
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from tests.dashboard.fakes import cite_sources
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import RecordedCall, ScriptedLLM

SOURCE = Article.from_dict({"kb_id": "kb1", "title": "Colours", "content": "The default colour is blue."})


class NoShouting:
    """Judges the whole reply: a stream holds it to the end."""

    name = "no_shouting"
    stream_form = "end"

    def check(self, inp: GuardInput) -> GuardResult:
        if inp.text.isupper():
            return GuardResult(inp.text.capitalize(), reason="the reply was all capitals")
        return GuardResult(inp.text)


class _SpellingHold:
    """Holds back the last word while it may still become 'colour'."""

    def __init__(self) -> None:
        self._text, self._shown = "", 0

    def feed(self, piece: str) -> str:
        self._text += piece
        end = len(self._text) - len(re.search(r"\w*$", self._text).group())  # type: ignore[union-attr]
        return self._emit(end)

    def flush(self) -> str:
        return self._emit(len(self._text))

    def _emit(self, end: int) -> str:
        out = self._text[self._shown : end].replace("colour", "color")
        self._shown = max(self._shown, end)
        return out


class AmericanSpelling:
    """A clean-up: changes text piece by piece, and gives its stream form of it."""

    name = "american_spelling"
    stream_form = "clean-up"

    def check(self, inp: GuardInput) -> GuardResult:
        fixed = inp.text.replace("colour", "color")
        return GuardResult(fixed, reason="spelling" if fixed != inp.text else None)

    def stream_hold(self) -> _SpellingHold:
        return _SpellingHold()


class NeedsColour:
    """A gate: the model is not asked when no shown article mentions colour."""

    name = "needs_colour"
    stream_form = "none"

    def check(self, inp: GateInput) -> str | None:
        return None if any("colour" in s.content for s in inp.sources) else "no article about colour"


def test_profiles_list_their_rules_by_name_and_a_new_built_in_joins_none(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PROFILES["small-model"] is not ALL_NAMES and set(PROFILES["small-model"]) == set(ALL_NAMES)
    assert all(set(names) <= set(ALL_NAMES) for names in PROFILES.values())
    # chain.py with one more built-in guard (and its stream form): no profile runs it until it is listed there
    source = Path(chain_module.__file__).read_text(encoding="utf-8")
    added = source.replace(
        '    "relay": lambda profile: Relay(),\n',
        '    "relay": lambda profile: Relay(),\n    "new_rule": lambda profile: Relay(),\n',
    )
    assert added != source
    spec = importlib.util.spec_from_loader("chain_with_new_rule", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(STREAM_FORMS, "new_rule", "clean-up")
    exec(compile(added, "chain_with_new_rule", "exec"), module.__dict__)  # noqa: S102 - the module's own source
    assert "new_rule" in module.GUARD_NAMES and "new_rule" not in module.PROFILES["small-model"]
    assert "new_rule" not in module.profile_names("small-model")
    assert module.profile_names("small-model", enable=["new_rule"])[-1] == "new_rule"


def test_gates_and_guards_come_from_one_table_and_their_stream_forms() -> None:
    assert GATE_NAMES == ("shares_terms", "missing_identifiers", "answer_check")
    assert all(STREAM_FORMS[n] == "none" for n in GATE_NAMES)
    chain = GuardChain("small-model")
    assert [g.name for g in chain.gates] == list(GATE_NAMES)
    assert [g.name for g in chain.guards] == [n for n in ALL_NAMES if n not in GATE_NAMES]


def test_a_programs_guard_runs_after_the_profile_and_is_recorded() -> None:
    chain = GuardChain.from_profile("endpoint", enable=[NoShouting()])
    assert chain.names == ("model_not_found", "relay", "no_shouting")
    verdict = chain.review("Default colour?", "IT IS BLUE [1].", [SOURCE])
    assert verdict.text == "It is blue [1]." and [f.name for f in verdict.fired] == ["no_shouting"]
    assert chain.describe()["enabled"] == ["no_shouting"]
    # a stream holds the reply of an 'end' guard until it is complete, then shows the answer as it stands
    shown = chain.stream_filter("Default colour?")
    assert shown.feed("IT IS BLUE [1].") == ""
    assert shown.finish(Answer(question="q", text=verdict.text)) == "It is blue [1]."


def test_a_programs_clean_up_streams_through_its_hold_and_shows_what_the_answer_keeps() -> None:
    chain = GuardChain.from_profile("endpoint").with_rules(AmericanSpelling())
    reply = "The default colour is blue [1]. Each colour can be changed."
    final = chain.review("Default colour?", reply, [SOURCE])
    assert final.text == "The default color is blue [1]. Each color can be changed."
    for size in (1, 3, 7, len(reply)):
        shown = chain.stream_filter("Default colour?")
        seen = "".join(shown.feed(reply[i : i + size]) for i in range(0, len(reply), size))
        assert "colour" not in seen
        closing = shown.finish(Answer(question="q", text=final.text, articles=[SOURCE.to_dict()]))
        assert shown.printed == final.text and seen + closing == final.text


def test_a_programs_gate_keeps_the_model_from_being_asked() -> None:
    chain = GuardChain("endpoint", ["model_not_found", NeedsColour()])
    assert [g.name for g in chain.gates] == ["needs_colour"] and [g.name for g in chain.guards] == ["model_not_found"]
    fired = chain.gate(
        GateInput("Default font?", [Article.from_dict({"kb_id": "a", "title": "Fonts", "content": "Arial."})])
    )
    assert fired is not None and (fired.name, fired.reason) == ("needs_colour", "no article about colour")
    assert chain.gate(GateInput("Default colour?", [SOURCE])) is None


def test_engine_answers_run_a_chain_set_on_it(tmp_path: Path, writer_kb_file: str) -> None:
    def shouting(messages: list[ChatMessage], call: RecordedCall) -> Any:
        reply = cite_sources(messages, call)
        return reply.upper() if isinstance(reply, str) and reply != "NOT_FOUND" else reply

    llm = ScriptedLLM([shouting], cycle=True)
    llm.context_window = 8192
    embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
    with Engine(Settings(data_dir=tmp_path), llm=llm, embed_model=embed) as engine:
        engine.ingest(writer_kb_file)
        assert engine.ask("How do I create a table of contents?").text.startswith("THE KNOWLEDGE BASE")
        engine.guards = engine.guards.with_rules(NoShouting())
        answer = engine.ask("How do I create a table of contents?")
    assert answer.text.startswith("The knowledge base explains this in") and not answer.not_found
    assert [g["name"] for g in answer.guards] == ["no_shouting"]
    assert answer.guard_profile["guards"] == ["model_not_found", "relay", "no_shouting"]


class _Named:
    name = "mine"

    def check(self, inp: GuardInput) -> GuardResult:
        return GuardResult(inp.text)


def _rule(**attributes: Any) -> object:
    return type("Rule", (_Named,), attributes)()


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (_rule(), "guard 'mine' declares no stream form: give it stream_form = 'end' (a stream holds the reply"),
        (_rule(stream_form="opening"), "guard 'mine' declares stream_form 'opening': use 'end', 'clean-up' or 'none'"),
        (_rule(stream_form="later"), "guard 'mine' declares stream_form 'later': use 'end', 'clean-up' or 'none'"),
        (_rule(stream_form="clean-up"), "guard 'mine' is a 'clean-up' without stream_hold(): give it one"),
        (_rule(stream_form="end", name="relay"), "guard 'relay': that is a built-in guard's name; give yours another"),
        (_rule(stream_form="end", name=""), "a guard object needs a name (a str attribute 'name'); Rule has none"),
        (_rule(stream_form="end", check=None), "guard 'mine' has no check method"),
    ],
)
def test_a_guard_that_cannot_run_is_refused_with_what_to_give_it(rule: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        checked_rule(rule)
    with pytest.raises(ValueError, match=re.escape(message)):
        GuardChain.from_profile("off", enable=[rule])


def test_a_stream_filter_refuses_a_rule_without_a_stream_form() -> None:
    with pytest.raises(ValueError, match="guard 'mine' declares no stream form"):
        StreamFilter(["relay", _rule()])
    assert stream_form_of(NoShouting()) == "end" and stream_form_of("model_not_found") == "opening"


def test_a_chain_lists_each_rule_once_and_knows_its_names() -> None:
    with pytest.raises(ValueError, match="guard 'no_shouting' is in the chain twice: list it once"):
        GuardChain("off", [NoShouting(), NoShouting()])
    with pytest.raises(ValueError, match=r"unknown guard 'relai'; the guards are: shares_terms, "):
        GuardChain("off", ["relai"])
