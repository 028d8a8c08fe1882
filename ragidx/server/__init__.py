"""``ragidx serve``: an OpenAI-compatible HTTP server over one :class:`~ragidx.engine.Engine` (FastAPI + uvicorn).

Example:
    >>> from ragidx.server import check_bind
    >>> check_bind("127.0.0.1", has_keys=False)   # loopback: no key needed
    >>> check_bind("0.0.0.0", has_keys=True)      # beyond loopback: only with API keys
"""

from __future__ import annotations

import logging
from typing import Any

from ragidx.server.app import create_app, is_loopback

__all__ = ["check_bind", "create_app", "serve"]

logger = logging.getLogger(__name__)


def check_bind(host: str, *, has_keys: bool) -> None:
    """Refuse to listen beyond loopback without an API key: anyone on the network could use the model."""
    if not has_keys and not is_loopback(host):
        raise ValueError(
            f"serve.host {host} is not loopback and no API key is configured: set serve.keys (a [[serve.keys]] "
            "table with key_env, user, groups) or serve.api_keys (RAGIDX_SERVE__API_KEYS='[\"KEY\"]'), or listen on "
            "127.0.0.1"
        )


def serve(settings: Any, *, warm_up: bool = True, log_level: str = "info") -> None:
    """Run the server until interrupted: the engine is built from ``settings``, warmed up (the local model
    started, the index opened) before the first request, and closed at the end. A key variable that is not set
    stops it before the engine starts. Its log lines (start, one per request, stop) go to stderr in
    ``serve.log_format`` (:mod:`ragidx.server.runner`)."""
    from ragidx.engine import Engine

    check_bind(settings.serve.host, has_keys=settings.serve.has_keys)
    from ingestion.sync.schedule import scheduled_syncs
    from ragidx.server.runner import LoggedServer, log_to_stderr, uvicorn_config

    readers = settings.serve.key_readers()
    stop_logging = log_to_stderr(settings.serve.log_format)
    try:
        with Engine(settings) as engine:
            if warm_up:
                engine.warm_up()
            app = create_app(engine)
            server = LoggedServer(
                uvicorn_config(app, settings.serve, log_level=log_level),
                keys=len(readers),
                readers=len({(user, groups) for _, user, groups in readers}),
            )
            with scheduled_syncs(engine):  # [[sources]] with a schedule, synced in the background
                server.run()
    finally:
        stop_logging()
