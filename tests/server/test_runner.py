"""``ragidx serve`` under uvicorn as ``serve()`` runs it (:mod:`ragidx.server.runner`): a real server on a loopback
port in a thread over a real engine; it says where it listens, writes one JSON line per request (never the key)
and one when it stops, and a client that stalls while sending holds its connection for a bounded time only."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from ragidx.config import ServerKey, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.server import create_app
from ragidx.server.runner import LoggedServer, log_to_stderr, uvicorn_config
from tests.dashboard.fakes import make_engine

KEY = "sk-runner-9c2d"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    serve = ServerSettings(keys=[ServerKey(key=KEY, user="ann")], api_keys=["sk-public-1"], request_timeout_s=0.5)
    base = Settings(data_dir=tmp_path_factory.mktemp("runner"))
    with make_engine(base.model_copy(update={"serve": serve})) as eng:
        assert eng.ingest(writer_kb_file).new == 26
        yield eng


@contextmanager
def serving(engine: Engine, log: io.StringIO) -> Iterator[tuple[str, LoggedServer]]:
    stop_logging = log_to_stderr("json", stream=log)
    server = LoggedServer(uvicorn_config(create_app(engine), engine.settings.serve.model_copy(update={"port": 0})),
                          keys=2, readers=2)  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
            time.sleep(0.02)
        yield server.address, server
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        stop_logging()  # other tests' caplog reads these loggers again


def lines(log: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.getvalue().splitlines()]  # every line is one JSON object


def test_it_says_where_it_listens_logs_each_request_as_json_and_says_when_it_stops(engine: Engine) -> None:
    log = io.StringIO()
    with serving(engine, log) as (url, _):
        assert lines(log)[0]["msg"] == f"ragidx serve: listening on {url} (2 keys, 2 readers)"
        found = httpx.post(f"{url}/v1/search", json={"query": "table of contents"},
                           headers={"authorization": f"Bearer {KEY}"})  # fmt: skip
        refused = httpx.get(f"{url}/v1/models", headers={"authorization": "Bearer wrong-key"})
    assert found.status_code == 200 and refused.status_code == 401
    # the 401 names no config source the keys may not have come from
    assert "serve.keys" not in refused.text and "a key this server was given" in refused.json()["error"]["message"]
    start, search, unauthorized, stop = lines(log)
    assert start["event"] == "start" and start["address"] == url and start["level"] == "info"
    assert {k: search[k] for k in ("event", "method", "route", "status", "key", "reader")} == {
        "event": "request", "method": "POST", "route": "/v1/search", "status": 200, "key": "keys[0]",
        "reader": "user:ann",
    }  # fmt: skip
    assert isinstance(search["seconds"], float) and "question" not in search
    assert unauthorized["status"] == 401 and unauthorized["key"] is None and unauthorized["route"] == "/v1/models"
    assert stop["event"] == "stop" and stop["msg"] == "ragidx serve: stopped after 2 requests"
    assert KEY not in log.getvalue() and "wrong-key" not in log.getvalue()


def test_a_question_is_logged_only_when_a_setting_says_so(engine: Engine, tmp_path: Path) -> None:
    serve = engine.settings.serve.model_copy(update={"log_questions": True})
    asking = make_engine(engine.settings.model_copy(update={"serve": serve}))
    log = io.StringIO()
    with serving(asking, log) as (url, _):
        body = {"messages": [{"role": "user", "content": "How do I create a table of contents?"}]}
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60,
                          headers={"authorization": f"Bearer {KEY}"}).status_code == 200  # fmt: skip
    asking.close()
    request = next(line for line in lines(log) if line.get("event") == "request")
    assert request["question"] == "How do I create a table of contents?"


def read_reply(sock: socket.socket) -> bytes:
    sock.settimeout(20)  # far past the server's 0.5 s: a reply or a close, not this, ends the wait
    reply = b""
    while chunk := sock.recv(4096):
        reply += chunk
    return reply


def test_a_client_that_sends_its_headers_then_stalls_gets_408_and_is_closed(engine: Engine) -> None:
    with serving(engine, io.StringIO()) as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(
                b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {KEY}\r\nContent-Length: 100\r\n\r\n".encode()
                + b'{"query": "ta'  # ... and the rest never comes
            )
            reply = read_reply(sock)  # ends: the server closed the connection
    status, _, rest = reply.partition(b"\r\n")
    assert status == b"HTTP/1.1 408 Request Timeout" and b"serve.request_timeout_s" in rest


def test_a_client_that_stalls_within_its_headers_is_closed(engine: Engine) -> None:
    with serving(engine, io.StringIO()) as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nX-Slow: ")  # the headers never end
            assert read_reply(sock) == b""  # closed without a word (no request began)


def test_the_text_format_is_logfmt(engine: Engine) -> None:
    from ragidx.server.runner import LogfmtLines

    record = logging.LogRecord("ragidx.server.access", logging.INFO, __file__, 1, "POST %s", ("/v1/search",), None)
    record.ragidx = {"event": "request", "status": 200, "reader": "user:ann, group:hr", "key": None}
    line = LogfmtLines().format(record)
    assert line.split(" ", 1)[1] == (
        'level=info logger=ragidx.server.access msg="POST /v1/search" event=request status=200 '
        'reader="user:ann, group:hr"'
    )


def test_uvicorns_own_warnings_are_json_lines_too(engine: Engine) -> None:
    log = io.StringIO()
    with serving(engine, log) as (url, _):
        host, port = url.removeprefix("http://").rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert read_reply(sock).startswith(b"HTTP/1.1 400")
        deadline = time.monotonic() + 10  # uvicorn logs after it has answered: on a busy machine, a moment later
        while not any(line["logger"] == "uvicorn.error" for line in lines(log)) and time.monotonic() < deadline:
            time.sleep(0.05)
    warned = [line for line in lines(log) if line["logger"] == "uvicorn.error"]
    assert warned and warned[0]["level"] == "warning" and warned[0]["msg"] == "Invalid HTTP request received."
