"""Ingested files served by the dashboard, so that a citation of a local document opens at its place.

A document ingested from disk without ``--base-url`` has a ``file://`` url, which a browser will not open from a
web page. The dashboard serves such a file itself, at ``documents/<kb_id>`` beside its pages (under
``server.baseUrlPath``), and a citation links there with the place kept: ``documents/manual.pdf#page=12``
opens the PDF at page 12 in the browser's viewer, as Open WebUI links a cited file's content to its page.

Only the file an article was read from is served, looked up by the article's id (never by a path from the
request), and only when the asker may read the article: the same permission check as every read of whole
articles (:mod:`ragidx.stores.access`). The dashboard has no sign-in, so it asks, and serves, as the public:
a restricted article's file is "not found", like a missing one. A document published elsewhere (ingested with
``--base-url``) keeps its http(s) link and is not served here.

An article's url is data (a JSONL line may say ``file:///etc/passwd``), so a file is served only when ingestion
read it itself: a document type ragidx reads, whose path ends with the article's id (its path in the ingested
folder), and whose size, modification time and content digest are those recorded when it was read
(``file_stamp``), at the path it was read from, not a link put there since. A file changed since then is refused
until it is ingested again: its pages may have moved. Ingestion never reads a folder's link to a file outside it.

HTML is served with a ``sandbox`` content security policy (no script of an ingested page runs with the
dashboard's origin), Markdown and text as plain text, Word files as a download.

Example:
    >>> document_link("manuals/guide.pdf", "file:///kb/manuals/guide.pdf#page=12")
    'documents/manuals/guide.pdf#page=12'
    >>> document_link("lo-42", "https://help.example/lo-42") is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit
from urllib.request import url2pathname

from ingestion.sources import DOCUMENT_SUFFIXES, FILE_STAMP, stamp_matches
from ragidx.stores.access import Principal

__all__ = ["ROUTE", "DocumentUnavailable", "ServedFile", "document_link", "document_routes", "resolve_document"]

ROUTE = "documents"
"""The path segment, relative to the dashboard's pages, under which ingested files are served."""

_INLINE = {
    ".pdf": "application/pdf",
    ".html": "text/html; charset=utf-8",
    ".htm": "text/html; charset=utf-8",
    ".xhtml": "text/html; charset=utf-8",
    ".md": "text/plain; charset=utf-8",
    ".markdown": "text/plain; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
    ".text": "text/plain; charset=utf-8",
}
_DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


class DocumentUnavailable(Exception):
    """The file cannot be served; ``status`` is the HTTP status, the message says why and what to do."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServedFile:
    """A file to send: its path, media type, how the browser should treat it, and extra headers."""

    path: Path
    media_type: str
    disposition: str = "inline"
    headers: dict[str, str] = field(default_factory=dict)


def document_link(kb_id: str, url: str) -> str | None:
    """The dashboard's link (relative to its pages) to the file of an article whose ``url`` is ``file://``,
    with the place the url points at (``#page=12``, ``#anchor``); None for any other url."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() != "file" or not kb_id:
        return None
    link = f"{ROUTE}/{quote(kb_id, safe='/')}"
    # the fragment is already a URL's: its %-escapes and a text directive's ":~:text=a,b" pass unchanged
    return f"{link}#{quote(parts.fragment, safe='=:~,%')}" if parts.fragment else link


def resolve_document(article_store: Any, kb_id: str, principal: Principal | None = None) -> ServedFile:
    """The file article ``kb_id`` was ingested from, if ``principal`` (the public by default) may read it.

    Raises:
        DocumentUnavailable: 404 when there is no such article for this principal (a restricted one reads as
            missing), or it was not read from a document file by ingestion; 410 when the file is gone since it
            was ingested, 409 when it changed.
    """
    found = article_store.get([kb_id], principal=principal or Principal()).get(kb_id)
    if found is None:
        raise DocumentUnavailable(404, f"no document {kb_id!r} in this knowledge base")
    parts = urlsplit(found.url or "")
    if parts.scheme.lower() != "file":
        where = f": it links to {found.url}" if found.url else ""
        raise DocumentUnavailable(404, f"{kb_id!r} was not ingested from a file on this machine{where}")
    path = Path(url2pathname(parts.path))
    suffix = path.suffix.lower()
    stamp = found.metadata.get(FILE_STAMP)
    if suffix not in DOCUMENT_SUFFIXES or not stamp or not path.as_posix().endswith(f"/{kb_id}"):
        raise DocumentUnavailable(404, f"{kb_id!r} was not read from a document file by ragidx ingest")
    try:
        stat = path.stat()
    except OSError:
        raise DocumentUnavailable(
            410, f"{path.name} was moved or deleted after it was ingested: ingest its folder again (--prune drops it)"
        ) from None
    if not path.is_file() or path.resolve() != path or not stamp_matches(stamp, path, stat):
        raise DocumentUnavailable(
            409, f"{path.name} changed after it was ingested (its pages may have moved): ingest its folder again"
        )
    headers = {"X-Content-Type-Options": "nosniff", "Cache-Control": "private, no-cache"}
    if _INLINE.get(suffix, "").startswith("text/html"):
        headers["Content-Security-Policy"] = "sandbox"  # an ingested page's scripts never run as the dashboard
    if suffix in _INLINE:
        return ServedFile(path, _INLINE[suffix], "inline", headers)
    return ServedFile(path, _DOCX if suffix == ".docx" else "application/octet-stream", "attachment", headers)


def document_routes(engine: Callable[[], Any], base_path: str = "") -> list[Any]:
    """Starlette routes serving ingested files at ``/<base_path>/documents/<kb_id>`` for ``st.App``.

    ``engine()`` returns the dashboard's engine (its article store is read per request, as the public).

    Example:
        In ``streamlit_app.py``::

            app = st.App(__file__, routes=document_routes(views.shared_engine))
    """
    from starlette.requests import Request
    from starlette.responses import FileResponse, PlainTextResponse, Response
    from starlette.routing import Route

    def serve(request: Request) -> Response:  # sync: Starlette runs it in its thread pool (store reads block)
        kb_id = str(request.path_params["kb_id"])
        try:
            served = resolve_document(engine().article_store, kb_id)
        except DocumentUnavailable as exc:
            return PlainTextResponse(str(exc), status_code=exc.status, headers={"X-Content-Type-Options": "nosniff"})
        return FileResponse(
            served.path,
            media_type=served.media_type,
            headers=served.headers,
            filename=served.path.name,
            content_disposition_type=served.disposition,
        )

    prefix = f"/{base_path.strip('/')}" if base_path.strip("/") else ""
    return [Route(f"{prefix}/{ROUTE}/{{kb_id:path}}", serve, methods=["GET", "HEAD"])]
