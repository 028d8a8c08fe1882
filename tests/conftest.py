"""Test-wide guards: no network but loopback, offline hub, quiet threads."""

from __future__ import annotations

import ipaddress
import os
import socket

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

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
