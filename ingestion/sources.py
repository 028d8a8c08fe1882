"""Article sources: JSONL files and folders of Markdown / HTML files.

Every reader yields ``Article`` objects and ``SourceError`` records, never raises on bad input:
a malformed line, a missing id or text, an empty article or bytes that are not UTF-8 become a
``SourceError`` naming the file and line, and the rest of the file is still read.

JSONL lines look like ``{"id", "title", "url", "text", "lang"?}`` (``kb_id``, ``content`` and
``language`` are accepted as aliases). Any other top-level key, and the keys of a ``metadata`` object, are
the article's metadata (``product``, ``version``, ``allowed``: the principals who may read it ...), kept
with it and filterable; a top-level key wins over the same key in ``metadata``.

Example:
    >>> from pathlib import Path
    >>> items = list(read_source(Path("data/sample/docker_en.jsonl")))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from ragidx.article import Article

MARKDOWN_SUFFIXES = {".md", ".markdown"}
HTML_SUFFIXES = {".html", ".htm"}
MAX_ARTICLE_CHARS = 5_000_000


@dataclass(frozen=True)
class SourceError:
    """One input item that could not be read; the rest of the source is unaffected."""

    path: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.reason}"


SourceItem = Article | SourceError


def read_source(path: Path) -> Iterator[SourceItem]:
    """Read a JSONL file, a Markdown/HTML file, or a folder of them (recursively)."""
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_dir():
        yield from read_folder(path)
    elif path.suffix in (".jsonl", ".ndjson"):
        yield from read_jsonl(path)
    elif path.suffix.lower() in MARKDOWN_SUFFIXES | HTML_SUFFIXES:
        yield _read_document(path, path.parent)
    else:
        raise ValueError(
            f"{path}: unsupported file type {path.suffix!r}; give a .jsonl file, a .md/.html file, or a folder"
        )


def read_jsonl(path: Path) -> Iterator[SourceItem]:
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield SourceError(
                    str(path), line_no, f"not UTF-8 (byte {exc.start}): re-encode the file as UTF-8"
                )
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                yield SourceError(str(path), line_no, f"invalid JSON: {exc.msg} at column {exc.colno}")
                continue
            yield _article_from_record(data, str(path), line_no)


def _article_from_record(data: object, path: str, line_no: int) -> SourceItem:
    if not isinstance(data, dict):
        return SourceError(path, line_no, f"expected a JSON object, got {type(data).__name__}")
    kb_id = data.get("id", data.get("kb_id"))
    text = data.get("text", data.get("content"))
    if kb_id is None or str(kb_id).strip() == "":
        return SourceError(path, line_no, "missing 'id'")
    if text is None:
        return SourceError(path, line_no, f"article {kb_id!r}: missing 'text'")
    if not isinstance(text, str):
        return SourceError(path, line_no, f"article {kb_id!r}: 'text' must be a string")
    if not text.strip():
        return SourceError(path, line_no, f"article {kb_id!r}: empty text, nothing to index")
    if len(text) > MAX_ARTICLE_CHARS:
        return SourceError(
            path,
            line_no,
            f"article {kb_id!r}: {len(text):,} characters exceeds {MAX_ARTICLE_CHARS:,}; split it",
        )
    title = str(data.get("title") or "").strip() or _first_line(text)
    language = data.get("lang", data.get("language"))
    nested = data.get("metadata")
    if nested is not None and not isinstance(nested, dict):
        return SourceError(path, line_no, f"article {kb_id!r}: 'metadata' must be a JSON object")
    extra = {**(nested or {}), **{k: v for k, v in data.items() if k not in _RECORD_FIELDS}}
    return Article(
        kb_id=str(kb_id).strip(),
        title=title,
        url=str(data.get("url") or ""),
        content=text,
        language=str(language) if language else None,
        metadata=extra,
    )


_RECORD_FIELDS = frozenset({"id", "kb_id", "title", "url", "text", "content", "lang", "language", "metadata"})
"""JSONL keys that are the article itself; every other key is its metadata."""


def read_folder(folder: Path) -> Iterator[SourceItem]:
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in MARKDOWN_SUFFIXES | HTML_SUFFIXES
    )
    for path in files:
        yield _read_document(path, folder)
    for path in sorted(folder.rglob("*.jsonl")):
        yield from read_jsonl(path)


def _read_document(path: Path, root: Path) -> SourceItem:
    try:
        raw = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        return SourceError(str(path), None, f"not UTF-8 (byte {exc.start}): re-encode the file as UTF-8")
    kb_id = path.relative_to(root).as_posix()
    if path.suffix.lower() in HTML_SUFFIXES:
        title, text = html_to_text(raw)
    else:
        title, text = _markdown_title(raw), raw
    if not text.strip():
        return SourceError(str(path), None, "empty document, nothing to index")
    return Article(
        kb_id=kb_id,
        title=title or path.stem,
        url=path.resolve().as_uri(),
        content=text,
    )


def _first_line(text: str) -> str:
    for line in text.splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:200]
    return ""


def _markdown_title(text: str) -> str:
    match = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
    return match.group(1).strip() if match else _first_line(text)


class _TextExtractor(HTMLParser):
    SKIP = {"script", "style", "noscript", "template"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        elif tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self.title += data
        else:
            self.parts.append(data)


def html_to_text(html: str) -> tuple[str, str]:
    """(title, readable text) of an HTML page, scripts and styles removed."""
    parser = _TextExtractor()
    parser.feed(html)
    text = "".join(parser.parts)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r"\n\s*\n+", "\n\n", text).strip()
    return parser.title.strip(), text
