"""Any LlamaIndex reader as a source: Confluence, Notion, Google Drive, GitHub, a database, ... from LlamaHub.

The source names the reader's class (``reader = "llama_index.readers.database.DatabaseReader"``), its keyword
arguments (``reader_args``) and those of its ``load_data`` (``load_args``). Every sync builds the reader, loads its
documents (``lazy_load_data`` where the reader has it, else ``load_data``), and makes each one an article through
the source's ``mapping`` (:class:`ingestion.sync.config.DocumentMapping`):

- the item's key is the document's metadata ``id_key`` (default ``id``), else its own ``id_``; its article id is
  ``SOURCE:KEY`` (ids of different readers never meet);
- title, url and text from ``title_key``, ``url_key`` and ``text_key`` (else the first line of the text, no url,
  the document's text); readers from ``allowed_key`` (a list, or ``"group:a, user:b"``), else the source's
  ``allowed``;
- ``updated_key`` (default ``updated_at``): a document whose update time equals the last sync's is
  :class:`~ingestion.sync.base.Unchanged` without being compared;
- the rest of its metadata (JSON values only: a time is written ISO 8601, anything else as text) stays with the
  article, filterable like any metadata. Consecutive documents with the same key (a reader that splits a file by
  page) are one article, a section per document (with its ``page_label`` as the page, where there is one).

A string argument written ``"${NAME}"`` (in ``reader_args`` or ``load_args``) is the environment variable
``NAME``, read when the sync runs: tokens and passwords stay out of ``ragidx.toml``.

``include`` / ``exclude`` are globs over the key. A document without text is skipped. A reader that cannot be
built or fails while loading stops the sync (:class:`~ingestion.sync.base.SourceUnavailable`): a half-read listing
never deletes anything. A reader whose documents get new random ids on every load needs ``id_key``; without it,
every sync would replace every article.

Example:
    >>> from llama_index.core import Document
    >>> from ingestion.sync.config import SourceConfig
    >>> source = LlamaIndexSource(SourceConfig(name="wiki", kind="llamaindex", reader="x.Reader"))
    >>> source.article_of("7", [Document(text="Body", metadata={"id": 7, "title": "Seven"})]).kb_id
    'wiki:7'
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ingestion.readers import first_line
from ingestion.sync.base import Fetched, ItemState, ScanEvent, Skipped, SourceUnavailable, Unchanged
from ingestion.sync.config import SourceConfig
from ingestion.sync.folder import matches
from ragidx.article import SECTIONS, Article
from ragidx.stores.access import ALLOWED

__all__ = ["LlamaIndexSource", "load_reader_class"]


def load_reader_class(path: str) -> type:
    """The class a dotted path names (``package.module.Class``).

    Raises:
        SourceUnavailable: the module is not installed or has no such class (the message says what to install).
    """
    module_name, _, name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        package = module_name.replace("llama_index.readers.", "llama-index-readers-").replace("_", "-").split(".")[0]
        hint = f" (pip install {package})" if module_name.startswith("llama_index.readers.") else ""
        raise SourceUnavailable(f"reader {path!r}: the module {exc.name!r} is not installed{hint}") from None
    cls = getattr(module, name, None)
    if not isinstance(cls, type):
        raise SourceUnavailable(f"reader {path!r}: {module_name} has no class {name!r}; check the class path")
    return cls


class LlamaIndexSource:
    """Scans a ``kind = "llamaindex"`` source (see the module docstring)."""

    def __init__(self, config: SourceConfig) -> None:
        if not config.reader:
            raise ValueError(f"source {config.name!r}: a llamaindex source needs reader (a class path)")
        self.config = config
        self.mapping = config.mapping

    def documents(self) -> Iterator[Any]:
        """The reader's documents, loaded lazily where it can.

        Raises:
            SourceUnavailable: the reader could not be built or failed while loading.
        """
        cls = load_reader_class(str(self.config.reader))
        what = f"source {self.config.name!r} ({self.config.reader})"
        reader_args, load_args = _from_env(self.config.reader_args, what), _from_env(self.config.load_args, what)
        try:
            reader = cls(**reader_args)
        except Exception as exc:
            raise SourceUnavailable(f"{what}: the reader could not be built ({type(exc).__name__}: {exc})") from exc
        try:
            try:
                loaded: Iterable[Any] = reader.lazy_load_data(**load_args)
            except NotImplementedError:
                loaded = reader.load_data(**load_args)
            yield from loaded
        except NotImplementedError as exc:
            raise SourceUnavailable(f"{what}: the reader loads nothing ({exc})") from exc
        except Exception as exc:
            raise SourceUnavailable(
                f"{what}: loading stopped ({type(exc).__name__}: {exc}); nothing was deleted, the next sync retries"
            ) from exc

    def key_of(self, document: Any) -> str:
        value = (document.metadata or {}).get(self.mapping.id_key)
        return str(value) if value not in (None, "") else str(document.id_)

    def scan(self, previous: Mapping[str, ItemState]) -> Iterator[ScanEvent]:
        group: list[Any] = []
        key: str | None = None
        for document in self.documents():
            k = self.key_of(document)
            if group and k != key:
                yield self.event(str(key), group, previous.get(str(key)))
                group = []
            key = k
            group.append(document)
        if group:
            yield self.event(str(key), group, previous.get(str(key)))

    def event(self, key: str, documents: list[Any], prev: ItemState | None) -> ScanEvent:
        if self.config.include and not any(matches(key, g) for g in self.config.include):
            return Skipped(key, "not matched by include")
        if any(matches(key, g) for g in self.config.exclude):
            return Skipped(key, "exclude pattern")
        updated = (documents[0].metadata or {}).get(self.mapping.updated_key)
        stamp = _jsonable(updated) if updated not in (None, "") else None
        lastmod = str(stamp) if stamp is not None else None
        if prev is not None and lastmod is not None and prev.lastmod == lastmod:
            return Unchanged(key, prev)
        article = self.article_of(key, documents)
        if not article.content.strip():
            return Skipped(key, "no text, nothing to index")
        return Fetched(key, article, ItemState(key=key, kb_id=article.kb_id, content_hash="", lastmod=lastmod))

    def article_of(self, key: str, documents: list[Any]) -> Article:
        """The article of one item's documents (see the module docstring)."""
        m = self.mapping
        first = dict(documents[0].metadata or {})
        parts: list[str] = []
        sections: list[dict[str, Any]] = []
        offset = 0
        for document in documents:
            meta = document.metadata or {}
            raw = meta.get(m.text_key) if m.text_key else document.text
            text = str(raw or "").strip()
            if not text:
                continue
            if parts:
                offset += 2
            section: dict[str, Any] = {"start": offset}
            if meta.get("page_label") not in (None, ""):
                section["page"] = _page(meta["page_label"])
            sections.append(section)
            parts.append(text)
            offset += len(text)
        content = "\n\n".join(parts)
        consumed = {m.id_key, m.title_key, m.url_key, m.allowed_key, *([m.text_key] if m.text_key else [])}
        metadata = {str(k): _jsonable(v) for k, v in first.items() if k not in consumed}
        if len(sections) > 1 or any("page" in s for s in sections):
            metadata[SECTIONS] = sections
        allowed = _principals(first.get(m.allowed_key))
        if allowed is not None:
            metadata[ALLOWED] = allowed
        title = str(first.get(m.title_key) or "").strip() or first_line(content) or key
        return Article(
            kb_id=f"{self.config.name}:{key}",
            title=title,
            url=str(first.get(m.url_key) or ""),
            content=content,
            metadata=metadata,
        )


_ENV_VALUE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def _from_env(args: dict[str, Any], what: str) -> dict[str, Any]:
    """``args`` with every string value ``"${NAME}"`` (also inside lists and tables) replaced by the environment
    variable ``NAME``: secrets (a token, a database password) stay out of ragidx.toml.

    Raises:
        SourceUnavailable: a variable named is not set (the message names the variable, never a value).
    """

    def value(v: Any) -> Any:
        if isinstance(v, str) and (match := _ENV_VALUE.match(v)):
            if match[1] not in os.environ:
                raise SourceUnavailable(f"{what}: the environment variable {match[1]} is not set; set it, sync again")
            return os.environ[match[1]]
        if isinstance(v, list):
            return [value(x) for x in v]
        if isinstance(v, dict):
            return {k: value(x) for k, x in v.items()}
        return v

    return {k: value(v) for k, v in args.items()}


def _principals(value: Any) -> Any:
    """A readers value as a list (``"group:a, user:b"`` is two); None when there is none. A malformed one is handed
    on as it is: ingestion's permission check refuses the article, naming what is wrong."""
    if value is None:
        return None
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()] or value
    return value


def _page(label: Any) -> Any:
    text = str(label).strip()
    return int(text) if text.isdigit() else text


def _jsonable(value: Any) -> Any:
    """``value`` as JSON: times in ISO 8601, containers kept, anything else that JSON cannot hold as text."""
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value
