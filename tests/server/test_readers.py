"""``ragidx serve`` reads as each API key's reader: a real uvicorn server on loopback over a real engine (LanceDB,
article store, retriever, agent; hash embeddings, a scripted chat model), asked by the ``openai`` package and
httpx with three keys: Ann's, HR's and a public one. No response of any endpoint (whole or streamed answers, their
sources and citations, the "Sources" block, search results, errors) carries an article its key's reader may not
read; ``filters`` narrow, never widen; a body cannot name another reader."""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragidx.article import Article
from ragidx.config import ServerKey, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.server import create_app
from ragidx.stores.access import Principal, allowed_of
from tests.dashboard.fakes import make_engine
from tests.server.helpers import running

ANN_KEY = "sk-ann-4f1c9e"
HR_KEY = "sk-hr-77ab02"
PUBLIC_KEY = "sk-widget-0d3e"
ANN_KEY_ENV = "RAGIDX_KEY_TEST_ANN"  # the serving guide's names (ragidx.config.KEY_VARIABLE_PREFIX)
QUESTION = "How do I print payroll slips and labels on my printer?"
KB = [
    Article("pub-labels", "Printing labels", "https://help/labels",
            "To print labels choose File New Labels and print them on the printer.", "en",
            {"product": "writer", "version": 7}),
    Article("pub-calc", "Printing in Calc", "https://help/calc",
            "To print a spreadsheet choose File Print and set print ranges on the printer.", "en",
            {"product": "calc", "version": 8}),
    Article("ann-notes", "Ann's printer notes", "https://help/ann",
            "My printer prints labels duplex; print labels and payroll slips on floor 3.", "en",
            {"product": "writer", "version": 7, "allowed": ["user:ann"]}),
    Article("hr-payroll", "Printing payroll slips", "https://help/payroll",
            "Payroll slips print from the HR portal; print payroll slips and labels monthly on the printer.", "en",
            {"product": "writer", "version": 7, "allowed": ["group:hr"]}),
]  # fmt: skip
READS = {
    ANN_KEY: {"pub-labels", "pub-calc", "ann-notes"},
    HR_KEY: {"pub-labels", "pub-calc", "hr-payroll"},
    PUBLIC_KEY: {"pub-labels", "pub-calc"},
}
SECRETS = {"ann-notes": "Ann's printer notes", "hr-payroll": "Printing payroll slips"}
"""What marks each restricted article in a response: its id and its title (its url too: /ann, /payroll)."""


def server_settings() -> ServerSettings:
    return ServerSettings(
        keys=[ServerKey(key_env=ANN_KEY_ENV, user="ann"), ServerKey(key=HR_KEY, groups=["hr"])],
        api_keys=[PUBLIC_KEY],
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ANN_KEY_ENV, ANN_KEY)
        settings = Settings(
            data_dir=tmp_path_factory.mktemp("readers"),
            top_k=4,
            max_tool_rounds=1,
            plan_searches="never",
            serve=server_settings(),
        )
        with make_engine(settings) as eng:
            report = eng.ingest(KB, source_name="kb")
            assert report.new == 4 and not report.errors
            yield eng


@pytest.fixture(scope="module")
def base_url(engine: Engine) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ANN_KEY_ENV, ANN_KEY)
        app = create_app(engine)  # reads the variable now, at start
    with running(app) as url:
        yield url


def client(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=key, max_retries=0)


def unreadable(key: str) -> dict[str, str]:
    return {kb_id: title for kb_id, title in SECRETS.items() if kb_id not in READS[key]}


def assert_hides(text: str, key: str) -> None:
    """Nothing of an article ``key``'s reader may not read is in ``text`` (a whole response, as sent)."""
    for kb_id, title in unreadable(key).items():
        assert kb_id not in text and title not in text and f"https://help/{kb_id.split('-')[1]}" not in text


@pytest.mark.parametrize("key", [ANN_KEY, HR_KEY, PUBLIC_KEY])
def test_each_key_reads_only_what_its_reader_may_in_answers_sources_and_search(base_url: str, key: str) -> None:
    ask = client(base_url, key)
    whole = ask.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
    extra = (whole.model_extra or {})["ragidx"]
    sources = {s["kb_id"] for s in extra["sources"]}
    own = READS[key] & set(SECRETS)
    assert own <= sources <= READS[key] and sources  # its own restricted article included, no one else's
    assert {c["kb_id"] for c in extra["citations"]} <= READS[key] and extra["citations"]
    assert_hides(whole.model_dump_json(), key)  # text, Sources block, extra field

    chunks = list(
        ask.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}], stream=True)
    )
    streamed = (chunks[-1].model_extra or {})["ragidx"]
    assert own <= {s["kb_id"] for s in streamed["sources"]} <= READS[key]
    assert "\n\nSources:\n[1] " in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert_hides("".join(c.model_dump_json() for c in chunks), key)

    found = httpx.post(
        f"{base_url}/v1/search", json={"query": QUESTION, "top_k": 10}, headers={"authorization": f"Bearer {key}"}
    )
    assert found.status_code == 200
    assert {a["kb_id"] for a in found.json()["data"]} == READS[key]
    assert_hides(found.text, key)


def test_the_raw_stream_carries_nothing_of_anothers_articles(base_url: str) -> None:
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
    with httpx.stream(
        "POST", f"{base_url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {ANN_KEY}"}
    ) as response:
        raw = "".join(response.iter_text())
    assert response.status_code == 200 and raw.rstrip().endswith("data: [DONE]")
    assert "ann-notes" in raw  # Ann's own article is there ...
    assert_hides(raw, ANN_KEY)  # ... HR's is not, in any event


def search(base_url: str, key: str, **body: Any) -> httpx.Response:
    return httpx.post(f"{base_url}/v1/search", json=body, headers={"authorization": f"Bearer {key}"})


def test_filters_narrow_within_the_reader_and_never_widen(base_url: str) -> None:
    writer = search(base_url, ANN_KEY, query=QUESTION, top_k=10, filters={"product": "writer"})
    assert {a["kb_id"] for a in writer.json()["data"]} == {"pub-labels", "ann-notes"}
    listed = search(base_url, HR_KEY, query=QUESTION, top_k=10, filters=["version>=7", "product in writer,calc"])
    assert {a["kb_id"] for a in listed.json()["data"]} == READS[HR_KEY]
    # a filter naming another reader's articles finds none of them: it is ANDed with the key's reader
    for key, filters in [
        (ANN_KEY, {"allowed": "group:hr"}),
        (ANN_KEY, ["allowed in group:hr,user:ann"]),
        (PUBLIC_KEY, {"allowed": ["user:ann", "group:hr"]}),
    ]:
        response = search(base_url, key, query=QUESTION, top_k=10, filters=filters)
        assert response.status_code == 200 and {a["kb_id"] for a in response.json()["data"]} <= READS[key]
        assert_hides(response.text, key)
    only_ann = search(base_url, ANN_KEY, query=QUESTION, top_k=10, filters=["allowed in group:hr,user:ann"])
    assert [a["kb_id"] for a in only_ann.json()["data"]] == ["ann-notes"]

    # the OpenAI SDK sends them with extra_body; answers keep to them, whole and streamed
    ask = client(base_url, HR_KEY)
    messages: Any = [{"role": "user", "content": QUESTION}]
    calc = ask.chat.completions.create(model="ragidx", messages=messages, extra_body={"filters": {"product": "calc"}})
    assert {s["kb_id"] for s in (calc.model_extra or {})["ragidx"]["sources"]} == {"pub-calc"}
    chunks = list(
        ask.chat.completions.create(
            model="ragidx", messages=messages, stream=True, extra_body={"filters": ["product=writer"]}
        )
    )
    written = {s["kb_id"] for s in (chunks[-1].model_extra or {})["ragidx"]["sources"]}
    assert "hr-payroll" in written and written <= {"pub-labels", "hr-payroll"}
    widened = ask.chat.completions.create(
        model="ragidx", messages=messages, extra_body={"filters": {"allowed": "user:ann"}}
    )
    extra = (widened.model_extra or {})["ragidx"]
    assert extra["sources"] == [] and extra["not_found"]
    assert_hides(widened.model_dump_json(), HR_KEY)


def test_a_request_cannot_name_its_reader(base_url: str) -> None:
    for body in ({"query": "payroll", "user": "ann"}, {"query": "payroll", "groups": ["hr"]}):
        refused = search(base_url, PUBLIC_KEY, **body)
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "reader_from_key" and error["type"] == "permission_error"
        assert "API key" in error["message"]
    ask = client(base_url, PUBLIC_KEY)
    messages: Any = [{"role": "user", "content": QUESTION}]
    for extra_body in ({"groups": ["hr"]}, {"principal": "user:ann"}):
        with pytest.raises(openai.PermissionDeniedError, match="names a reader"):
            ask.chat.completions.create(model="ragidx", messages=messages, extra_body=extra_body)
        streamed = httpx.post(
            f"{base_url}/v1/chat/completions",
            json={"messages": messages, "stream": True, **extra_body},
            headers={"authorization": f"Bearer {PUBLIC_KEY}"},
        )
        assert streamed.status_code == 403
    # OpenAI's own "user" field (an end-user id for logs) is not a reader: ignored, the key's reader reads
    answer = ask.chat.completions.create(model="ragidx", messages=messages, user="ann")
    assert {s["kb_id"] for s in (answer.model_extra or {})["ragidx"]["sources"]} <= READS[PUBLIC_KEY]
    assert_hides(answer.model_dump_json(), PUBLIC_KEY)


BAD_FILTERS = [
    ("writer", "must be an object"),
    ({"product": {"$eq": "writer"}}, "a value must be text"),
    ({"product": None}, "a value must be text"),
    ({"product": []}, "empty list"),
    ({"bad field": "x"}, "not a field name"),
    (["product ~ writer"], "write key=value"),
    ([3], "condition string"),
    ({"no_such_field": "x"}, "no article carries it; filterable fields are"),
    (["version>=abc"], "is not a number"),
    ({f"f{i}": 1 for i in range(40)}, "at most 32"),
]


@pytest.mark.parametrize(("filters", "wanted"), BAD_FILTERS)
@pytest.mark.parametrize("route", ["search", "chat", "stream"])
def test_bad_filters_are_a_clear_400_before_any_answer(base_url: str, route: str, filters: object, wanted: str) -> None:
    headers = {"authorization": f"Bearer {HR_KEY}"}
    if route == "search":
        response = httpx.post(f"{base_url}/v1/search", json={"query": "print", "filters": filters}, headers=headers)
    else:
        body = {"messages": [{"role": "user", "content": "print"}], "stream": route == "stream", "filters": filters}
        response = httpx.post(f"{base_url}/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert wanted in error["message"] and error["param"] == "filters" and error["type"] == "invalid_request_error"
    assert_hides(response.text, HR_KEY)


def test_keys_are_never_logged_or_shown(
    engine: Engine, base_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    ask = client(base_url, ANN_KEY)
    ask.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
    search(base_url, HR_KEY, query="print", filters={"no_such_field": 1})
    search(base_url, ANN_KEY[:-1], query="print")  # a wrong key: 401
    monkeypatch.setenv(ANN_KEY_ENV, ANN_KEY)
    shown = json.dumps(engine.settings.public_dict()) + repr(engine.settings) + str(engine.settings.serve)
    assert "key_env" in shown and ANN_KEY_ENV in shown  # the variable's name is shown, its value never
    for key in (ANN_KEY, HR_KEY, PUBLIC_KEY, ANN_KEY[:-1]):
        assert key not in caplog.text and key not in shown


def test_a_key_without_a_reader_reads_public_articles_and_a_server_without_keys_too(engine: Engine) -> None:
    keyless = make_engine(engine.settings.model_copy(update={"serve": ServerSettings()}))
    with running(create_app(keyless)) as url:  # loopback only, as the public reader
        found = httpx.post(f"{url}/v1/search", json={"query": QUESTION, "top_k": 10})
        assert {a["kb_id"] for a in found.json()["data"]} == READS[PUBLIC_KEY]
        refused = httpx.post(f"{url}/v1/search", json={"query": QUESTION, "groups": ["hr"]})
        assert refused.status_code == 403  # and it cannot name one either
    keyless.close()


def test_a_key_variable_that_is_not_set_stops_the_server_before_it_starts(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ANN_KEY_ENV, raising=False)
    with pytest.raises(ValueError, match=f"the variable {ANN_KEY_ENV} is empty or not set"):
        create_app(engine)


# --- property: any key, any filters, any question: nothing beyond the key's reader, exactly what matches ------
PROPERTY_READERS = {
    "k-ann": Principal(user="ann"),
    "k-bob": Principal(user="bob", groups=("eng",)),
    "k-hr": Principal(groups=("hr",)),
    "k-ann-hr": Principal(user="ann", groups=("hr", "eng")),
    "k-public": Principal(),
}
ALLOWED = [None, ["user:ann"], ["user:bob"], ["group:hr"], ["group:eng"], ["user:ann", "group:eng"]]
WORDS = ["print", "table", "chart", "label", "macro", "font", "export", "style"]
PROPERTY_KB = [
    Article(
        f"a{i}",
        f"Article {i} on {WORDS[i % len(WORDS)]}",
        f"https://help/a{i}",
        " ".join(WORDS[(i + j) % len(WORDS)] for j in range(6)) + f" number {i}.",
        "en",
        {"product": ("writer", "calc")[i % 2], "version": 6 + i % 3}
        | ({"allowed": ALLOWED[i % len(ALLOWED)]} if ALLOWED[i % len(ALLOWED)] else {}),
    )
    for i in range(18)
]


def matches(article: Article, filters: dict[str, Any]) -> bool:
    for field, value in filters.items():
        held = article.metadata.get(field)
        if held not in (value if isinstance(value, list) else [value]):
            return False
    return True


@pytest.fixture(scope="module")
def property_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    keys = [ServerKey(key=k, user=p.user, groups=list(p.groups)) for k, p in PROPERTY_READERS.items()]
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("readers-property"),
        top_k=5,
        max_tool_rounds=1,
        plan_searches="never",
        serve=ServerSettings(keys=keys),
    )
    with make_engine(settings) as eng:
        assert eng.ingest(PROPERTY_KB, source_name="kb").new == len(PROPERTY_KB)
        with TestClient(create_app(eng)) as http:
            yield http


@settings(max_examples=int(os.environ.get("RAGIDX_SERVE_READER_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    key=st.sampled_from(sorted(PROPERTY_READERS)),
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
    filters=st.fixed_dictionaries(
        {},
        optional={
            "product": st.sampled_from(["writer", "calc", ["writer", "calc"]]),
            "version": st.sampled_from([6, 7, 8, [6, 8]]),
        },
    ),
    top_k=st.integers(1, 8),
    chat=st.booleans(),
)
def test_property_no_key_ever_reads_past_its_reader(
    property_client: TestClient, key: str, words: list[str], filters: dict[str, Any], top_k: int, chat: bool
) -> None:
    reader = PROPERTY_READERS[key]
    readable = {a.kb_id for a in PROPERTY_KB if reader.may_read(allowed_of(a.metadata)) and matches(a, filters)}
    headers = {"authorization": f"Bearer {key}"}
    query = " ".join(words)
    found = property_client.post("/v1/search", json={"query": query, "top_k": top_k, "filters": filters},
                                 headers=headers)  # fmt: skip
    got = [a["kb_id"] for a in found.json()["data"]]
    assert found.status_code == 200 and set(got) <= readable and len(got) == min(top_k, len(readable))
    if chat:
        answer = property_client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": f"How do I {query}?"}], "filters": filters},
            headers=headers,
        )
        extra = answer.json()["ragidx"]
        assert answer.status_code == 200 and {s["kb_id"] for s in extra["sources"]} <= readable
        assert {c["kb_id"] for c in extra["citations"]} <= readable
        others = {a.kb_id for a in PROPERTY_KB if not reader.may_read(allowed_of(a.metadata))}
        assert not any(re.search(rf"https://help/{kb_id}\b", answer.text) for kb_id in others)
