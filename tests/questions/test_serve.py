"""``ragidx serve`` logs every chat completion and takes feedback on it: a real uvicorn server on loopback over a
real engine (hash embeddings, a scripted chat model), asked by the ``openai`` package and httpx.

Each completion, whole or streamed, is one record under the completion's id; a reader rates only their own
answers (404 otherwise, naming nothing of others); the admin routes answer admin keys only (403 for a reader's
or a public key, and on a server without keys) and only with their tenant's rows; and of 60 e-mail addresses,
phone numbers, card numbers and keys planted in questions and comments, none reaches the database file."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from ragidx.article import Article
from ragidx.config import ServerKey, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.questions.log import QuestionLog
from ragidx.questions.recorder import recorder_for
from ragidx.server import create_app
from tests.dashboard.fakes import make_engine
from tests.server.helpers import running

ANN, BOB, ADMIN, PUBLIC = "sk-ann-1a2b3c", "sk-bob-4d5e6f", "sk-admin-7a8b9c", "sk-public-0d0e"
KB = [
    Article("labels", "Printing labels", "https://help/labels",
            "To print labels choose File New Labels and print them on the printer.", "en"),
    Article("calc", "Printing in Calc", "https://help/calc",
            "To print a spreadsheet choose File Print and set print ranges on the printer.", "en"),
]  # fmt: skip
QUESTION = "How do I print labels on the printer?"
NOT_YOURS = "no answer with this id to rate: give the id of a chat completion this key received"


def settings_for(data_dir: Path, **extra: Any) -> Settings:
    keys = [
        ServerKey(key=ANN, user="ann"),
        ServerKey(key=BOB, user="bob", groups=["support"]),
        ServerKey(key=ADMIN, user="lead", role="admin"),
    ]
    return Settings(
        data_dir=data_dir, top_k=2, max_tool_rounds=1, plan_searches="never",
        serve=ServerSettings(keys=keys, api_keys=[PUBLIC]), **extra,
    )  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with make_engine(settings_for(tmp_path_factory.mktemp("serve-log"))) as eng:
        assert eng.ingest(KB, source_name="kb").new == 2
        yield eng


@pytest.fixture(scope="module")
def base_url(engine: Engine) -> Iterator[str]:
    with running(create_app(engine)) as url:
        yield url


def log_of(engine: Engine) -> QuestionLog:
    log = recorder_for(engine).log
    assert log is not None
    return log


def chat(base_url: str, key: str, question: str = QUESTION, **kw: Any) -> Any:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)
    return client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": question}], **kw)


def post(base_url: str, key: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base_url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def get(base_url: str, key: str, path: str, **params: Any) -> httpx.Response:
    return httpx.get(f"{base_url}{path}", params=params, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_each_completion_whole_or_streamed_is_one_record_under_its_id(base_url: str, engine: Engine) -> None:
    whole = chat(base_url, ANN)
    pieces = list(chat(base_url, BOB, "How do I print a spreadsheet?", stream=True))
    streamed_id = {p.id for p in pieces}
    assert len(streamed_id) == 1
    got = log_of(engine).get([whole.id, *streamed_id])
    ann, bob = got[whole.id], got[streamed_id.pop()]
    assert (ann.surface, ann.reader, ann.outcome, ann.question) == ("serve", "user:ann", "answered", QUESTION)
    assert (bob.reader, bob.groups, bob.question) == ("user:bob", ("support",), "How do I print a spreadsheet?")
    assert {a.kb_id for a in ann.articles if a.cited} and ann.timings["total"] > 0 and ann.model == "scripted"


def test_the_conversation_is_logged_with_the_question(base_url: str, engine: Engine) -> None:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=ANN, max_retries=0)
    messages: Any = [
        {"role": "user", "content": "How do I print? I am ann@example.org"},
        {"role": "assistant", "content": "Choose File > Print."},
        {"role": "user", "content": "And labels?"},
    ]
    done = client.chat.completions.create(model="ragidx", messages=messages)
    rec = log_of(engine).get([done.id])[done.id]
    assert rec.question == "And labels?"
    assert rec.conversation == (("user", "How do I print? I am [email]"), ("assistant", "Choose File > Print."))


def test_a_reader_rates_only_their_own_answers(base_url: str, engine: Engine) -> None:
    mine = chat(base_url, ANN).id
    shown = log_of(engine).get([mine])[mine].articles[0].kb_id
    ok = post(base_url, ANN, "/v1/feedback", {"id": mine, "vote": "down", "comment": "old", "wrong_article": shown})
    assert ok.status_code == 200 and ok.json() == {"object": "feedback", "id": mine, "vote": "down"}
    (fb,) = log_of(engine).feedback_for([mine])[mine]
    assert (fb.reader, fb.vote, fb.comment, fb.wrong_article) == ("user:ann", "down", "old", shown)
    for key, qid in [(BOB, mine), (PUBLIC, mine), (ADMIN, mine), (ANN, "chatcmpl-none")]:
        refused = post(base_url, key, "/v1/feedback", {"id": qid, "vote": "up"})
        assert refused.status_code == 404 and refused.json()["error"]["message"] == NOT_YOURS
    assert [f.vote for f in log_of(engine).feedback_for([mine])[mine]] == ["down"]  # nobody else changed it


@pytest.mark.parametrize(
    ("body", "wanted"),
    [
        ({"id": "x", "vote": "meh"}, "vote: Input should be 'up' or 'down'"),
        ({"vote": "up"}, "id: Field required"),
        ({"id": "x", "vote": "up", "user": "bob"}, "user: Extra inputs are not permitted"),
    ],
)
def test_a_bad_feedback_body_is_a_400_that_says_what_to_fix(base_url: str, body: dict[str, Any], wanted: str) -> None:
    refused = post(base_url, ANN, "/v1/feedback", body)
    assert refused.status_code == 400 and refused.json()["error"]["message"] == wanted


def test_wrong_article_must_be_one_the_answer_was_drawn_from(base_url: str) -> None:
    mine = chat(base_url, ANN).id
    refused = post(base_url, ANN, "/v1/feedback", {"id": mine, "vote": "down", "wrong_article": "payroll"})
    assert refused.status_code == 400 and "'payroll' is not one of the articles" in refused.text


@pytest.mark.parametrize("path", ["/v1/admin/questions", "/v1/admin/feedback"])
def test_admin_routes_refuse_reader_and_public_keys(base_url: str, path: str) -> None:
    for key in (ANN, BOB, PUBLIC):
        refused = get(base_url, key, path)
        assert refused.status_code == 403 and 'role = "admin"' in refused.json()["error"]["message"]
    assert get(base_url, "sk-wrong", path).status_code == 401


def test_an_admin_lists_questions_with_their_feedback_and_filters(base_url: str) -> None:
    asked = chat(base_url, BOB, "Where do I set print ranges?").id
    assert post(base_url, BOB, "/v1/feedback", {"id": asked, "vote": "up"}).status_code == 200
    listed = get(base_url, ADMIN, "/v1/admin/questions", limit=1000)
    assert listed.status_code == 200
    rows = {r["id"]: r for r in listed.json()["data"]}
    row = rows[asked]
    assert (row["question"], row["reader"], row["outcome"], row["surface"]) == (
        "Where do I set print ranges?",
        "user:bob",
        "answered",
        "serve",
    )
    assert [f["vote"] for f in row["feedback"]] == ["up"] and row["articles"][0]["rank"] == 1
    none = get(base_url, ADMIN, "/v1/admin/questions", outcome="error,declined").json()["data"]
    assert none == []
    later = get(base_url, ADMIN, "/v1/admin/questions", since="2999-01-01T00:00:00Z").json()["data"]
    assert later == []
    votes = get(base_url, ADMIN, "/v1/admin/feedback").json()["data"]
    assert any(v["question_id"] == asked and v["question"]["question"] == "Where do I set print ranges?" for v in votes)
    bad = get(base_url, ADMIN, "/v1/admin/questions", since="last week")
    assert bad.status_code == 400 and "is not an ISO 8601 time" in bad.json()["error"]["message"]
    assert get(base_url, ADMIN, "/v1/admin/questions", outcome="lost").status_code == 400
    assert get(base_url, ADMIN, "/v1/admin/questions", limit=0).status_code == 400


def test_a_server_without_keys_has_no_admin(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path / "data")) as eng, running(create_app(eng)) as url:
        refused = httpx.get(f"{url}/v1/admin/questions", timeout=30)
        assert refused.status_code == 403


def test_each_tenant_sees_only_its_own_log(tmp_path: Path) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    engines = {
        t: make_engine(settings_for(tmp_path / t, tenant=t, article_store_url=shared)) for t in ("acme", "globex")
    }
    try:
        ids = {}
        for tenant, eng in engines.items():
            assert eng.ingest(KB, source_name="kb").new == 2
            with running(create_app(eng)) as url:
                ids[tenant] = chat(url, ANN, f"{tenant}: {QUESTION}").id
                listed = [r["question"] for r in get(url, ADMIN, "/v1/admin/questions").json()["data"]]
                assert listed == [f"{tenant}: {QUESTION}"]
        with running(create_app(engines["acme"])) as url:  # Ann of acme cannot rate Ann of globex's answer
            assert post(url, ANN, "/v1/feedback", {"id": ids["globex"], "vote": "up"}).status_code == 404
            assert post(url, ANN, "/v1/feedback", {"id": ids["acme"], "vote": "up"}).status_code == 200
    finally:
        for eng in engines.values():
            eng.close()


def _luhn_complete(body: str) -> str:
    from ragidx.questions.redaction import luhn_valid

    return next(body + d for d in "0123456789" if luhn_valid(body + d))


PLANTED = (
    [f"customer{i}.name@mail{i}.example.com" for i in range(15)]
    + [f"+1 415 555 {1000 + 37 * i}" for i in range(8)]
    + [f"(555) 201-{3000 + 11 * i}" for i in range(7)]
    + [" ".join(re.findall(".{4}", _luhn_complete(f"4{i:02d}1234567890{i:02d}"))) for i in range(10)]
    + [f"sk-proj-{i}Qz8xLmN4vB7cD2eF5gH1jK3{i}" for i in range(5)]
    + [f"AKIA{i}BCDEFGHIJKLMNO{i}"[:20] for i in range(5)]
    + [f"ghp_{i}a9B8c7D6e5F4g3H2i1J0k9L8m7N6o5P4{i}" for i in range(5)]
    + [f"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2Vy{i}In0.c2lnbmF0dXJlX{i}2Rldm" for i in range(5)]
)


def test_no_planted_personal_data_reaches_the_database(tmp_path: Path) -> None:
    """The redaction target: 60 planted e-mails, phones, cards and keys asked through the server (whole and
    streamed, in questions, earlier turns and feedback comments); the raw rows and the database file's bytes
    hold none of them."""
    assert len(PLANTED) == 60
    with make_engine(settings_for(tmp_path / "data")) as eng:
        assert eng.ingest(KB, source_name="kb").new == 2
        with running(create_app(eng)) as url:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=ANN, max_retries=0)
            for i, secret in enumerate(PLANTED):
                question = f"How do I print labels for {secret} on the printer?"
                if i % 3 == 0:
                    messages: Any = [
                        {"role": "user", "content": f"Hi, my contact is {secret}."},
                        {"role": "assistant", "content": "Hello."},
                        {"role": "user", "content": question},
                    ]
                    done = client.chat.completions.create(model="ragidx", messages=messages)
                    qid = done.id
                elif i % 3 == 1:
                    qid = list(chat(url, ANN, question, stream=True))[-1].id  # read to the end: logged by then
                else:
                    qid = chat(url, ANN, question).id
                fb = post(url, ANN, "/v1/feedback", {"id": qid, "vote": "down", "comment": f"reach me: {secret}"})
                assert fb.status_code == 200
            assert len(log_of(eng).records(limit=1000)) == 60
    db = tmp_path / "data" / "articles.sqlite"
    with sqlite3.connect(db) as conn:
        rows = [
            str(row)
            for table in ("ragidx_questions", "ragidx_question_feedback")
            for row in conn.execute(f"SELECT * FROM {table}")  # noqa: S608 (the test's own table names)
        ]
    assert len(rows) == 120
    raw = "\n".join(rows)
    on_disk = b"".join(p.read_bytes() for p in tmp_path.glob("data/articles.sqlite*"))
    leaked = [s for s in PLANTED if s in raw or s.encode() in on_disk]
    digits = re.sub(r"\D", "", raw)
    leaked += [s for s in PLANTED if "@" not in s and len(d := re.sub(r"\D", "", s)) >= 10 and d in digits]
    assert leaked == []
    assert raw.count("[email]") >= 30 and raw.count("[card]") >= 20 and raw.count("[key]") >= 40  # question, comment


def test_on_postgresql_the_server_logs_rates_and_lists(tmp_path: Path, pg_url: str) -> None:
    """The same log in a shared PostgreSQL database (article_store_url): a completion logged under its id, its
    reader's vote, another reader's refused, the admin's listing."""
    with make_engine(settings_for(tmp_path / "data", article_store_url=pg_url)) as eng:
        assert eng.ingest(KB, source_name="kb").new == 2
        with running(create_app(eng)) as url:
            qid = chat(url, ANN, f"{QUESTION} Card 4111 1111 1111 1111").id
            assert post(url, BOB, "/v1/feedback", {"id": qid, "vote": "up"}).status_code == 404
            assert post(url, ANN, "/v1/feedback", {"id": qid, "vote": "down"}).status_code == 200
            (row,) = get(url, ADMIN, "/v1/admin/questions").json()["data"]
            assert (row["id"], row["question"], row["reader"]) == (qid, f"{QUESTION} Card [card]", "user:ann")
            assert [f["vote"] for f in row["feedback"]] == ["down"]
        raw = eng.article_store._read("test", lambda c: str(list(c.exec_driver_sql("SELECT * FROM ragidx_questions"))))
        assert "4111" not in raw and "[card]" in raw
