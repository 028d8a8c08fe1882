"""Scripted model services on loopback for the slim-install tests: an OpenAI-compatible ``/v1/chat/completions``
(streamed or not) and ``/v1/embeddings``, in a thread, with the standard library only.

These are TEST DOUBLES at the HTTP edge, written here (the slim install has no model to run): the chat model
calls the search tool once with the question, then answers citing source [1]; the embeddings are word hashes
(texts sharing words get close vectors), so search finds the article that shares the question's words. What
the client sends is the real thing: the OpenAI client of llama-index, ragidx's embedding client.

Usage::

    with ModelServices() as services:
        services.url  # 'http://127.0.0.1:PORT/v1'
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

ANSWER = "Choose Table - Insert Table and set the rows and columns [1]."
DIM = 64


def embed(text: str) -> list[float]:
    """A unit vector of ``DIM`` from the text's lower-cased words (feature hashing)."""
    vector = [0.0] * DIM
    for word in re.findall(r"\w+", text.lower()):
        digest = hashlib.sha256(word.encode()).digest()
        vector[digest[0] % DIM] += 1.0 if digest[1] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


class ModelServices:
    """The chat and embedding services on 127.0.0.1 (a free port); ``url`` is the OpenAI-style base (``.../v1``)."""

    def __init__(self) -> None:
        self.chat_requests: list[dict[str, Any]] = []
        self.embedding_inputs: int = 0
        services = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - the http.server name
                self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self) -> None:  # noqa: N802 - the http.server name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path.endswith("/embeddings"):
                    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    services.embedding_inputs += len(texts)
                    data = [{"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)]
                    usage = {"prompt_tokens": len(texts), "total_tokens": len(texts)}
                    return self._json(200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage})
                if self.path.endswith("/chat/completions"):
                    services.chat_requests.append(body)
                    return self._chat(body)
                return self._json(404, {"error": {"message": f"no route {self.path}"}})

            def _chat(self, body: dict[str, Any]) -> None:
                searched = any(m.get("role") == "tool" for m in body.get("messages", []))
                message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
                if body.get("tools") and not searched:
                    question = next(
                        (_text(m) for m in reversed(body["messages"]) if m.get("role") == "user"), "the question"
                    )
                    name = body["tools"][0]["function"]["name"]
                    call = {"id": "call_1", "type": "function",
                            "function": {"name": name, "arguments": json.dumps({"query": question})}}  # fmt: skip
                    message = {"role": "assistant", "content": None, "tool_calls": [call]}
                finish = "tool_calls" if message.get("tool_calls") else "stop"
                if not body.get("stream"):
                    choice = {"index": 0, "message": message, "finish_reason": finish}
                    self._json(200, _completion("chat.completion", [choice]))
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                if message.get("tool_calls"):
                    calls = [{"index": 0, **message["tool_calls"][0]}]
                    deltas: list[dict[str, Any]] = [{"role": "assistant", "tool_calls": calls}]
                else:
                    words = ANSWER.split(" ")
                    deltas = [{"role": "assistant", "content": ""}]
                    deltas += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
                for delta in deltas:
                    self._event(
                        _completion("chat.completion.chunk", [{"index": 0, "delta": delta, "finish_reason": None}])
                    )
                self._event(_completion("chat.completion.chunk", [{"index": 0, "delta": {}, "finish_reason": finish}]))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def _event(self, data: dict[str, Any]) -> None:
                self.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
                self.wfile.flush()

            def _json(self, status: int, data: dict[str, Any]) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, name="model-services", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ModelServices:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _completion(kind: str, choices: list[dict[str, Any]]) -> dict[str, Any]:
    usage = {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    return {"id": "chatcmpl-1", "object": kind, "created": int(time.time()), "model": "scripted",
            "choices": choices, **({"usage": usage} if kind == "chat.completion" else {})}  # fmt: skip
