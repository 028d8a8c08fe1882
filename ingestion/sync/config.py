"""A source's settings: one ``[[sources]]`` table of ``ragidx.toml`` (or an entry of ``RAGIDX_SOURCES``, JSON).

Example ``ragidx.toml``::

    [[sources]]
    name = "help"
    kind = "website"
    sitemap = "https://help.example.org/sitemap.xml"
    include = ["https://help.example.org/docs/"]
    metadata = { product = "writer", version = "7.6" }
    allowed = ["group:support"]
    schedule = "6h"

    [[sources]]
    name = "handbook"
    kind = "folder"
    path = "/srv/handbook"
    exclude = ["drafts/**"]
    schedule = "0 3 * * *"     # cron: every night at 03:00

Each source is checked when the settings are read: an unknown kind, a missing location (``url``/``sitemap``,
``path``, ``reader``), a location of another kind, a malformed ``allowed`` or a schedule that is neither an
interval (``"30m"``, ``"6h"``, ``"1d"``) nor a cron expression is an error naming the source.

Example:
    >>> SourceConfig(name="docs", kind="folder", path="/srv/docs").kind
    'folder'
    >>> schedule_interval_s("90m")
    5400.0
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "DocumentMapping",
    "SourceConfig",
    "SourceList",
    "WebsiteOptions",
    "schedule_interval_s",
]

SourceKind = Literal["website", "folder", "llamaindex"]

_INTERVAL = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def schedule_interval_s(schedule: str) -> float | None:
    """The seconds between syncs of an interval schedule (``"30m"``: 1800), or None for a cron expression."""
    match = _INTERVAL.match(schedule)
    return float(match.group(1)) * _UNIT_S[match.group(2)] if match else None


class WebsiteOptions(BaseModel):
    """How a website source is fetched (``[sources.website]``): politeness, limits and the content extractor.

    Example:
        >>> WebsiteOptions().concurrency
        4
    """

    model_config = ConfigDict(extra="forbid")

    user_agent: str = Field(
        default="ragidx-sync",
        description="The User-Agent sent, and the name robots.txt rules are matched against.",
    )
    concurrency: int = Field(default=4, ge=1, le=64, description="Requests in flight at once to the site.")
    delay_s: float = Field(
        default=0.0,
        ge=0.0,
        description="Pause between two requests to the site (robots.txt's Crawl-delay wins when it is longer).",
    )
    timeout_s: float = Field(default=20.0, gt=0.0, description="A request that takes longer fails (retried next sync).")
    max_pages: int = Field(default=10_000, ge=1, description="The most pages one sync reads; the rest is skipped.")
    max_bytes: int = Field(
        default=10 * 1024 * 1024, ge=1024, description="A page or linked file larger than this is skipped."
    )
    extractor: str = Field(
        default="auto",
        description="How a page's main content is found: 'auto' (the site theme's main region where known, else "
        "trafilatura), or an extractor the website source names in its guide.",
    )


class DocumentMapping(BaseModel):
    """Which metadata key of a LlamaIndex ``Document`` gives the article's id, title, url, update time and readers.

    A key that is missing on a document falls back: the id to the document's own ``id_``, the title to the first
    line of its text, the url to nothing, the update time to nothing, the text to the document's text, the readers
    to the source's ``allowed``. A readers value may be a list or one string of ``user:``/``group:`` names
    separated by commas.

    Example:
        >>> DocumentMapping().id_key
        'id'
    """

    model_config = ConfigDict(extra="forbid")

    id_key: str = Field(default="id", description="Metadata key of the article's id (missing: the Document's own id_).")
    title_key: str = Field(default="title", description="Metadata key of the title (missing: the text's first line).")
    url_key: str = Field(default="url", description="Metadata key of the link a citation opens.")
    updated_key: str = Field(
        default="updated_at",
        description="Metadata key of the document's last update time: equal to the last sync's, it is not read again.",
    )
    text_key: str | None = Field(
        default=None,
        description="Metadata key holding the article's text (None: the Document's text). For readers that put "
        "every column into the text, such as DatabaseReader: select the text column as metadata instead.",
    )
    allowed_key: str = Field(
        default="allowed",
        description="Metadata key of the readers (a list of 'user:NAME' / 'group:NAME', or one); missing: the "
        "source's allowed.",
    )


class SourceConfig(BaseModel):
    """One source kept in sync: where it is, what of it to take, who may read it, and how often to sync it.

    Example:
        >>> SourceConfig(name="wiki", kind="llamaindex", reader="llama_index.readers.file.FlatReader").name
        'wiki'
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The source's name: letters, digits, '.', '_', '-' (ragidx sync NAME).")
    kind: SourceKind = Field(description="'website', 'folder' or 'llamaindex'.")
    url: str | None = Field(default=None, description="Website: the start URL crawled from.")
    sitemap: str | None = Field(default=None, description="Website: a sitemap.xml (or sitemap index, .gz) URL.")
    path: Path | None = Field(default=None, description="Folder: the folder read (recursively).")
    base_url: str | None = Field(
        default=None,
        description="Folder: where its documents are published; a document's url is then base_url + its path.",
    )
    reader: str | None = Field(
        default=None,
        description="LlamaIndex: the reader's class path, e.g. 'llama_index.readers.obsidian.ObsidianReader'.",
    )
    reader_args: dict[str, Any] = Field(default_factory=dict, description="LlamaIndex: the reader's keyword arguments.")
    load_args: dict[str, Any] = Field(
        default_factory=dict, description="LlamaIndex: keyword arguments of its load_data (or lazy_load_data)."
    )
    mapping: DocumentMapping = Field(
        default_factory=DocumentMapping, description="LlamaIndex: which Document metadata gives id, title, url ..."
    )
    include: list[str] = Field(
        default_factory=list,
        description="Only these: URL prefixes (website), glob patterns relative to the folder ('guide/**/*.md'), "
        "or glob patterns of a document's id (llamaindex). Empty: everything.",
    )
    exclude: list[str] = Field(default_factory=list, description="Never these (same forms as include).")
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="Metadata given to every article of the source (product, version ...)."
    )
    allowed: list[str] = Field(
        default_factory=list,
        description="The readers of every article ('user:NAME' / 'group:NAME'); empty: public, unless a LlamaIndex "
        "document names its own.",
    )
    schedule: str | None = Field(
        default=None,
        description="How often `ragidx serve` syncs it: an interval ('30m', '6h', '1d') or a cron expression "
        "('0 3 * * *'). None: only `ragidx sync`.",
    )
    website: WebsiteOptions = Field(default_factory=WebsiteOptions, description="Website: how pages are fetched.")

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                f"source name {value!r}: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
                "digit (it is typed on the command line: ragidx sync NAME)"
            )
        return value

    @field_validator("allowed")
    @classmethod
    def _valid_allowed(cls, value: list[str]) -> list[str]:
        if not value:
            return []
        from ragidx.stores.access import InvalidPermissions, checked_permissions  # llama_index: only when used

        try:
            return list(checked_permissions({"allowed": value})["allowed"])
        except InvalidPermissions as exc:
            raise ValueError(str(exc)) from None

    @field_validator("metadata")
    @classmethod
    def _no_allowed_in_metadata(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "allowed" in value:
            raise ValueError("give a source's readers as its 'allowed' field, not inside 'metadata'")
        from ragidx.stores.access import InvalidPermissions, checked_permissions

        try:
            checked_permissions(value)  # a misspelt 'allowed' key would leave the articles public
        except InvalidPermissions as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("schedule")
    @classmethod
    def _valid_schedule(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        interval = schedule_interval_s(value)
        if interval is not None:
            if interval < 60:
                raise ValueError(f"schedule {value!r}: sync at most once a minute (use '1m' or longer)")
            return value
        try:
            from croniter import croniter
        except ImportError:
            raise ValueError(f"schedule {value!r}: cron schedules need croniter: pip install 'ragidx[sync]'") from None

        if len(value.split()) not in (5, 6) or not croniter.is_valid(value):
            raise ValueError(
                f"schedule {value!r} is neither an interval ('30m', '6h', '1d') nor a cron expression "
                "('0 3 * * *': minute hour day month weekday)"
            )
        return value

    @model_validator(mode="after")
    def _location_fits_kind(self) -> SourceConfig:
        needs = {
            "website": ("url or sitemap", self.url or self.sitemap),
            "folder": ("path", self.path),
            "llamaindex": ("reader", self.reader),
        }
        what, given = needs[self.kind]
        if not given:
            raise ValueError(f"source {self.name!r} ({self.kind}) needs {what}")
        foreign = {
            "url": (self.url, "website"),
            "sitemap": (self.sitemap, "website"),
            "path": (self.path, "folder"),
            "base_url": (self.base_url, "folder"),
            "reader": (self.reader, "llamaindex"),
        }
        for field, (value, kind) in foreign.items():
            if value is not None and kind != self.kind:
                raise ValueError(f"source {self.name!r} ({self.kind}): {field} is for {kind} sources; remove it")
        for field in ("reader_args", "load_args"):
            if getattr(self, field) and self.kind != "llamaindex":
                raise ValueError(f"source {self.name!r} ({self.kind}): {field} is for llamaindex sources; remove it")
        for field, value in (("url", self.url), ("sitemap", self.sitemap)):
            if value is not None and not value.startswith(("http://", "https://")):
                raise ValueError(f"source {self.name!r}: {field} must be an http:// or https:// URL")
        if self.reader is not None and "." not in self.reader.strip("."):
            raise ValueError(
                f"source {self.name!r}: reader must be a class path like 'llama_index.readers.obsidian.ObsidianReader'"
            )
        return self


def _unique_names(sources: list[SourceConfig]) -> list[SourceConfig]:
    seen: set[str] = set()
    for source in sources:
        if source.name in seen:
            raise ValueError(f"two sources are named {source.name!r}: give each source its own name")
        seen.add(source.name)
    return sources


SourceList = Annotated[list[SourceConfig], AfterValidator(_unique_names)]
"""The ``sources`` setting: sources with distinct names."""
