"""``ragidx mcp`` on the command line (kept apart from the server, so building the CLI's parser imports no MCP SDK).

ragidx mcp                               stdio, reading as mcp.user / mcp.groups (default: the public reader)
ragidx mcp --http [--host H] [--port N]  streamable HTTP at /mcp, with ragidx serve's keys and readers
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

__all__ = ["add_mcp_command", "cmd_mcp"]


def cmd_mcp(args: argparse.Namespace) -> int:
    from ragidx.cli import _settings

    settings = _settings(args)
    if args.http:
        from ragidx.server import serve

        overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
        settings = settings.model_copy(
            update={
                "serve": settings.serve.model_copy(update=overrides),
                "mcp": settings.mcp.model_copy(update={"serve": True}),
            }
        )
        with contextlib.suppress(KeyboardInterrupt):
            serve(settings, log_level="info" if args.verbose else "warning")
        return 0
    import anyio

    from ragidx.integrations.mcp_server import build_server, run_stdio, stdio_engine

    reader = settings.mcp.principal()
    with stdio_engine(settings) as engine:
        server = build_server(engine, reader=lambda ctx: reader)
        with contextlib.suppress(KeyboardInterrupt):
            anyio.run(run_stdio, server)
    return 0


def add_mcp_command(sub: Any) -> None:
    """``ragidx mcp [--http [--host H] [--port N]] [--flash]`` in the CLI's subcommands."""
    from ragidx.cli import FLASH_HELP

    p = sub.add_parser(
        "mcp",
        help="a Model Context Protocol server (tools search, ask, get_article; articles as resources) for Claude "
        "Desktop, Cursor and other MCP clients: over stdio (reads as mcp.user / mcp.groups), or --http at /mcp "
        "with ragidx serve's keys and readers",
    )
    p.add_argument("--http", action="store_true", help="streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    p.add_argument("--host", help="with --http: address to listen on (default: serve.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="with --http: port (default: serve.port, 8000)")
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.set_defaults(func=cmd_mcp)
