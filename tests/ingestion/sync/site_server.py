"""A real website on loopback for the website source's tests: Python's static file server over a folder, with
what real sites do on top (ETags and 304s, error statuses, redirects, robots.txt), and a log of the requests:
``with serve_site(folder) as site: site.status["/docs/down.html"] = 500``.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Site:
    """The running site: its folder, its base URL, what it is told to do, and the requests it got."""

    root: Path
    base: str
    status: dict[str, int] = field(default_factory=dict)
    """Path -> a status answered instead of the file (500, 410, 403 ...)."""
    redirects: dict[str, str] = field(default_factory=dict)
    """Path -> Location answered with a 301."""
    etags: bool = False
    """Answer with an ETag (the file's sha256) and 304 to a matching If-None-Match."""
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    """(path, headers) of every request, in order."""

    def url(self, path: str) -> str:
        return self.base + path

    def write(self, path: str, text: str | bytes) -> Path:
        file = self.root / path.lstrip("/")
        file.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, str):
            file.write_text(text, encoding="utf-8")
        else:
            file.write_bytes(text)
        return file

    def paths(self) -> list[str]:
        return [path for path, _ in self.requests]

    def headers_of(self, path: str) -> dict[str, str]:
        return next(headers for p, headers in reversed(self.requests) if p == path)


def _handler(site: Site) -> type[SimpleHTTPRequestHandler]:
    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(site.root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
            pass

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            site.requests.append((path, {k.lower(): v for k, v in self.headers.items()}))
            if path in site.status:
                self.send_error(site.status[path])
                return
            if path in site.redirects:
                self.send_response(301)
                self.send_header("Location", site.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            file = site.root / path.lstrip("/")
            if site.etags and file.is_file():
                body = file.read_bytes()
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", self.guess_type(str(file)))
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", etag)
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

    return Handler


@contextmanager
def serve_site(root: Path) -> Iterator[Site]:
    """Serve ``root`` on 127.0.0.1 (a free port) in a thread while the context lasts."""
    site = Site(root=root, base="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(site))
    site.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="test-site", daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
