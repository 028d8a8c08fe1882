"""MkDocs hook: the configuration reference, written from ``ragidx.config`` at build time so it cannot drift.

Every field of :class:`ragidx.config.Settings` and of the models nested in it (``LLMEndpoint`` for ``[llm]``,
``[fallback_llm]`` and ``[flash.llm]``; ``FlashSettings`` for ``[flash]``) becomes one table row: its name, type,
default, environment variable and the ``description`` given in its ``Field``. ``docs/configuration.md`` marks
where the tables go with ``<!-- ragidx:settings-reference -->``; the build fails if the marker is missing.

Usage (what ``mkdocs.yml`` does)::

    hooks:
      - docs/hooks/settings_reference.py

The test suite calls :func:`settings_reference_markdown` directly (``tests/docs/test_snippets.py``).
"""

from __future__ import annotations

import inspect
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

# The checkout's ragidx, the code the API reference is read from, even where another copy is installed.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MARKER = "<!-- ragidx:settings-reference -->"
PAGE = "configuration.md"

_SECTION = re.compile(r"^\s*# --- (?P<title>[^-]+?) -+\s*$")
_FIELD = re.compile(r"^\s{4}(?P<name>[a-z_][a-z0-9_]*)\s*:")


def settings_reference_markdown() -> str:
    """The reference tables in Markdown: top-level settings by section, then each nested model's fields."""
    from ragidx.config import (
        DashboardSettings,
        FlashSettings,
        LLMEndpoint,
        QueueSettings,
        ServerKey,
        ServerSettings,
        Settings,
    )

    parts: list[str] = []
    for title, names in _sections(Settings):
        parts.append(f"### {title[0].upper()}{title[1:]}\n")
        parts.append(_table(Settings, names, env_prefix="RAGIDX_", toml_table=None))
    parts.append("### `[llm]`, `[fallback_llm]` and `[flash.llm]`: a chat model (`LLMEndpoint`)\n")
    parts.append(
        _paragraph(LLMEndpoint)
        + "The environment variables below are those of `[llm]`; `[fallback_llm]` and `[flash.llm]` take the "
        "same fields (`RAGIDX_FALLBACK_LLM__MODEL`, `RAGIDX_FLASH__LLM__MODEL`, ...).\n"
    )
    parts.append(_table(LLMEndpoint, list(LLMEndpoint.model_fields), env_prefix="RAGIDX_LLM__", toml_table="llm"))
    parts.append("### `[flash]`: the flash rerank stage (`FlashSettings`)\n")
    parts.append(_paragraph(FlashSettings))
    parts.append(
        _table(FlashSettings, list(FlashSettings.model_fields), env_prefix="RAGIDX_FLASH__", toml_table="flash")
    )
    parts.append("### `[queue]`: how questions take turns at the chat model (`QueueSettings`)\n")
    parts.append(_paragraph(QueueSettings))
    parts.append(
        _table(QueueSettings, list(QueueSettings.model_fields), env_prefix="RAGIDX_QUEUE__", toml_table="queue")
    )
    parts.append("### `[serve]`: `ragidx serve`, the HTTP server (`ServerSettings`)\n")
    parts.append(_paragraph(ServerSettings))
    parts.append(
        _table(ServerSettings, list(ServerSettings.model_fields), env_prefix="RAGIDX_SERVE__", toml_table="serve")
    )
    parts.append("### `[[serve.keys]]`: an API key and the reader it reads as (`ServerKey`)\n")
    parts.append(_paragraph(ServerKey) + "The whole list can also come from `RAGIDX_SERVE__KEYS` as JSON.\n")
    parts.append(_table(ServerKey, list(ServerKey.model_fields), env_prefix=None, toml_table="serve.keys"))
    parts.append("### `[dashboard]`: the Streamlit dashboard (`DashboardSettings`)\n")
    parts.append(_paragraph(DashboardSettings))
    parts.append(
        _table(
            DashboardSettings,
            list(DashboardSettings.model_fields),
            env_prefix="RAGIDX_DASHBOARD__",
            toml_table="dashboard",
        )
    )
    from ragidx.providers.embedding_endpoint import EmbeddingEndpoint

    parts.append("### `[embedding]`: embeddings from a service (`EmbeddingEndpoint`)\n")
    parts.append(_paragraph(EmbeddingEndpoint) + "See [Embeddings as a service](models/embeddings.md).\n")
    fields = list(EmbeddingEndpoint.model_fields)
    parts.append(_table(EmbeddingEndpoint, fields, env_prefix="RAGIDX_EMBEDDING__", toml_table="embedding"))
    return "\n".join(parts)


def _sections(model: type[BaseModel]) -> list[tuple[str, list[str]]]:
    """Fields grouped by the ``# --- title ---`` comments of the class body, in declaration order."""
    names = list(model.model_fields)
    sections: list[tuple[str, list[str]]] = []
    title = "general"
    for line in inspect.getsource(model).splitlines():
        if match := _SECTION.match(line):
            title = match["title"].strip()
        elif (match := _FIELD.match(line)) and match["name"] in names:
            if not sections or sections[-1][0] != title:
                sections.append((title, []))
            sections[-1][1].append(match["name"])
    listed = {name for _, group in sections for name in group}
    missing = [name for name in names if name not in listed]
    if missing:  # a field the source scan did not see still gets its row
        sections.append(("other", missing))
    return sections


def _paragraph(model: type[BaseModel]) -> str:
    doc = inspect.getdoc(model) or ""
    first = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    return f"{first}\n\n" if first else ""


def _table(model: type[BaseModel], names: list[str], *, env_prefix: str | None, toml_table: str | None) -> str:
    """One row per field; ``env_prefix`` None for a model with no variable of its own (an entry of a list)."""
    rows = ["| Setting and environment variable | Type and default | What it does |", "|---|---|---|"]
    for name in names:
        info = model.model_fields[name]
        key = f"{toml_table}.{name}" if toml_table else name
        env = f"<br>`{env_prefix}{name.upper()}`" if env_prefix is not None else ""
        rows.append(
            f"| `{key}`{env} | {_cell(_type(info.annotation))}<br>"
            f"default {_cell(_default(info))} | {_cell(_description(info))} |"
        )
    return "\n".join(rows) + "\n"


def _type(annotation: Any) -> str:
    if annotation is None:
        return "`None`"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " or ".join(f"`{value!r}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "`None`"
    name = getattr(annotation, "__name__", None) or str(annotation)
    return f"`{name}`"


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "required"
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return f"see `{type(value).__name__}` below"
    if isinstance(value, Path):
        home = str(Path.home())
        text = str(value)
        return f"`{'~' + text[len(home) :] if text.startswith(home) else text}`"
    return f"`{value!r}`"


def _description(info: FieldInfo) -> str:
    if info.description:
        return info.description
    return "(no description in `ragidx/config.py` yet)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Put the tables where ``configuration.md`` has the marker."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its marker {MARKER}: the settings reference has nowhere to go")
    return markdown.replace(MARKER, settings_reference_markdown())
