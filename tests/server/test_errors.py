"""``ragidx serve``'s errors: a request it cannot answer is a 400 saying what was wrong with it; nothing a client
sends makes a 500; and no error, whatever happened, carries SQL, a file path, the reader's user or groups, or the
tenant. A real engine (LanceDB, article store, retriever, agent; hash embeddings, a scripted chat model) under
the real app, asked through Starlette's TestClient, and a hypothesis property over random filters, bodies and
Unicode."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ragidx.article import Article
from ragidx.config import ServerKey, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.server import create_app
from tests.dashboard.fakes import make_engine

KEY = "sk-errors-5b1e"
USER, GROUP, TENANT = "ann-reader-q", "grp-secret-q", "tenant-acme-q"
AUTH = {"authorization": f"Bearer {KEY}"}
KB = [
    Article(f"a{i}", f"Printing {i}", f"https://help/a{i}", f"To print labels choose File Print number {i}.", "en",
            {"product": ("writer", "calc")[i % 2], "version": 6 + i % 3, "score": 0.5 + i})
    for i in range(6)
]  # fmt: skip


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    base = Settings(data_dir=tmp_path_factory.mktemp("errors"), top_k=3, max_tool_rounds=1, plan_searches="never")
    serve = ServerSettings(keys=[ServerKey(key=KEY, user=USER, groups=[GROUP])])
    with make_engine(base.model_copy(update={"serve": serve, "tenant": TENANT})) as eng:
        assert eng.ingest(KB, source_name="kb").new == len(KB)
        yield eng


@pytest.fixture(scope="module")
def http(engine: Engine) -> Iterator[TestClient]:
    with TestClient(create_app(engine), raise_server_exceptions=False) as client:
        yield client


def leaks(text: str, data_dir: Path) -> list[str]:
    """What of the server's insides ``text`` (a whole response) shows."""
    marks = ["SELECT", "WHERE", "lance", "/site-packages/", str(data_dir), USER, GROUP, TENANT, "Traceback"]
    return [m for m in marks if m.lower() in text.lower()] if text else []


def post(http: TestClient, route: str, body: bytes | dict[str, Any]) -> Any:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return http.post(route, content=content, headers={**AUTH, "content-type": "application/json"})


def deep(levels: int) -> bytes:
    return b'{"query": "print", "x": ' + b"[" * levels + b"]" * levels + b"}"


BAD = [
    # filters: values a store cannot compare, fields that are not the articles' own
    ("/v1/search", {"query": "print", "filters": ["chunk_no>=1e308"]}, "chunk_no"),
    ("/v1/search", {"query": "print", "filters": ["version>=1e308"]}, "not a number within"),
    ("/v1/search", {"query": "print", "filters": ["version>=" + "9" * 400]}, "not a number within"),
    ("/v1/search", b'{"query": "print", "filters": {"version": ' + b"9" * 400 + b"}}", "64-bit"),
    ("/v1/search", {"query": "print", "filters": {"version": -(2**63) - 1}}, "64-bit"),
    ("/v1/search", {"query": "print", "filters": {"tenant": "other"}}, "not a field requests may filter on"),
    ("/v1/search", {"query": "print", "filters": {"nope": 1}}, "filterable fields are"),
    ("/v1/search", b'{"query": "print", "filters": {"version": NaN}}', "not a JSON number"),
    # bodies: nested too deeply, lone surrogates anywhere
    ("/v1/search", deep(10_000), "nested too deeply"),
    ("/v1/search", deep(40), "nested deeper than 32"),
    ("/v1/search", b'{"query": "print \\ud800"}', "lone surrogate"),
    ("/v1/search", b'{"query": "print", "filters": {"product": "\\udfff"}}', "lone surrogate"),
    ("/v1/search", b'{"query": "print", "\\ud83d": 1}', "lone surrogate"),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "How do I print \\ud800?"}]}', "surrogate"),
    # 1500 characters (within serve.max_question_chars) but more than 2000 tokens
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "\U0001f600" * 1500}]}, "tokens long"),
]


@pytest.mark.parametrize(("route", "body", "wanted"), BAD)
def test_what_a_client_sends_wrong_is_a_400_that_shows_nothing_inside(
    http: TestClient, engine: Engine, route: str, body: Any, wanted: str
) -> None:
    response = post(http, route, body)
    assert response.status_code == 400, response.text
    assert wanted in response.json()["error"]["message"]
    assert leaks(response.text, engine.settings.data_dir) == []


def test_the_unknown_field_error_lists_the_articles_own_fields_only(http: TestClient) -> None:
    message = post(http, "/v1/search", {"query": "print", "filters": {"nope": 1}}).json()["error"]["message"]
    listed = set(message.rpartition("filterable fields are ")[2].split(", "))
    assert {"product", "version", "score", "kb_id", "title"} <= listed
    assert not listed & {"chunk_no", "tenant", "id", "allowed", "public", "location_url"}


def test_an_unexpected_failure_is_a_500_with_an_error_id_and_the_details_only_in_the_log(
    engine: Engine, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside = f"SELECT * FROM Articles WHERE tenant = '{TENANT}' AND allowed = 'user:{USER}' (/x/site-packages/lance)"

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(inside)

    monkeypatch.setattr(engine, "retrieve", broken)
    with TestClient(create_app(engine), raise_server_exceptions=False) as client:
        response = post(client, "/v1/search", {"query": "print"})
    assert response.status_code == 500
    message = response.json()["error"]["message"]
    assert message.startswith("answering failed (error id ") and message.endswith("): see the server log")
    assert leaks(response.text, engine.settings.data_dir) == []
    error_id = message.split("error id ")[1].split(")")[0]
    logged = [r for r in caplog.records if error_id in r.getMessage()]
    assert logged and logged[0].exc_info and inside in str(logged[0].exc_info[1])  # the details: in the log only


# --- property: nothing a client sends makes a 5xx or shows the insides ----------------------------------------
FIELDS = ["product", "version", "score", "kb_id", "title", "chunk_no", "tenant", "allowed", "nope", "id"]
text = st.one_of(
    st.text(st.characters(codec=None), max_size=12),  # any code point, lone surrogates included
    st.sampled_from(["\ud800", "print \udfff", "writer", "print labels", "", "x'; --"]),
)
huge = st.sampled_from([2**63, -(2**63) - 1, 10**400, 2**63 - 1])
number = st.one_of(st.integers(), huge, st.floats(allow_nan=True, allow_infinity=True), st.booleans())
number_text = st.one_of(
    st.integers().map(str), st.floats().map(repr), huge.map(str), st.sampled_from(["1e308", "-1e308", "1e400"])
)
scalar = st.one_of(text, number, st.none())
json_value = st.recursive(scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                          max_leaves=8)  # fmt: skip
operators = st.sampled_from(["=", "!=", ">=", "<=", ">", "<", " in ", " not in ", " ~ "])
condition = st.builds(lambda f, op, v: f"{f}{op}{v}", st.sampled_from(FIELDS) | text, operators,
                      st.one_of(text, number_text))  # fmt: skip
filters = st.one_of(
    st.dictionaries(st.sampled_from(FIELDS) | text, st.one_of(scalar, st.lists(scalar, max_size=3)), max_size=3),
    st.lists(st.one_of(condition, json_value), max_size=3),
    json_value,
)
search_body = st.fixed_dictionaries(
    {"query": st.one_of(text, st.sampled_from(["print labels", "calc"]), json_value)},
    optional={"filters": filters, "top_k": st.one_of(st.integers(-5, 200), json_value)},
)
chat_body = st.fixed_dictionaries(
    {"messages": st.one_of(
        st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool"]) | text,
                                        "content": st.one_of(text, json_value)}), max_size=3),
        json_value)},
    optional={"filters": filters, "stream": st.booleans()},
)  # fmt: skip


@settings(max_examples=int(os.environ.get("SERVE_ERROR_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    route=st.sampled_from(["/v1/search", "/v1/chat/completions"]),
    search=search_body,
    chat=chat_body,
    raw=st.one_of(
        st.none(),
        st.none(),
        st.binary(max_size=40),
        st.text(max_size=40).map(lambda t: t.encode("utf-8", "replace")),
        st.integers(1, 20_000).map(deep),
    ),
)
def test_property_no_request_makes_a_5xx_or_shows_the_insides(
    http: TestClient, engine: Engine, route: str, search: dict[str, Any], chat: dict[str, Any], raw: bytes | None
) -> None:
    # json.dumps writes a lone surrogate as \ud800, as a client's JSON library does
    body = raw if raw is not None else json.dumps(search if route == "/v1/search" else chat).encode()
    response = post(http, route, body)
    assert response.status_code < 500, response.text
    found = leaks(response.text, engine.settings.data_dir)
    assert response.status_code == 200 or found == [], (response.status_code, response.text)
    if response.status_code != 200:
        assert response.json()["error"]["message"]


def test_the_server_log_records_no_key(http: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ragidx.server")
    post(http, "/v1/search", {"query": "print", "filters": {"nope": 1}})
    assert KEY not in caplog.text
