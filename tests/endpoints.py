"""Real loopback endpoints that fail: a port where nothing listens, and a server that never answers.

``dead_endpoint()`` is a base URL whose port refuses connections (bound and closed again, so nothing listens
on it). ``SilentServer`` accepts every connection on a loopback port in a thread and never reads or writes a
byte: what a stuck or overloaded model server looks like to a client.

Example:
    >>> with SilentServer() as server:  # doctest: +SKIP
    ...     Settings(llm=LLMEndpoint(api_base=server.url, read_timeout_s=1))
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragidx.engine import Engine


def dead_endpoint() -> str:
    """An OpenAI-style base URL on a loopback port that refuses connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with socket.socket() as check:  # nothing took the port in between
        assert check.connect_ex(("127.0.0.1", port)) != 0
    return f"http://127.0.0.1:{port}/v1"


class SilentServer:
    """Accepts connections on a loopback port and never answers (until closed)."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="silent-endpoint", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)  # held open, never read from or written to

    def close(self) -> None:
        with contextlib.suppress(OSError):  # never connected to: nothing to shut down
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in self.accepted:
            conn.close()
        self._thread.join(timeout=5)

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def engine_on(url: str, data_dir: Path, **llm: Any) -> Engine:
    """A real engine (LanceDB, article store, retriever, agent) over the small retrieval KB, with hash
    embeddings, whose chat model is the real OpenAI-protocol client of ``url`` (``llm``: more endpoint
    settings, e.g. ``max_retries=0``)."""
    from ragidx.config import LLMEndpoint, Settings
    from ragidx.engine import Engine
    from tests.fakes.hash_embedding import HashEmbedding
    from tests.retrieval.helpers import KB

    settings = Settings(
        data_dir=data_dir,
        chunk_tokens=64,
        chunk_overlap_tokens=8,
        llm=LLMEndpoint(model="m", api_base=url, **llm),
    )
    engine = Engine(settings, embed_model=HashEmbedding(dim=256))
    report = engine.ingest(KB)
    assert report.new == len(KB) and not report.errors
    return engine
