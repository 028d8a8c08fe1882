"""Curated answers: pinned to questions, matched with the intent guard, served before the model only to readers who
may read what they cite, stopped when a cited article changes or goes until an editor confirms them; the CLI and
the admin routes."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragidx.agent.answer import Answer
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.engine import Engine
from ragidx.questions.curated import CuratedAnswers, curated_answers, minimal_pair, same_intent
from ragidx.server.openai_format import chat_completion
from ragidx.stores.access import Principal
from ragidx.stores.article_store import ArticleStore
from tests.dashboard.fakes import make_engine
from tests.fakes.hash_embedding import HashEmbedding

KB = [
    Article("toc", "Tables of contents", "u/toc", "Insert a table of contents with Insert > Table of Contents.", "en"),
    Article(
        "hr-leave",
        "Leave policy",
        "u/leave",
        "Staff take leave through the HR portal.",
        "en",
        {"allowed": ["group:hr"]},
    ),
]
TOC = "How do I insert a table of contents?"
TOC_ANSWER = "Choose Insert > Table of Contents and Index [1]."


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[Engine]:
    with make_engine(Settings(data_dir=tmp_path, max_tool_rounds=1, plan_searches="never")) as eng:
        assert eng.ingest(KB, source_name="kb").new == 2
        yield eng


def test_the_intent_guard_tells_paraphrases_from_near_misses() -> None:
    assert same_intent("How can I add a table of contents to my document?", TOC)
    assert same_intent("put page numbers into the footer", "How do I insert page numbers in the footer?")
    assert not same_intent("How do I delete a table of contents?", TOC)  # opposite actions
    assert not same_intent("How do I update a table of contents?", TOC)  # another kind of action
    assert not same_intent("How do I insert page numbers in the header?", "How do I insert page numbers in the footer?")
    assert not same_intent("Does LibreOffice run on Windows 7?", "Does LibreOffice run on Windows 11?")
    assert not same_intent("Is there a LibreOffice app for iPhone?", "Is there a LibreOffice app for Android?")
    assert not same_intent("How do I turn off spell checking?", "How do I turn on spell checking?")
    assert not same_intent("Why can't I print?", "How do I print?")  # negation
    assert minimal_pair("How do I change the default font size?", "How do I change the default font?")
    assert minimal_pair("How do I insert an endnote?", "How do I insert a footnote?")  # one word for one
    assert not minimal_pair("How can I add a table of contents to my document?", TOC)


def test_a_question_close_enough_gets_the_curated_answer_and_a_near_miss_does_not() -> None:
    store = ArticleStore(":memory:")
    store.save_pending(KB, source="kb")
    curated = CuratedAnswers(store, HashEmbedding(dim=256), threshold=0.5)
    pinned = curated.add([TOC], TOC_ANSWER, ["toc"], editor="eve")
    assert pinned.citations[0].title == "Tables of contents" and pinned.editor == "eve"
    assert curated.match("How do I insert a table of contents in Writer?", Principal()) == pinned
    assert curated.match("How do I delete a table of contents?", Principal()) is None  # same words, other intent
    assert curated.match("How do I print labels?", Principal()) is None  # not close
    answer = curated.answer("How do I insert a table of contents in Writer?", Principal())
    assert isinstance(answer, Answer) and answer.curated and answer.model == "curated"
    assert [(c.number, c.kb_id, c.title, c.url) for c in answer.citations] == [
        (1, "toc", "Tables of contents", "u/toc")
    ]


def test_pinning_refuses_what_it_cannot_serve() -> None:
    store = ArticleStore(":memory:")
    store.save_pending(KB, source="kb")
    curated = CuratedAnswers(store, HashEmbedding(dim=256))
    with pytest.raises(ValueError, match="no article 'nope'"):
        curated.add([TOC], TOC_ANSWER, ["toc", "nope"])
    with pytest.raises(ValueError, match="question"):
        curated.add(["  "], TOC_ANSWER)
    with pytest.raises(ValueError, match="text"):
        curated.add([TOC], " ")
    assert curated.entries() == []


def test_curated_answers_are_kept_per_tenant(tmp_path: Path) -> None:
    db = tmp_path / "articles.sqlite"
    acme, other = ArticleStore(db, tenant="acme"), ArticleStore(db, tenant="other")
    for store in (acme, other):
        store.save_pending(KB, source="kb")
    CuratedAnswers(acme, HashEmbedding(dim=256)).add([TOC], TOC_ANSWER, ["toc"])
    assert len(CuratedAnswers(ArticleStore(db, tenant="acme"), HashEmbedding(dim=256)).entries()) == 1
    theirs = CuratedAnswers(other, HashEmbedding(dim=256), threshold=0.5)
    assert theirs.entries() == [] and theirs.match(TOC, Principal()) is None


def test_a_changed_or_deleted_citation_stops_the_answer_until_an_editor_confirms_it(engine: Engine) -> None:
    curated = curated_answers(engine)
    pinned = curated.add([TOC], TOC_ANSWER, ["toc"])
    assert engine.ask(TOC).curated
    changed = Article("toc", "Tables of contents", "u/toc", "Use References > Table of Contents.", "en")
    assert engine.ingest([changed, KB[1]], source_name="kb").changed == 1
    (entry,) = curated.entries()
    assert (entry.state, entry.stale) == ("changed", ("toc",))
    assert not engine.ask(TOC).curated  # the model answers instead
    curated.confirm(pinned.id, editor="eve")
    assert curated.entries()[0].state == "live" and engine.ask(TOC).curated
    engine.delete(["toc"])
    assert curated.entries()[0].state == "gone" and not engine.ask(TOC).curated
    with pytest.raises(ValueError, match="no article 'toc'"):
        curated.confirm(pinned.id)
    assert curated.remove(pinned.id) and not curated.remove(pinned.id)
    with pytest.raises(KeyError):
        curated.confirm(pinned.id)


def test_the_engine_serves_a_curated_answer_before_the_model_whole_and_streamed(engine: Engine) -> None:
    curated_answers(engine).add([TOC], TOC_ANSWER, ["toc"])
    answer = engine.ask(TOC)
    assert answer.curated and answer.text == TOC_ANSWER and answer.citations[0].kb_id == "toc"
    assert answer.to_dict()["curated"] is True  # ragidx ask --json
    assert chat_completion(answer, model="m")["ragidx"]["curated"] is True  # the server's ragidx field
    items = list(engine.stream_ask(TOC, progress=True))
    assert items[0] == TOC_ANSWER and isinstance(items[-1], Answer) and items[-1].curated
    provider = engine.llm_provider
    assert provider.endpoints == []  # type: ignore[attr-defined]  # the model was never asked
    follow_up = engine.ask(TOC, history=[])  # an empty history is no conversation
    assert follow_up.curated
    other = engine.ask("How do I print labels?")
    assert not other.curated and provider.endpoints  # type: ignore[attr-defined]


def test_a_follow_up_in_a_conversation_is_answered_by_the_model(engine: Engine) -> None:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    curated_answers(engine).add([TOC], TOC_ANSWER, ["toc"])
    history = [ChatMessage(role=MessageRole.USER, content="hi"), ChatMessage(role=MessageRole.ASSISTANT, content="Hi")]
    assert not engine.ask(TOC, history=history).curated


def test_only_a_reader_who_may_read_every_cited_article_gets_the_curated_answer(engine: Engine) -> None:
    question = "How do I take leave?"
    curated_answers(engine).add(
        [question], "Use the HR portal [1] as the table of contents says [2].", ["hr-leave", "toc"]
    )
    assert not engine.ask(question).curated  # the public may not read hr-leave
    assert not engine.ask(question, user="bob", groups=["sales"]).curated
    assert engine.ask(question, user="ann", groups=["hr"]).curated


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[tuple[str, ...]], list[int], tuple[str | None, tuple[str, ...]]]:
    names = ["user:ann", "user:bob", "group:hr", "group:ops"]
    allowed = draw(st.lists(st.lists(st.sampled_from(names), unique=True, max_size=2), min_size=1, max_size=4))
    cited = draw(st.lists(st.integers(0, len(allowed) - 1), min_size=1, max_size=3, unique=True))
    user = draw(st.sampled_from([None, "ann", "bob"]))
    groups = tuple(draw(st.lists(st.sampled_from(["hr", "ops"]), unique=True, max_size=2)))
    return [tuple(a) for a in allowed], cited, (user, groups)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_cases())
def test_property_no_curated_answer_reaches_a_reader_who_may_not_read_its_citations(
    case: tuple[list[tuple[str, ...]], list[int], tuple[str | None, tuple[str, ...]]],
) -> None:
    allowed, cited, (user, groups) = case
    store = ArticleStore(":memory:")
    articles = [
        Article(f"a{i}", f"Article {i}", f"u{i}", f"text {i}", "en", {"allowed": list(a)} if a else {})
        for i, a in enumerate(allowed)
    ]
    store.save_pending(articles, source="kb")
    reader = Principal.of(user, groups)
    for judge in (None, lambda question, pinned: 10.0):  # the embedding alone, and a judge that says yes to all
        curated = CuratedAnswers(store, HashEmbedding(dim=64), judge=judge)
        curated.add([TOC], TOC_ANSWER, [f"a{i}" for i in cited])
        served = curated.answer(TOC, reader)
        _served_only_to_readers_of_all(served, reader, allowed, cited)


def _served_only_to_readers_of_all(
    served: Answer | None, reader: Principal, allowed: list[tuple[str, ...]], cited: list[int]
) -> None:
    may_read_all = all(reader.may_read(allowed[i]) for i in cited)
    assert (served is not None) == may_read_all
    if served is not None:
        assert all(reader.may_read(allowed[int(c.kb_id[1:])]) for c in served.citations)


def test_cli_pins_lists_confirms_and_removes(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    from ragidx.cli import main

    data_dir = str(engine.settings.data_dir)
    engine.close()
    base = ["--data-dir", data_dir, "curated"]
    assert main([*base, "add", "--question", TOC, "--answer", TOC_ANSWER, "--cite", "toc", "--editor", "eve"]) == 0
    pinned = json.loads(capsys.readouterr().out)
    assert pinned["questions"] == [TOC] and pinned["citations"][0]["kb_id"] == "toc"
    assert main([*base, "list", "--json"]) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["id"] == pinned["id"] and entry["state"] == "live"
    assert main([*base, "add", "--question", TOC, "--answer", "x", "--cite", "missing"]) == 1
    assert "no article 'missing'" in capsys.readouterr().err
    assert main([*base, "confirm", pinned["id"]]) == 0
    assert main([*base, "remove", pinned["id"]]) == 0
    assert main([*base, "remove", pinned["id"]]) == 1
    assert "no curated answer" in capsys.readouterr().err
    assert main([*base, "list"]) == 0
    assert "no curated answers" in capsys.readouterr().out


def test_admin_routes_pin_list_confirm_remove_and_report_gaps_for_admin_keys_only(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from ragidx.config import ServerKey, ServerSettings
    from ragidx.questions.log import QuestionLog
    from ragidx.questions.records import QuestionRecord
    from ragidx.server.app import create_app
    from tests.server.helpers import running

    keys = [ServerKey(key="sk-admin-1a2b3c", user="lead", role="admin"), ServerKey(key="sk-ann-4d5e6f", user="ann")]
    settings = Settings(data_dir=tmp_path, max_tool_rounds=1, plan_searches="never", serve=ServerSettings(keys=keys))
    admin = {"Authorization": "Bearer sk-admin-1a2b3c"}
    reader = {"Authorization": "Bearer sk-ann-4d5e6f"}
    with make_engine(settings) as engine:
        engine.ingest(KB, source_name="kb")
        log = QuestionLog(engine.article_store, tenant=None, retention_days=None)
        for i, q in enumerate(
            ["How do I sync with Dropbox?", "how do I sync with Dropbox", "How do I sync with Dropbox??"]
        ):
            log.record(
                QuestionRecord(f"q{i}", datetime.now(UTC), None, "user:ann", (), q, (), "not_found", None, None, (), {},
                               "m", "small-model", "api")
            )  # fmt: skip
        with running(create_app(engine)) as url:
            body = {"questions": [TOC], "answer": TOC_ANSWER, "citations": ["toc"]}
            assert httpx.post(f"{url}/v1/admin/curated", json=body, headers=reader).status_code == 403
            pinned = httpx.post(f"{url}/v1/admin/curated", json=body, headers=admin)
            assert pinned.status_code == 200, pinned.text
            listed = httpx.get(f"{url}/v1/admin/curated", headers=admin).json()["data"]
            assert [e["state"] for e in listed] == ["live"]
            assert httpx.get(f"{url}/v1/admin/curated", headers=reader).status_code == 403
            bad = httpx.post(f"{url}/v1/admin/curated", json={**body, "citations": ["nope"]}, headers=admin)
            assert bad.status_code == 400 and "nope" in bad.text
            gaps = httpx.get(f"{url}/v1/admin/gaps", headers=admin)
            assert gaps.status_code == 200
            (cluster,) = gaps.json()["clusters"]
            assert cluster["size"] == 3 and "dropbox" in cluster["title"].lower()
            csv_text = httpx.get(f"{url}/v1/admin/gaps?format=csv", headers=admin).text
            assert csv_text.startswith("rank,size,readers")
            assert httpx.get(f"{url}/v1/admin/gaps", headers=reader).status_code == 403
            assert httpx.get(f"{url}/v1/admin/gaps?since=yesterday", headers=admin).status_code == 400
            from_gap = httpx.post(
                f"{url}/v1/admin/curated", json={"gap": 1, "answer": "Save into your Dropbox folder."}, headers=admin
            )
            assert from_gap.status_code == 200 and from_gap.json()["gap"] == cluster["title"]
            pid = pinned.json()["id"]
            assert httpx.post(f"{url}/v1/admin/curated/{pid}/confirm", headers=admin).status_code == 200
            assert httpx.delete(f"{url}/v1/admin/curated/{pid}", headers=admin).status_code == 200
            assert httpx.delete(f"{url}/v1/admin/curated/{pid}", headers=admin).status_code == 404


# --- the judge: a second stage for candidates the embedding alone would not serve ---------------------------
def _judged_store() -> ArticleStore:
    store = ArticleStore(":memory:")
    store.save_pending(KB, source="kb")
    return store


def test_a_judge_serves_rewordings_under_the_threshold_and_turns_away_what_it_rejects() -> None:
    asked: list[tuple[str, str]] = []
    verdicts = {
        "Where do I create the contents list of a document?": 1.5,
        "How do I format the table of contents in my report?": -3.0,
    }

    def judge(question: str, pinned: str) -> float | None:
        asked.append((question, pinned))
        return verdicts.get(question)

    embed = HashEmbedding(dim=256)
    plain = CuratedAnswers(_judged_store(), embed, threshold=0.9, pair_threshold=0.99)
    judged = CuratedAnswers(
        _judged_store(), embed, threshold=0.9, pair_threshold=0.99, judge=judge, judge_threshold=0.1, judge_margin=0.0
    )
    for curated in (plain, judged):
        curated.add([TOC], TOC_ANSWER, ["toc"])
    reworded = "Where do I create the contents list of a document?"
    assert 0.1 <= judged.similarity(reworded, TOC) < 0.9
    assert plain.match(reworded, Principal()) is None  # the embedding alone: too far
    assert judged.match(reworded, Principal()) is not None  # the judge: the same question
    assert (
        judged.match("How do I format the table of contents in my report?", Principal()) is None
    )  # the judge: another one
    assert judged.match("How do I delete a table of contents?", Principal()) is None  # the word guard, unjudged
    assert [q for q, _ in asked] == [reworded, "How do I format the table of contents in my report?"]
    assert {p for _, p in asked} == {TOC}


def test_within_judge_confident_only_the_judges_clear_no_stops_the_answer() -> None:
    for odds, served in ((-1.0, True), (-3.0, False), (1.0, True)):
        curated = CuratedAnswers(_judged_store(), HashEmbedding(dim=256), judge=lambda q, p, odds=odds: odds)
        curated.add([TOC], TOC_ANSWER, ["toc"])
        assert curated.similarity(TOC, TOC) >= curated.judge_confident
        assert (curated.match(TOC, Principal()) is not None) is served


def test_without_a_verdict_the_embedding_decides_and_a_failing_judge_never_fails_the_turn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def no_verdict(question: str, pinned: str) -> float | None:
        return None

    def failing(question: str, pinned: str) -> float | None:
        raise ConnectionError("the model server is down")

    for judge in (no_verdict, failing):
        curated = CuratedAnswers(_judged_store(), HashEmbedding(dim=256), threshold=0.9, judge=judge, judge_threshold=0)
        curated.add([TOC], TOC_ANSWER, ["toc"])
        assert curated.match(TOC, Principal()) is not None  # similarity 1: the embedding's own rule serves it
        assert curated.match("Where do I create the contents list of a document?", Principal()) is None
    assert "judge failed (ConnectionError)" in caplog.text


def test_the_judge_is_asked_only_about_answers_the_reader_may_get_and_at_most_judge_limit() -> None:
    asked: list[str] = []

    def judge(question: str, pinned: str) -> float | None:
        asked.append(pinned)
        return -5.0

    curated = CuratedAnswers(_judged_store(), HashEmbedding(dim=256), judge=judge, judge_threshold=0.0, judge_limit=1)
    curated.add(["How do I take leave?"], "Use the HR portal [1].", ["hr-leave"])
    curated.add([TOC], TOC_ANSWER, ["toc"])
    curated.add(["Where is the table of contents dialog in Writer?"], "Insert > Table of Contents [1].", ["toc"])
    assert curated.match("How do I take leave?", Principal()) is None
    assert "How do I take leave?" not in asked  # the public may not read hr-leave: never shown to the model
    asked.clear()
    assert len(curated.candidates(TOC)) == 3 and curated.match(TOC, Principal()) is None
    assert asked == [TOC]  # one judged (judge_limit), the closest


def test_the_engine_asks_its_own_model_the_judges_question_in_one_token(tmp_path: Path) -> None:
    from llama_index.core.base.llms.types import ChatResponse, LogProb

    from tests.dashboard.fakes import ScriptedProvider, cite_sources
    from tests.fakes.scripted_llm import ScriptedLLM

    class CheckingProvider(ScriptedProvider):  # a model with the answer check: it weighs YES against NO
        def get(self, endpoint: Any) -> ScriptedLLM:
            llm = super().get(endpoint)
            llm._steps = itertools.cycle([reply])
            self.llms.append(llm)
            return llm

        def answer_check(self, endpoint: Any) -> float:
            return 0.0

    def reply(messages: list[Any], call: Any) -> Any:
        text = messages[-1].content or ""
        if "An editor wrote an answer for the question" not in text:
            return cite_sources(messages, call)
        yes = -0.1 if "contents list" in text else -4.0
        top = [LogProb(token="YES", logprob=yes), LogProb(token="NO", logprob=-1.0)]
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content="YES"), logprobs=[top])

    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    provider = CheckingProvider()
    provider.llms = []  # type: ignore[attr-defined]
    settings = Settings(data_dir=tmp_path, max_tool_rounds=1, plan_searches="never")
    with Engine(settings, embed_model=HashEmbedding(dim=256), llm_provider=provider) as engine:  # type: ignore[arg-type]
        engine.ingest(KB, source_name="kb")
        curated_answers(engine).add([TOC], TOC_ANSWER, ["toc"])
        assert engine.ask("Where do I create the contents list of a document?").curated
        judged = [c for llm in provider.llms for c in llm.calls]  # type: ignore[attr-defined]
        first = judged[0]
        assert len(first.messages) == 1 and f'for the question: "{TOC}"' in (first.messages[0].content or "")
        assert first.kwargs["logit_bias"] == {"YES": 100.0, "NO": 100.0}
        assert first.kwargs["extra_body"]["max_tokens"] == 1
        assert not engine.ask("How do I insert a table of contents in Calc?").curated  # the model said NO
