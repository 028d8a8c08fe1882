"""Which LanceDB table answers for a collection: the switch ``ragidx reindex`` turns.

``ragidx reindex`` writes a knowledge base's chunks, embedded by a new model, into a table of its own while the
old table keeps answering; then it points the collection at the new table by replacing one small file,
``<collection>.active.json`` in the LanceDB folder (``os.replace``: a reader sees the old pointer or the new one,
never half of one). Every chunk store is opened through :func:`active_table`, so each process opened after the
switch reads the new table; without the file, the table is the collection's own name, as before reindexing
existed.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> active_table(folder, "Articles")
    'Articles'
    >>> switch_table(folder, "Articles", "Articles_r1a2b3c4", model="bge-m3@tei")
    >>> active_table(folder, "Articles")
    'Articles_r1a2b3c4'
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["active_table", "pointer_path", "previous_tables", "switch_table"]


def pointer_path(uri: str | Path, collection: str) -> Path:
    """The file that names ``collection``'s active table."""
    return Path(uri) / f"{collection}.active.json"


def _read(uri: str | Path, collection: str) -> dict[str, Any]:
    path = pointer_path(uri, collection)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"{path} (which table answers for {collection!r}) cannot be read ({type(exc).__name__}): restore it, "
            "or delete it to use the table named after the collection"
        ) from exc
    return data if isinstance(data, dict) else {}


def active_table(uri: str | Path, collection: str) -> str:
    """The table that answers for ``collection``: the one ``ragidx reindex`` switched to, else ``collection``."""
    table = _read(uri, collection).get("table")
    return table if isinstance(table, str) and table else collection


def previous_tables(uri: str | Path, collection: str) -> list[str]:
    """Tables ``collection`` answered from before its switches (kept until ``ragidx reindex --drop-old``)."""
    old = _read(uri, collection).get("previous", [])
    return [t for t in old if isinstance(t, str)] if isinstance(old, list) else []


def switch_table(
    uri: str | Path, collection: str, table: str, *, model: str, previous: list[str] | None = None
) -> None:
    """Point ``collection`` at ``table`` (whose vectors ``model`` made) in one atomic replace of the pointer.

    Args:
        previous: the tables no longer answering that are still on disk (None: the one answering until now is
            added to those recorded).
    """
    uri = Path(uri)
    if previous is None:
        before = active_table(uri, collection)
        previous = [t for t in [*previous_tables(uri, collection), before] if t != table]
    record = {
        "table": table,
        "model": model,
        "switched_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "previous": list(dict.fromkeys(previous)),
    }
    uri.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{collection}.", suffix=".tmp", dir=uri)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, pointer_path(uri, collection))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
