"""``ragidx serve`` under uvicorn: its timeouts and what it writes to its log.

The server's log lines go to stderr from the ``ragidx.server`` loggers, one per line, in one of two formats
(``serve.log_format``):

- ``json`` (the default): one JSON object per line, for log collectors (Loki, Elasticsearch, CloudWatch, ``jq``).
  Every line has ``time`` (UTC, ISO 8601), ``level``, ``logger`` and ``msg``; the start, stop and access lines add
  their fields (``event``: ``start``, ``stop``, ``request``)::

      {"time": "2026-11-28T11:02:03.125Z", "level": "info", "logger": "ragidx.server.runner",
       "msg": "ragidx serve: listening on http://127.0.0.1:8000 (2 keys, 2 readers)", "event": "start",
       "address": "http://127.0.0.1:8000", "keys": 2, "readers": 2}
      {"time": "...", "level": "info", "logger": "ragidx.server.access", "msg": "POST /v1/search 200 ...",
       "event": "request", "method": "POST", "route": "/v1/search", "status": 200, "seconds": 0.041,
       "key": "keys[0]", "reader": "user:ann"}
      {"time": "...", "level": "info", "logger": "ragidx.server.runner",
       "msg": "ragidx serve: stopped after 1 requests", "event": "stop", "requests": 1}

  (each object on one line; wrapped here).

- ``text``: the same fields as logfmt (``key=value`` pairs, values with spaces quoted).

An access line names the key by its entry in the settings (``keys[0]``, ``api_keys[1]``) and its reader, never
the key; the question only with ``serve.log_questions`` (:func:`ragidx.server.app._log_access`).

Timeouts: uvicorn waits for a request's headers for ever; a client that sends part of them and stalls would hold
its connection as long as it likes. Here a connection must deliver its first request's headers within
``serve.request_timeout_s`` (:class:`HeaderDeadline`), its body within the same time (the app answers 408), and
between requests on a kept-alive connection 5 s may pass. On Ctrl-C, answers still running get the same time to
finish before they are stopped. uvicorn's own warnings and errors are written in the same format.

Example:
    >>> config = uvicorn_config(app, ServerSettings())        # doctest: +SKIP
    >>> LoggedServer(config, keys=0, readers=0).run()           # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, Literal

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HeaderDeadline", "JsonLines", "LogfmtLines", "LoggedServer", "log_to_stderr", "uvicorn_config"]

logger = logging.getLogger(__name__)

KEEP_ALIVE_S = 5
MAX_HEADER_BYTES = 16 * 1024
"""The most a request's line and headers may hold (h11's limit; a larger one is answered 400 and closed)."""


def _line(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, Any]:
    """What a log line holds, in order: ``time``, ``level``, ``logger``, ``msg``, the record's ``ragidx`` fields,
    and ``error`` (the exception's type and text) and ``traceback`` when it has one."""
    fields = getattr(record, "ragidx", None)
    line: dict[str, Any] = {
        "time": _utc(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
        "msg": record.getMessage(),
        **(fields if isinstance(fields, dict) else {}),
    }
    if record.exc_info and record.exc_info[1] is not None:
        line["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        line["traceback"] = formatter.formatException(record.exc_info)
    return line


class JsonLines(logging.Formatter):
    """A record as one JSON object on one line (:func:`_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_line(self, record), ensure_ascii=False, default=str)


class LogfmtLines(logging.Formatter):
    """A record as logfmt: ``time=... level=info logger=... msg="..." key=value ...`` on one line (:func:`_line`)."""

    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt(v)}" for k, v in _line(self, record).items() if v is not None)


def _logfmt(value: Any) -> str:
    text = str(value)
    if text and not any(c in text for c in ' "=\\\n\t'):
        return text
    return json.dumps(text, ensure_ascii=False)


def _utc(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def log_to_stderr(log_format: Literal["json", "text"] = "json", stream: Any = None) -> Callable[[], None]:
    """Write the ``ragidx.server`` loggers (start, stop, access lines, errors) at INFO and uvicorn's own (its
    warnings and errors) to ``stream`` (stderr) in ``log_format``, whatever the root logger's level and format;
    returns what undoes it (the loggers as they were)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLines() if log_format == "json" else LogfmtLines())
    # uvicorn.error named as well as its parent: uvicorn's own logging config (any uvicorn.Config in the process with
    # its default log_config) may leave either one propagating elsewhere
    loggers = [logging.getLogger(name) for name in ("ragidx.server", "uvicorn", "uvicorn.error")]
    kept = [(lg, lg.level, lg.propagate) for lg in loggers]
    loggers[0].setLevel(logging.INFO)
    for lg in loggers:
        lg.addHandler(handler)
        lg.propagate = False  # not again through the root logger's handler, in its format

    def undo() -> None:
        for lg, level, propagate in kept:
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = propagate

    return undo


class HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for the first request's headers: a connection that has not sent
    them within ``header_timeout_s`` is closed. (uvicorn itself has none: a client sending a byte a minute would
    hold its connection for ever.) Kept-alive connections fall under uvicorn's keep-alive timeout after that."""

    def __init__(self, *args: Any, header_timeout_s: float = 30.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = header_timeout_s
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _headers_late(self) -> None:
        if self.cycle is None and not self.transport.is_closing():  # no request has begun
            logger.info(
                "closed a connection that sent no request headers within %g s",
                self.header_timeout_s,
                extra={"ragidx": {"event": "header_timeout"}},
            )
            self.transport.close()


def uvicorn_config(app: Any, serve: Any, *, log_level: str = "warning") -> uvicorn.Config:
    """uvicorn's settings for ``app`` from ``serve`` (:class:`~ragidx.config.ServerSettings`): its address, the
    timeouts of the module docstring, and no uvicorn access log (the app writes its own)."""
    return uvicorn.Config(
        app,
        host=serve.host,
        port=serve.port,
        log_level=log_level,
        access_log=False,
        log_config=None,  # uvicorn's lines through log_to_stderr's handler, not a format of uvicorn's own
        http=functools.partial(HeaderDeadline, header_timeout_s=serve.request_timeout_s),  # type: ignore[arg-type]
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_graceful_shutdown=max(1, math.ceil(serve.request_timeout_s)),  # then answers still running stop
        lifespan="off",
    )


class LoggedServer(uvicorn.Server):
    """A uvicorn server that says where it listens once it does (the port bound, also for port 0) and when it
    stops, on :data:`logger`.

    Args:
        config: uvicorn's settings (:func:`uvicorn_config`).
        keys: the API keys the app was given; ``readers``: the distinct readers they read as.
    """

    def __init__(self, config: uvicorn.Config, *, keys: int, readers: int) -> None:
        super().__init__(config)
        self.keys = keys
        self.readers = readers

    @property
    def address(self) -> str:
        """``http://host:port`` where it listens (the configured address before it started)."""
        host, port = self.config.host, self.config.port
        for server in getattr(self, "servers", []):
            for sock in server.sockets:
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    host, port = sock.getsockname()[:2]
                    break
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            logger.info(
                "ragidx serve: listening on %s (%d keys, %d readers)",
                self.address,
                self.keys,
                self.readers,
                extra={"ragidx": {"event": "start", "address": self.address, "keys": self.keys,
                                  "readers": self.readers}},
            )  # fmt: skip

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        requests = self.server_state.total_requests
        logger.info(
            "ragidx serve: stopped after %d requests",
            requests,
            extra={"ragidx": {"event": "stop", "requests": requests}},
        )
