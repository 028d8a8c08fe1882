"""A small embedding server of our own for tests at the HTTP edge: OpenAI's ``POST /v1/embeddings``, Text
Embeddings Inference's ``/embed`` and Ollama's ``/api/embed`` on 127.0.0.1 (port 0), answering as a test tells it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def bag_of_words(text: str, dim: int = 64) -> list[float]:
    """Words hashed into ``dim`` buckets: texts sharing words are near (enough for searches in tests)."""
    v = [0.0] * dim
    for word in re.findall(r"\w+", text.lower()):
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % dim] += 1.0
    return v if any(v) else [1.0] + [0.0] * (dim - 1)


class Server:
    """``POST /v1/embeddings``, ``/embed`` (TEI) and ``/api/embed`` (Ollama) on 127.0.0.1, port 0.

    ``script``: replies to give first, each (status, headers, body); then vectors. ``bodies``: each request's JSON.
    ``barrier``: the first requests wait for each other (proves they were in flight at once).
    """

    def __init__(self, embed: Callable[[str], list[float]] = bag_of_words) -> None:
        self.script: list[tuple[int, dict[str, str], Any]] = []
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.barrier: threading.Barrier | None = None
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.bodies.append(body)
                    outer.paths.append(self.path)
                    outer.headers.append(dict(self.headers))
                    scripted = outer.script.pop(0) if outer.script else None
                if outer.barrier is not None:
                    with contextlib.suppress(threading.BrokenBarrierError):
                        outer.barrier.wait(timeout=10)
                if scripted is not None:
                    status, headers, reply = scripted
                    self._send(status, reply, headers)
                    return
                texts = body.get("input", body.get("inputs"))
                texts = [texts] if isinstance(texts, str) else texts
                vectors = [embed(t) for t in texts]
                if self.path == "/v1/embeddings":
                    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                    reply = {"object": "list", "data": data, "model": body["model"], "usage": {}}
                elif self.path == "/api/embed":
                    reply = {"model": body["model"], "embeddings": vectors}
                else:
                    reply = vectors
                self._send(200, reply, {})

            def _send(self, status: int, reply: Any, headers: dict[str, str]) -> None:
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def texts(self) -> list[str]:
        out: list[str] = []
        for b in self.bodies:
            t = b.get("input", b.get("inputs"))
            out.extend([t] if isinstance(t, str) else t)
        return out
