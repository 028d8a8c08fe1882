"""A loopback rerank server for tests: the ``/rerank`` request and answer shapes of Cohere (and Jina, vLLM,
Infinity), Voyage and Text Embeddings Inference, at the HTTP edge only.

This is a TEST DOUBLE written here, not a real rerank service: no rerank server runs offline on this machine
(Infinity, TEI and vLLM download their models at start; llama.cpp's server reranks only with a reranker GGUF,
which no PyPI package ships). It scores a document by how many of the query's words it holds, answers in the
shape its ``api`` names, sorted by score and cut to ``top_n`` / ``top_k``, and records every request. Failures
are real HTTP: ``fail_next`` queues answers (status, headers, body) sent before the normal ones.

Example:
    >>> with RerankServer("tei") as server:  # doctest: +SKIP
    ...     EndpointChunkReranker(url=server.url + "/rerank", api="tei")
"""

from __future__ import annotations

import json
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


class RerankServer:
    """A ``/rerank`` server on 127.0.0.1 (a free port) in a thread; ``url`` is its base URL."""

    def __init__(self, api: str = "cohere") -> None:
        self.api = api
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_next: deque[tuple[int, dict[str, str], str]] = deque()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                server.requests.append(body)
                server.headers.append(dict(self.headers))
                if self.path != "/rerank":
                    return self._send(404, {}, json.dumps({"error": f"no route {self.path}"}))
                if server.fail_next:
                    return self._send(*server.fail_next.popleft())
                field = "texts" if server.api == "tei" else "documents"
                if field not in body:  # what the real servers answer to another service's request shape
                    return self._send(422, {}, json.dumps({"error": f"missing field `{field}`"}))
                return self._send(200, {}, json.dumps(server.answer(body)))

            def _send(self, status: int, headers: dict[str, str], text: str) -> None:
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="rerank-server", daemon=True)
        self._thread.start()

    def answer(self, body: dict[str, Any]) -> Any:
        """The answer to ``body`` in this server's shape: documents scored by the query words they hold."""
        words = set(str(body["query"]).lower().split())
        docs = body["texts"] if self.api == "tei" else body["documents"]
        scores = sorted(
            ((i, len(words & set(str(d).lower().split())) / (len(words) or 1)) for i, d in enumerate(docs)),
            key=lambda p: -p[1],
        )
        if self.api == "tei":
            return [{"index": i, "score": s} for i, s in scores]
        keep = body.get("top_k" if self.api == "voyage" else "top_n") or len(scores)
        rows = [{"index": i, "relevance_score": s} for i, s in scores[:keep]]
        return {"data": rows, "object": "list"} if self.api == "voyage" else {"id": "r", "results": rows}

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> RerankServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
