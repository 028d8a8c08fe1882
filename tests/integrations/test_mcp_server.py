"""``ragidx mcp`` through the MCP SDK's own client: over stdio (a real ``ragidx mcp`` process, its reader from
settings) and over streamable HTTP (``ragidx serve``'s app on a loopback port, MCP at ``/mcp``, each API key's
reader). The serving tests' knowledge base and readers (tests/server/test_readers.py): no tool result, resource
list, resource or error carries an article its reader may not read. Real stores, retriever and agent; hash
embeddings and a scripted chat model (tests.dashboard.fakes)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from ragidx.config import ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.integrations.mcp_server import ARTICLE_URI, build_server
from ragidx.integrations.mcp_settings import McpSettings
from ragidx.server import create_app
from ragidx.stores.access import allowed_of
from tests.dashboard.fakes import make_engine
from tests.server.helpers import running
from tests.server.test_readers import (
    ANN_KEY,
    ANN_KEY_ENV,
    HR_KEY,
    KB,
    PROPERTY_KB,
    PROPERTY_READERS,
    PUBLIC_KEY,
    QUESTION,
    READS,
    SECRETS,
    WORDS,
    assert_hides,
    matches,
    server_settings,
)

ROOT = Path(__file__).resolve().parents[2]


def kb_settings(data_dir: Path, **more: Any) -> Settings:
    return Settings(data_dir=data_dir, top_k=4, max_tool_rounds=1, plan_searches="never", **more)


async def everything(client: Client) -> dict[str, Any]:
    """What a reader gets from every tool and resource: the results as sent (JSON), and the ids they name."""
    tools = await client.list_tools()
    found = await client.call_tool("search", {"query": QUESTION, "top_k": 10})
    asked = await client.call_tool("ask", {"question": QUESTION})
    listed: list[types.Resource] = []
    cursor = None
    while True:  # page by page (a page of 2 on these servers)
        page = await client.list_resources(cursor=cursor)
        listed += page.resources
        if not (cursor := page.next_cursor):
            break
    read = {r.name: await client.read_resource(r.uri) for r in listed}
    gets = {kb_id: await client.call_tool("get_article", {"kb_id": kb_id}) for kb_id in ("pub-labels", *SECRETS)}
    return {
        "tools": {t.name for t in tools.tools},
        "search": found,
        "ask": asked,
        "listed": [r.name for r in listed],
        "read": read,
        "get": gets,
        "wire": "".join(x.model_dump_json() for x in (found, asked, *listed, *read.values(), *gets.values())),
    }


def check_reader(got: dict[str, Any], readable: set[str], key_for_hiding: str) -> None:
    assert got["tools"] == {"search", "ask", "get_article"}
    found = got["search"]
    assert not found.is_error and {a["kb_id"] for a in found.structured_content["articles"]} == readable
    assert found.content[0].text.startswith("[1] ")
    asked = got["ask"]
    extra = asked.structured_content
    assert not asked.is_error and extra["citations"] and {c["kb_id"] for c in extra["citations"]} <= readable
    assert {s["kb_id"] for s in extra["sources"]} <= readable
    assert "\n\nSources:\n[1] " in asked.content[0].text
    assert got["listed"] == sorted(readable)  # every readable article, in id order, across pages
    for kb_id, result in got["read"].items():
        assert result.contents[0].uri == ARTICLE_URI + kb_id and f"kb_id: {kb_id}" in result.contents[0].text
    for kb_id, result in got["get"].items():
        if kb_id in readable:
            assert not result.is_error and result.structured_content["kb_id"] == kb_id
            assert "allowed" not in result.structured_content["metadata"]  # who may read it is never shown
        else:  # the same words as for an id that does not exist
            assert result.is_error and result.content[0].text.startswith(f"no article {kb_id!r} that you may read")
    assert_hides_ids(got, readable, key_for_hiding)


def assert_hides_ids(got: dict[str, Any], readable: set[str], key: str) -> None:
    wire = got["wire"]
    for kb_id, title in SECRETS.items():
        if kb_id not in readable:
            # the id appears once, in our own get_article request's refusal; never its title or URL
            assert title not in wire and f"https://help/{kb_id.split('-')[1]}" not in wire
    if key:
        assert_hides(got["ask"].model_dump_json() + got["search"].model_dump_json(), key)


# --- stdio: a real `ragidx mcp` process ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("mcp-kb")
    with make_engine(kb_settings(data_dir)) as engine:
        assert engine.ingest(KB, source_name="kb").new == len(KB)
    return data_dir


def stdio(data_dir: Path, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ragidx.cli", "--data-dir", str(data_dir), "mcp"],
        env={
            "PYTHONPATH": str(ROOT),
            "RAGIDX_MCP_ENGINE_FACTORY": "tests.dashboard.fakes:make_engine",
            "RAGIDX_TOP_K": "4",
            "RAGIDX_MAX_TOOL_ROUNDS": "1",
            "RAGIDX_PLAN_SEARCHES": "never",
            "RAGIDX_MCP__PAGE_SIZE": "2",
            "HF_HUB_OFFLINE": "1",
            **env,
        },
        cwd=str(ROOT),
    )


@pytest.mark.parametrize(
    ("env", "readable"),
    [
        ({"RAGIDX_MCP__USER": "ann"}, READS[ANN_KEY]),
        ({"RAGIDX_MCP__GROUPS": '["hr"]'}, READS[HR_KEY]),
        ({}, READS[PUBLIC_KEY]),
    ],
    ids=["ann", "hr", "public"],
)
def test_stdio_server_reads_as_the_configured_reader(kb_dir: Path, env: dict[str, str], readable: set[str]) -> None:
    async def run() -> dict[str, Any]:
        async with Client(stdio(kb_dir, **env), read_timeout_seconds=120) as client:
            return await everything(client)

    check_reader(asyncio.run(run()), readable, "")


def test_stdio_tool_errors_are_clear_and_name_nothing_held(kb_dir: Path) -> None:
    async def run() -> list[types.CallToolResult]:
        async with Client(stdio(kb_dir), read_timeout_seconds=120) as client:
            return [
                await client.call_tool("search", {"query": "print", "filters": {"no_such_field": "x"}}),
                await client.call_tool("search", {"query": "  "}),
                await client.call_tool("search", {"query": "print", "top_k": 0}),
                await client.call_tool("ask", {"question": "print?", "filters": ["product ~ writer"]}),
                await client.call_tool("get_article", {"kb_id": "no-such-article"}),
            ]

    bad_field, empty, top_k, bad_filter, missing = asyncio.run(run())
    assert all(r.is_error for r in (bad_field, empty, top_k, bad_filter, missing))
    assert "no article carries it; filterable fields are" in bad_field.content[0].text
    assert "allowed" not in bad_field.content[0].text.split("filterable fields are")[1]
    assert empty.content[0].text == "query must be a non-empty string"
    assert top_k.content[0].text == "top_k must be a whole number from 1 to 20"
    assert "write key=value" in bad_filter.content[0].text
    assert missing.content[0].text == "no article 'no-such-article' that you may read: check the id with search"


# --- streamable HTTP inside ragidx serve's app -----------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ANN_KEY_ENV, ANN_KEY)
        settings = kb_settings(
            tmp_path_factory.mktemp("mcp-http"), serve=server_settings(), mcp=McpSettings(serve=True, page_size=2)
        )
        with make_engine(settings) as eng:
            assert eng.ingest(KB, source_name="kb").new == len(KB)
            yield eng


@pytest.fixture(scope="module")
def base_url(engine: Engine) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ANN_KEY_ENV, ANN_KEY)
        app = create_app(engine)
    with running(app) as url:
        yield url


def http_client(base_url: str, key: str | None, **options: Any) -> Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    transport = streamable_http_client(f"{base_url}/mcp", http_client=create_mcp_http_client(headers=headers))
    return Client(transport, **options)


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026 protocol's per-request envelope, and the handshake
@pytest.mark.parametrize("key", [ANN_KEY, HR_KEY, PUBLIC_KEY], ids=["ann", "hr", "public"])
def test_each_key_reads_only_what_its_reader_may_over_mcp(base_url: str, key: str, mode: str) -> None:
    async def run() -> dict[str, Any]:
        async with http_client(base_url, key, mode=mode) as client:  # type: ignore[arg-type]
            return await everything(client)

    check_reader(asyncio.run(run()), READS[key], key)


def test_filters_narrow_within_the_keys_reader_and_never_widen(base_url: str) -> None:
    async def run() -> list[types.CallToolResult]:
        async with http_client(base_url, ANN_KEY) as client:
            return [
                await client.call_tool("search", {"query": QUESTION, "top_k": 10, "filters": {"product": "writer"}}),
                await client.call_tool("search", {"query": QUESTION, "top_k": 10, "filters": ["allowed in group:hr"]}),
                await client.call_tool("ask", {"question": QUESTION, "filters": {"allowed": "group:hr"}}),
            ]

    writer, widened, asked = asyncio.run(run())
    assert {a["kb_id"] for a in writer.structured_content["articles"]} == {"pub-labels", "ann-notes"}
    assert widened.structured_content["articles"] == []
    assert asked.structured_content["sources"] == [] and asked.structured_content["not_found"]
    for result in (writer, widened, asked):
        assert_hides(result.model_dump_json(), ANN_KEY)


def test_a_missing_or_wrong_key_is_refused_before_mcp(base_url: str) -> None:
    for headers in ({}, {"Authorization": f"Bearer {ANN_KEY}x"}):
        response = httpx.post(
            f"{base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"

    async def run() -> None:
        async with http_client(base_url, None) as client:
            await client.list_tools()

    with pytest.raises(Exception):  # noqa: B017 - the client's own error for an HTTP 401
        asyncio.run(run())


def test_mcp_is_answered_only_when_configured(engine: Engine) -> None:
    plain = make_engine(engine.settings.model_copy(update={"mcp": McpSettings(), "serve": ServerSettings()}))
    with running(create_app(plain)) as url:
        response = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert response.status_code == 404
    plain.close()


def test_a_keyless_server_answers_mcp_as_the_public_reader(engine: Engine) -> None:
    keyless = make_engine(engine.settings.model_copy(update={"serve": ServerSettings()}))

    async def run(url: str) -> dict[str, Any]:
        async with http_client(url, None) as client:
            return await everything(client)

    with running(create_app(keyless)) as url:
        check_reader(asyncio.run(run(url)), READS[PUBLIC_KEY], PUBLIC_KEY)
        rebound = httpx.post(  # a page that rebinds its own name to 127.0.0.1 sends its own Host
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={"Host": "evil.example", "Accept": "application/json, text/event-stream"},
        )
        assert rebound.status_code in (403, 421)
    keyless.close()


def test_an_unknown_resource_and_a_bad_cursor_are_clear_errors(base_url: str) -> None:
    async def run() -> list[str]:
        errors = []
        async with http_client(base_url, PUBLIC_KEY) as client:
            for call in (
                client.read_resource(ARTICLE_URI + "hr-payroll"),
                client.read_resource("file:///etc/passwd"),
                client.list_resources(cursor="%%%"),
            ):
                with pytest.raises(MCPError) as caught:
                    await call
                errors.append(caught.value.error.message)
        return errors

    hidden, unknown, cursor = asyncio.run(run())
    assert hidden == "no article 'hr-payroll' that you may read: check the id with search"
    assert unknown == f"unknown resource: write {ARTICLE_URI}KB_ID"
    assert cursor == "this cursor is not one this server gave"


# --- property: any reader, any filters, any query: nothing past the reader, exactly what matches ---------------
@pytest.fixture(scope="module")
def property_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    settings = kb_settings(tmp_path_factory.mktemp("mcp-property"), mcp=McpSettings(page_size=4))
    with make_engine(settings.model_copy(update={"top_k": 5})) as eng:
        assert eng.ingest(PROPERTY_KB, source_name="kb").new == len(PROPERTY_KB)
        yield eng


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
    wanted=st.lists(st.sampled_from([a.kb_id for a in PROPERTY_KB]), min_size=1, max_size=3),
)
def test_property_no_reader_ever_reads_past_itself_over_mcp(
    property_engine: Engine, key: str, words: list[str], filters: dict[str, Any], top_k: int, wanted: list[str]
) -> None:
    reader = PROPERTY_READERS[key]
    may = {a.kb_id for a in PROPERTY_KB if reader.may_read(allowed_of(a.metadata))}
    readable = {a.kb_id for a in PROPERTY_KB if a.kb_id in may and matches(a, filters)}
    server = build_server(property_engine, reader=lambda ctx: reader)

    async def run() -> tuple[Any, Any, list[str], dict[str, bool]]:
        async with Client(server) as client:
            found = await client.call_tool("search", {"query": " ".join(words), "top_k": top_k, "filters": filters})
            asked = await client.call_tool("ask", {"question": f"How do I {' '.join(words)}?", "filters": filters})
            listed: list[str] = []
            cursor = None
            while True:
                page = await client.list_resources(cursor=cursor)
                listed += [r.name for r in page.resources]
                if not (cursor := page.next_cursor):
                    break
            got = {k: not (await client.call_tool("get_article", {"kb_id": k})).is_error for k in wanted}
            return found, asked, listed, got

    found, asked, listed, got = asyncio.run(run())
    ids = [a["kb_id"] for a in found.structured_content["articles"]]
    assert set(ids) <= readable and len(ids) == min(top_k, len(readable))
    assert {s["kb_id"] for s in asked.structured_content["sources"]} <= readable
    assert {c["kb_id"] for c in asked.structured_content["citations"]} <= readable
    assert listed == sorted(may)  # every article it may read, page by page, and no other
    assert got == {k: k in may for k in wanted}


def test_mcp_http_on_the_command_line_is_ragidx_serve_with_mcp_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx import server
    from ragidx.cli import main

    served: list[Settings] = []
    monkeypatch.setattr(server, "serve", lambda settings, **kw: served.append(settings))
    assert main(["--data-dir", str(tmp_path), "mcp", "--http", "--port", "8123"]) == 0
    assert served[0].mcp.serve and served[0].serve.port == 8123 and served[0].serve.host == "127.0.0.1"


def test_a_failing_store_is_an_error_id_never_its_text(
    property_engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("SELECT content FROM articles WHERE tenant = 'acme' -- /srv/kb/articles.db")

    monkeypatch.setattr(property_engine.article_store, "get", broken)
    server = build_server(property_engine, reader=lambda ctx: PROPERTY_READERS["k-ann"])

    async def run() -> list[str]:
        texts = []
        async with Client(server, mode="legacy") as client:  # the handshake era sends an error's own text
            texts.append((await client.call_tool("get_article", {"kb_id": "a1"})).content[0].text)
            for call in (client.list_resources(), client.read_resource(ARTICLE_URI + "a1")):
                with pytest.raises(MCPError) as caught:
                    await call
                texts.append(caught.value.error.message)
        return texts

    tool, listing, reading = asyncio.run(run())
    assert tool.startswith("the tool failed (error id ") and tool.endswith("): see the server log")
    assert listing.startswith("listing failed (error id ") and reading.startswith("reading failed (error id ")
    for text in (tool, listing, reading):
        assert "SELECT" not in text and "acme" not in text and "/srv" not in text
        assert text.split("error id ")[1][:12] in caplog.text  # the log holds the details under the same id
