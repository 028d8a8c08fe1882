"""Test-wide guards (no network but loopback, offline hub, quiet threads) and shared fixtures: a small
real knowledge base, and a PostgreSQL server the tests start and stop themselves."""

from __future__ import annotations

import ipaddress
import itertools
import os
import re
import socket
from collections.abc import Iterator

import pytest

from tests.postgres_server import INSTALL_HINT, PGVECTOR_HINT, PostgresServer, find_bin_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

_DATABASES = itertools.count()
_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


def _is_loopback(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    if not isinstance(address, tuple) or not address:
        return False
    host = address[0]
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class NetworkBlockedError(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _block_network(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection that is not loopback, unless the test is marked ``integration``."""
    if request.node.get_closest_marker("integration"):
        return

    def guarded_connect(self: socket.socket, address: object) -> None:
        if not _is_loopback(address):
            raise NetworkBlockedError(f"test tried to reach {address!r}; mark it 'integration'")
        return _real_connect(self, address)  # type: ignore[arg-type]

    def guarded_connect_ex(self: socket.socket, address: object) -> int:
        if not _is_loopback(address):
            raise NetworkBlockedError(f"test tried to reach {address!r}; mark it 'integration'")
        return _real_connect_ex(self, address)  # type: ignore[arg-type]

    def guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host not in (None, "localhost") and not _is_loopback((host,)):
            raise NetworkBlockedError(f"test tried to resolve {host!r}; mark it 'integration'")
        return _real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


# --- a small real knowledge base, shared by CLI / engine tests ----------------------------------------
SAMPLE_KB = os.path.join(os.path.dirname(__file__), "..", "ragidx", "data", "kb", "libreoffice_en_sample.jsonl")
WRITER_TOPICS = (
    "swriter/guide/indices",
    "swriter/guide/table_",
    "swriter/guide/print",
    "swriter/guide/pagenumbers",
    "swriter/guide/header",
)


@pytest.fixture(scope="session")
def writer_kb_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """26 real LibreOffice Writer help articles (tables of contents, tables, printing, headers) as JSONL."""
    import json

    path = tmp_path_factory.mktemp("kb") / "writer.jsonl"
    with open(SAMPLE_KB, encoding="utf-8") as src, open(path, "w", encoding="utf-8") as out:
        for line in src:
            if any(t in json.loads(line)["id"] for t in WRITER_TOPICS):
                out.write(line)
    return str(path)


# --- a real PostgreSQL server for the shared article store (started and stopped here) -----------------
@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One throwaway server for the session (``tests/postgres_server.py``); each test gets its own database."""
    if find_bin_dir() is None:
        message = f"needs PostgreSQL's server binaries: {INSTALL_HINT}"
        if os.environ.get("RAGIDX_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    server = PostgresServer.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def pg_url(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a fresh, empty database, dropped after the test."""
    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + f"_{next(_DATABASES)}"
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture()
def pgvector_url(postgres_server: PostgresServer, pg_url: str) -> str:
    """``pg_url`` with the pgvector extension created: skipped without pgvector, failed under
    ``RAGIDX_REQUIRE_POSTGRES`` (CI builds it from ``../shared/vendor``)."""
    try:
        postgres_server.execute("CREATE EXTENSION IF NOT EXISTS vector", database=pg_url.rsplit("/", 1)[1])
    except Exception as exc:
        message = f"needs the pgvector extension ({type(exc).__name__}: {exc}): {PGVECTOR_HINT}"
        if os.environ.get("RAGIDX_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    return pg_url
