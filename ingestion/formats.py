"""The document formats ingestion reads: a registry of readers by file suffix, read at each call, never copied.

It starts with the built-in readers of :mod:`ingestion.readers` (PDF, Word .docx, HTML, Markdown, text);
:func:`register_reader` adds a format (or replaces one) from a program, and everything that depends on the
formats asks here when it runs: a folder walk (which files it reads), the file checks (size limit, the bytes a file
starts with, binary content in a text format), the reader each file gets, the CLI's and the dashboard's help, and
the docs' list of formats (``docs/hooks/formats.py``). This module imports no reader library: the CLI can name the
formats without loading them.

Example:
    >>> from pathlib import Path
    >>> from llama_index.core.schema import Document
    >>> class NotesReader:
    ...     def load_data(self, file, extra_info=None, **kwargs):
    ...         return [Document(text=Path(file).read_text(), metadata={"title": Path(file).stem})]
    >>> register_reader(".notes", NotesReader, name="notes", text=True)
    >>> ".notes" in document_suffixes(), document_formats()
    (True, 'PDF, Word .docx, HTML, Markdown, text, notes')
    >>> unregister_reader(".notes")
    >>> ".notes" in document_suffixes()
    False
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from llama_index.core.readers.base import BaseReader

__all__ = [
    "ReaderEntry",
    "ReaderFactory",
    "document_formats",
    "document_suffixes",
    "reader_entry",
    "register_reader",
    "registered_readers",
    "unregister_reader",
]

ReaderFactory = Callable[..., "BaseReader"]
"""Makes a reader: a ``BaseReader`` class or a function; one that takes a ``max_file_bytes`` keyword is given the
``max_file_mb`` limit in bytes (what a ZIP-based document may expand to)."""


@dataclass(frozen=True)
class ReaderEntry:
    """One registered document format: how to make its reader and how files of it are checked and named.

    Attributes:
        suffix: the file suffix, lower case with its dot (``.odt``).
        make: makes the reader for one file, given the size limit in bytes.
        name: the format as help text and the docs name it (``PDF``, ``Word .docx``).
        format: the article's ``format`` metadata (``pdf``; ``html`` for ``.htm``).
        magic: the bytes every file of the format starts with (checked before it is read), or None.
        kind: what such a file is, for the report when it does not start with ``magic`` ("a PDF").
        text: a text format: a file whose first bytes look binary is reported, not read.
    """

    suffix: str
    make: Callable[[int], BaseReader]
    name: str
    format: str
    magic: bytes | None = None
    kind: str = ""
    text: bool = False


_REGISTRY: dict[str, ReaderEntry] = {}
"""Every document format read now, by suffix: the built-in ones first, then in the order they were registered."""
_NOT_DOCUMENTS = frozenset({".jsonl", ".ndjson"})
"""Suffixes read as JSON lines of articles (``ingestion.sources``), never by a document reader."""


def register_reader(
    suffix: str,
    reader: BaseReader | ReaderFactory,
    *,
    name: str | None = None,
    format: str | None = None,  # noqa: A002 - the article metadata key it sets
    magic: bytes | None = None,
    kind: str | None = None,
    text: bool = False,
) -> None:
    """Read files ending in ``suffix`` with ``reader`` from now on: folders ingested pick them up, the size limit
    (``max_file_mb``) and the checks below apply to them, and the CLI's and the dashboard's help name the format.
    A later registration of the same suffix replaces the earlier one (a built-in reader's too);
    :func:`unregister_reader` removes one.

    Args:
        suffix: the file suffix with its dot (``.odt``); case does not matter.
        reader: a ``BaseReader`` (that one object reads every file), or what makes one for each file read: its
            class, or a function. A factory that takes a ``max_file_bytes`` keyword is given the ``max_file_mb``
            limit in bytes (pass it to ``ingestion.readers.check_uncompressed_size`` for a ZIP-based format).
            ``load_data(path)`` returns the file's sections as LlamaIndex ``Document`` objects, in order, with
            ``title`` in their metadata and, where known, ``heading_path``, ``page`` and ``anchor``
            (:mod:`ingestion.readers`); a ``DocumentReadError`` it raises is reported with the file.
        name: how help text and the docs name the format (default: the suffix, ``.odt``).
        format: the articles' ``format`` metadata (default: the suffix without its dot).
        magic: the bytes every such file starts with; a file that does not is reported, not read.
        kind: what such a file is, for that report (default: ``a <name> file``).
        text: the format is text: a file that looks binary is reported, not read.

    Raises:
        ValueError: ``suffix`` is not a file suffix (``.odt``), or is one of JSON lines (``.jsonl``).
        TypeError: ``reader`` is neither a reader nor something that makes one.
    """
    key = _suffix_key(suffix)
    if key in _NOT_DOCUMENTS:
        raise ValueError(f"{suffix!r} files are read as JSON lines of articles: register a reader for another suffix")
    _REGISTRY.pop(key, None)  # a replaced format moves to the end, where help text lists the ones added
    _REGISTRY[key] = ReaderEntry(
        suffix=key,
        make=_factory(reader),
        name=name or key,
        format=format or key.lstrip("."),
        magic=magic,
        kind=kind or f"a {name or key} file",
        text=text,
    )


def unregister_reader(suffix: str) -> None:
    """Stop reading files ending in ``suffix`` (a built-in format too); a suffix no reader reads is left as is."""
    _REGISTRY.pop(_suffix_key(suffix), None)


def document_suffixes() -> frozenset[str]:
    """The suffixes read as documents now (built-in and registered), lower case.

    Example:
        >>> sorted(document_suffixes())[:3]
        ['.docx', '.htm', '.html']
    """
    return frozenset(_REGISTRY)


def reader_entry(suffix: str) -> ReaderEntry | None:
    """The registered format of ``suffix`` (any case), or None when no reader reads it."""
    return _REGISTRY.get(suffix.lower())


def registered_readers() -> list[ReaderEntry]:
    """Every registered format: the built-in ones first, then in the order they were registered."""
    return list(_REGISTRY.values())


def document_formats() -> str:
    """The document formats read now, as help text names them, each once.

    Example:
        >>> document_formats()
        'PDF, Word .docx, HTML, Markdown, text'
    """
    return ", ".join(dict.fromkeys(entry.name for entry in _REGISTRY.values()))


def _suffix_key(suffix: str) -> str:
    key = str(suffix).strip().lower()
    if not re.fullmatch(r"\.[\w+-]+(\.[\w+-]+)*", key):
        raise ValueError(f"{suffix!r} is not a file suffix: give it with its dot, like '.odt'")
    return key


def _factory(reader: Any) -> Callable[[int], BaseReader]:
    """What makes the reader for one file, given the size limit (see :func:`register_reader`)."""
    if not isinstance(reader, type) and hasattr(reader, "load_data"):
        return lambda max_file_bytes: cast("BaseReader", reader)  # one reader object for every file
    if not callable(reader):
        raise TypeError(
            f"a reader is a BaseReader, its class or a function that makes one, not {type(reader).__name__}"
        )
    try:
        takes_limit = "max_file_bytes" in inspect.signature(reader).parameters
    except (TypeError, ValueError):  # a callable without a signature Python can read
        takes_limit = False
    if takes_limit:
        return lambda max_file_bytes: cast("BaseReader", reader(max_file_bytes=max_file_bytes))
    return lambda max_file_bytes: cast("BaseReader", reader())


def _built_in(class_name: str) -> Callable[[int], BaseReader]:
    """A built-in reader of :mod:`ingestion.readers`, imported when the first file of its format is read."""

    def make(max_file_bytes: int) -> BaseReader:
        from ingestion import readers

        if class_name == "DocxReader":
            return readers.DocxReader(max_uncompressed_bytes=max_file_bytes)
        return cast("BaseReader", getattr(readers, class_name)())

    return make


def _register_built_ins() -> None:
    """The built-in formats, in the order the docs list them (``ingestion.readers.READERS``)."""
    built_in = [
        (".pdf", "PdfReader", "PDF", "pdf"),
        (".docx", "DocxReader", "Word .docx", "docx"),
        (".html", "HtmlReader", "HTML", "html"),
        (".htm", "HtmlReader", "HTML", "html"),
        (".xhtml", "HtmlReader", "HTML", "html"),
        (".md", "MarkdownReader", "Markdown", "md"),
        (".markdown", "MarkdownReader", "Markdown", "md"),
        (".txt", "TextReader", "text", "txt"),
        (".text", "TextReader", "text", "txt"),
    ]
    magic = {".pdf": (b"%PDF-", "a PDF"), ".docx": (b"PK\x03\x04", "a Word .docx file (a ZIP archive)")}
    for suffix, class_name, name, fmt in built_in:
        start, kind = magic.get(suffix, (None, None))
        text = suffix not in magic  # HTML, Markdown and text
        register_reader(suffix, _built_in(class_name), name=name, format=fmt, magic=start, kind=kind, text=text)


_register_built_ins()
