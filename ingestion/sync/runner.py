"""The sync of one source: scan it, compare, ingest what is new or changed, delete what is gone, remember.

:meth:`SyncRunner.sync` runs one source (``[[sources]]`` of the settings) end to end:

1. takes the source's lock (:meth:`SyncStateStore.lock`): a second sync of the same source, in any process that
   shares the article store, is reported ``already running`` and does nothing;
2. loads what the last sync remembered (:class:`~ingestion.sync.base.ItemState` per key) and lets the source's
   reader scan, handing it those states (for ETags, lastmod, mtimes);
3. gives every fetched article the source's ``metadata`` and ``allowed`` (a document's own ``allowed`` wins) and
   hashes it (:func:`sync_hash`: its text, title, url, language and metadata): the same hash as last time is
   *unchanged* and costs nothing; otherwise it is *new* or *changed* and goes, in batches, through the engine's
   ingestion (:class:`ingestion.pipeline.Ingestor`: chunks, ledger, permissions, injection flags, the widening
   refusal), which embeds only those articles;
4. an article whose text, title and language equal those of an item already stored (a file moved or copied) is
   ingested with that item's vectors (:class:`~ingestion.sync.reuse.ReusedEmbedding`): nothing is embedded again
   where the chunk store can hand vectors back; a moved file is reported ``moved``, not new and deleted;
5. deletes what is gone: when the scan finished, every item of the last sync that was neither fetched, unchanged
   nor failed this time (gone, no longer listed, or skipped now); when the scan stopped early
   (:class:`~ingestion.sync.base.SourceUnavailable` or any error) only those the reader said are gone. A failed
   item is never deleted. An article another source owns now is never deleted by this one;
6. records the last sync (counts, failures, pages per second) for ``ragidx sources``, the server and the dashboard.

When a source's settings changed since its last sync (its ``metadata``, ``allowed``, mapping ...: all but its
schedule), the reader is handed the states without their validators (ETag, Last-Modified, lastmod, mtime), so every
item is read again and compared: an article whose only change is its metadata is relabelled, not embedded.

Crash safety: an item's state is saved only after its article is stored and indexed, and an article's deletion
comes before its state is forgotten. A sync killed anywhere (``kill -9``) leaves states that lag behind the stores,
never ahead: the next sync fetches those items again, the ledger finds them already indexed (nothing embedded
twice, nothing doubled), and deletes again what was half deleted.

Example:
    >>> from ragidx.engine import Engine                                      # doctest: +SKIP
    >>> report = SyncRunner(Engine()).sync(Engine().settings.sources[0])       # doctest: +SKIP
    >>> report.as_dict()["new"]                                               # doctest: +SKIP
    12
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

from ingestion.sources import FILE_PATH
from ingestion.sync.base import Failed, Fetched, Gone, ItemState, Skipped, SourceReader, Unchanged
from ingestion.sync.config import SourceConfig
from ingestion.sync.kinds import ReaderContext, reader_for
from ingestion.sync.reuse import ReusedEmbedding, stored_vectors
from ingestion.sync.state import LastSync, SyncBusy, SyncStateStore
from ragidx import telemetry
from ragidx.article import Article
from ragidx.stores.access import ALLOWED, InvalidPermissions, checked_permissions
from ragidx.stores.article_store import INDEXED

if TYPE_CHECKING:
    from ingestion.pipeline import IngestReport
    from ragidx.engine import Engine

__all__ = ["ItemOutcome", "SyncReport", "SyncRunner", "body_hash", "source_hash", "sync_hash"]

logger = logging.getLogger(__name__)

What = Literal["new", "changed", "unchanged", "moved", "deleted", "failed", "skipped"]
OK, FAILED, BUSY = "ok", "failed", "already running"
MAX_RECORDED_ITEMS = 100
"""Failed and skipped items kept in a stored last-sync record (the counts are always whole)."""


def sync_hash(article: Article) -> str:
    """What decides whether a fetched article differs from last time: its text, title, url, language
    (``Article.content_hash``) and its metadata (permissions, the source's metadata, a file's stamp); not the path
    a file was read from on this machine."""
    meta = {k: v for k, v in article.metadata.items() if k != FILE_PATH}
    h = hashlib.sha256(article.content_hash.encode())
    h.update(json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str).encode())
    return h.hexdigest()


def source_hash(config: SourceConfig) -> str:
    """The hash of a source's settings that shape its articles (all but its schedule)."""
    data = config.model_dump(mode="json", exclude={"schedule"})
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def body_hash(article: Article) -> str:
    """The hash of what is embedded (title and text) and how it is read (language): equal for a moved file."""
    h = hashlib.sha256()
    for part in (article.title, article.language or "", article.content):
        h.update(part.encode())
        h.update(b"\x00")
    return h.hexdigest()


@dataclass(frozen=True)
class ItemOutcome:
    """What a sync did with one item: ``what`` it was, and for a failed or skipped one the ``reason`` (what
    happened and what to do) and the HTTP ``status`` where there is one."""

    key: str
    what: What
    kb_id: str | None = None
    reason: str | None = None
    status: int | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "what": self.what}
        out.update({k: v for k, v in (("kb_id", self.kb_id), ("reason", self.reason), ("status", self.status)) if v})
        return out


@dataclass
class SyncReport:
    """One source's sync: its counts, the time it took (scanning and embedding apart), and every item's outcome.

    ``status`` is ``"ok"`` (the scan finished; some items may have failed), ``"failed"`` (the source could not be
    listed or the sync stopped: ``error`` says why; nothing was deleted but what the source said is gone) or
    ``"already running"`` (another sync of it holds its lock; nothing was done).
    """

    name: str
    kind: str
    status: str = OK
    error: str | None = None
    items: list[ItemOutcome] = field(default_factory=list)
    chunks_embedded: int = 0
    chunks_reused: int = 0
    recovered: int = 0
    started_at: float = 0.0
    seconds: float = 0.0
    scan_seconds: float = 0.0
    embed_seconds: float = 0.0

    def count(self, what: What) -> int:
        return sum(1 for item in self.items if item.what == what)

    @property
    def pages_per_second(self) -> float:
        """Items read or confirmed unchanged per second of the whole sync."""
        done = sum(1 for i in self.items if i.what in ("new", "changed", "unchanged", "moved"))
        return done / self.seconds if self.seconds else 0.0

    @property
    def ok(self) -> bool:
        return self.status == OK

    def as_dict(self, *, items: bool = True, max_items: int | None = None) -> dict[str, Any]:
        """The report as plain data: the counts, times and, with ``items``, each item (at most ``max_items``,
        failed ones first)."""
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "status": self.status,
            **({"error": self.error} if self.error else {}),
            **{what: self.count(what) for what in ("new", "changed", "unchanged", "moved", "deleted")},
            "failed": self.count("failed"),
            "skipped": self.count("skipped"),
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "started_at": round(self.started_at, 3),
            "seconds": round(self.seconds, 3),
            "scan_seconds": round(self.scan_seconds, 3),
            "embed_seconds": round(self.embed_seconds, 3),
            "pages_per_second": round(self.pages_per_second, 2),
        }
        if items:
            order = {"failed": 0, "skipped": 1}
            listed = sorted(self.items, key=lambda i: order.get(i.what, 2)) if max_items is not None else self.items
            out["items"] = [i.as_dict() for i in listed[:max_items]]
        return out


@dataclass
class _Pending:
    key: str
    article: Article
    state: ItemState
    what: What
    body: str
    reuse_from: str | None  # the key of a stored item with the same body


class SyncRunner:
    """Runs syncs of sources into an engine's stores (see the module docstring).

    Args:
        engine: the engine whose stores the articles go to (its ``ingest`` and ``delete`` are used).
        batch_articles: articles ingested per batch (a batch's states are saved when it is stored).
        allow_widening: apply changes that let more people read an article (None: the ``refuse_widening``
            setting decides, as for ``ragidx ingest``).
    """

    def __init__(self, engine: Engine, *, batch_articles: int = 128, allow_widening: bool | None = None) -> None:
        self.engine = engine
        self.batch_articles = batch_articles
        self.allow_widening = allow_widening
        self._states: SyncStateStore | None = None

    @property
    def states(self) -> SyncStateStore:
        if self._states is None:
            self._states = SyncStateStore(self.engine.article_store)
        return self._states

    def source(self, name: str) -> SourceConfig:
        """The configured source of this name.

        Raises:
            ValueError: no source has it (the message lists those that exist).
        """
        for config in self.engine.settings.sources:
            if config.name == name:
                return config
        names = ", ".join(c.name for c in self.engine.settings.sources) or "none: add [[sources]] to ragidx.toml"
        raise ValueError(f"no source named {name!r}; the sources are: {names}")

    def sync_all(
        self, names: Sequence[str] = (), *, on_item: Callable[[str, ItemOutcome], None] | None = None
    ) -> list[SyncReport]:
        """Sync the named sources (none named: every configured one), one after the other."""
        configs = [self.source(n) for n in names] if names else list(self.engine.settings.sources)
        reports = []
        for config in configs:
            each = functools.partial(on_item, config.name) if on_item is not None else None
            reports.append(self.sync(config, on_item=each))
        return reports

    def last_syncs(self) -> dict[str, LastSync]:
        """Every source's last sync as recorded."""
        return self.states.last_syncs()

    def sync(
        self,
        config: SourceConfig,
        *,
        on_item: Callable[[ItemOutcome], None] | None = None,
        reader: SourceReader | None = None,
    ) -> SyncReport:
        """Sync one source; the source's own failures are the report's ``error``, never raised.

        Args:
            config: the source.
            on_item: called with each item's outcome as it is decided (a progress bar).
            reader: scan with this reader instead of the one the source's kind builds (a program's own source).

        Raises:
            IngestStorageError: the stores could not be written (disk full ...); what was done is kept.
        """
        report = SyncReport(name=config.name, kind=config.kind, started_at=time.time())
        started = time.perf_counter()
        with telemetry.span("ragidx.sync", source=config.name, kind=config.kind) as traced:  # a no-op when off
            try:
                with self.states.lock(config.name):
                    try:
                        _Sync(self, config, report, on_item).run(reader)
                    finally:
                        report.seconds = time.perf_counter() - started
                        self._record(config, report)
            except SyncBusy as exc:
                report.status, report.error = BUSY, str(exc)
                report.seconds = time.perf_counter() - started
            traced.set("ragidx.sync.status", report.status)
            traced.counts(report.as_dict(items=False))
        logger.info("synced %s: %s", config.name, report.as_dict(items=False))
        return report

    def _record(self, config: SourceConfig, report: SyncReport) -> None:
        data = report.as_dict(items=True, max_items=MAX_RECORDED_ITEMS)
        data["items"] = [i for i in data["items"] if i["what"] in ("failed", "skipped")]
        data["source_hash"] = source_hash(config)
        try:
            self.states.record(config.name, report.started_at, time.time(), report.status, data)
        except Exception:  # the sync itself is done: a record that cannot be written is logged, not raised
            logger.warning("could not record the last sync of %s", config.name, exc_info=True)


class _Sync:
    """One run of one source (the state a sync carries while it scans)."""

    def __init__(
        self,
        runner: SyncRunner,
        config: SourceConfig,
        report: SyncReport,
        on_item: Callable[[ItemOutcome], None] | None,
    ) -> None:
        self.runner = runner
        self.engine = runner.engine
        self.states = runner.states
        self.config = config
        self.report = report
        self.on_item = on_item
        self.previous: dict[str, ItemState] = {}
        self.by_body: dict[str, str] = {}  # body hash → a key stored with it
        self.seen: set[str] = set()
        self.kept_kb_ids: set[str] = set()
        self.lost: set[str] = set()  # items of the last sync whose article is gone from the store
        self.pending: list[_Pending] = []
        self.unchanged: list[ItemState] = []
        self.gone: list[str] = []
        self.moved_from: dict[str, str] = {}  # the key an item reused the vectors of → that item's key

    def emit(self, outcome: ItemOutcome) -> None:
        self.report.items.append(outcome)
        if self.on_item is not None:
            self.on_item(outcome)

    def run(self, reader: SourceReader | None) -> None:
        self.previous = self.states.load(self.config.name)
        # an item whose article is no longer stored (deleted by hand, or by another source's --replace) is read
        # again and stored again, whatever its validators say
        stored = self.engine.article_store.states(list({s.kb_id for s in self.previous.values()}))
        self.lost = {k for k, s in self.previous.items() if s.kb_id not in stored}
        handed = {k: s for k, s in self.previous.items() if k not in self.lost}
        last = self.states.last_syncs().get(self.config.name)
        if last is not None and last.report.get("source_hash") != source_hash(self.config):
            # the source's settings changed (its metadata, readers, mapping ...): every item is read again and
            # compared, as no 304 or equal mtime says its article is still what these settings make of it
            handed = {k: dataclasses.replace(s, etag=None, last_modified=None, lastmod=None) for k, s in handed.items()}
        self.by_body = {body: key for key, body in self.states.body_hashes(self.config.name).items()}
        complete = False
        try:
            if reader is None:
                context = ReaderContext(settings=self.engine.settings, article_store=self.engine.article_store)
                reader = reader_for(self.config, context)
            events = iter(reader.scan(MappingProxyType(dict(handed))))
            while True:
                t0 = time.perf_counter()
                try:
                    event = next(events)
                except StopIteration:
                    break
                finally:
                    self.report.scan_seconds += time.perf_counter() - t0
                self.take(event)
            complete = True
        except Exception as exc:  # the source as a whole failed: nothing it did not say is gone is deleted
            self.report.status = FAILED
            self.report.error = _reason(exc, self.config.name)
            logger.info("sync of %s stopped: %s", self.config.name, self.report.error)  # the caller reports it
            logger.debug("sync of %s stopped", self.config.name, exc_info=True)
        self.flush()
        self.save_unchanged()
        gone = [k for k in self.previous if k not in self.seen] if complete else list(dict.fromkeys(self.gone))
        self.delete([k for k in gone if k in self.previous])

    # --- one event --------------------------------------------------------------------------------
    def take(self, event: Any) -> None:
        key = event.key
        if isinstance(event, Fetched):
            self.seen.add(key)
            self.fetched(event)
        elif isinstance(event, Unchanged):
            self.seen.add(key)
            prev = self.previous.get(key)
            if prev is None or key in self.lost:
                self.emit(ItemOutcome(key, "failed", reason="reported unchanged but not stored: read next sync"))
                return
            # the runner's hash and article id stay; the reader's validators are news
            kept = dataclasses.replace(event.state, key=key, kb_id=prev.kb_id, content_hash=prev.content_hash)
            self.unchanged.append(kept)
            self.kept_kb_ids.add(prev.kb_id)
            self.emit(ItemOutcome(key, "unchanged", kb_id=prev.kb_id))
            if len(self.unchanged) >= 500:
                self.save_unchanged()
        elif isinstance(event, Failed):
            self.seen.add(key)  # kept as stored, retried next sync
            if key in self.previous:
                self.kept_kb_ids.add(self.previous[key].kb_id)
            self.emit(ItemOutcome(key, "failed", reason=event.reason, status=event.status))
        elif isinstance(event, Skipped):
            self.emit(ItemOutcome(key, "skipped", reason=event.reason))
        elif isinstance(event, Gone):
            self.gone.append(key)
        else:
            raise TypeError(f"a source reader yielded {type(event).__name__}, not a scan event")

    def fetched(self, event: Fetched) -> None:
        key = event.key
        article = self.prepared(event.article)
        if isinstance(article, str):
            self.emit(ItemOutcome(key, "failed", kb_id=event.article.kb_id, reason=article))
            if key in self.previous:
                self.kept_kb_ids.add(self.previous[key].kb_id)
            return
        digest = sync_hash(article)
        state = dataclasses.replace(event.state, key=key, kb_id=article.kb_id, content_hash=digest)
        prev = self.previous.get(key)
        self.kept_kb_ids.add(article.kb_id)
        if prev is not None and prev.content_hash == digest and prev.kb_id == article.kb_id and key not in self.lost:
            self.unchanged.append(state)
            self.emit(ItemOutcome(key, "unchanged", kb_id=article.kb_id))
            return
        body = body_hash(article)
        reuse_from = None
        if prev is None or prev.kb_id != article.kb_id:
            donor = self.by_body.get(body)
            reuse_from = donor if donor != key and donor in self.previous else None
        what: What = "new" if prev is None or key in self.lost else "changed"
        self.pending.append(_Pending(key, article, state, what, body, reuse_from))
        if len(self.pending) >= self.runner.batch_articles:
            self.flush()

    def prepared(self, article: Article) -> Article | str:
        """The article with the source's metadata and readers, its permissions checked; or why it is refused."""
        meta = {**self.config.metadata, **article.metadata}
        if self.config.allowed and ALLOWED not in meta:
            meta[ALLOWED] = list(self.config.allowed)
        path = meta.pop(FILE_PATH, None)
        try:
            meta = checked_permissions(meta)
        except InvalidPermissions as exc:
            return f"{exc}; not stored (its stored copy, if any, is kept)"
        if path is not None:
            meta[FILE_PATH] = path
        return article if meta == article.metadata else dataclasses.replace(article, metadata=meta)

    # --- writing ----------------------------------------------------------------------------------
    def flush(self) -> None:
        batch, self.pending = self.pending, []
        if not batch:
            return
        plain = [p for p in batch if p.reuse_from is None]
        reusing = [p for p in batch if p.reuse_from is not None]
        if plain:
            self.store(plain, self.ingest_plain([p.article for p in plain]))
        if reusing:
            self.store(reusing, self.ingest_reusing(reusing))

    def widen(self) -> bool:
        allow = self.runner.allow_widening
        return not self.engine.settings.refuse_widening if allow is None else allow

    def ingest_plain(self, articles: list[Article]) -> tuple[IngestReport, int]:
        report = self.engine.ingest(articles, source_name=self.config.name, allow_widening=self.runner.allow_widening)
        return report, 0

    def ingest_reusing(self, batch: list[_Pending]) -> tuple[IngestReport, int]:
        """Ingest articles whose text a stored item has, with that item's vectors where the chunk store gives them."""
        donors = [self.previous[p.reuse_from].kb_id for p in batch if p.reuse_from in self.previous]
        vectors = stored_vectors(self.engine.chunk_store, donors)
        ingestor = self.engine.ingestor()
        reuse = ReusedEmbedding.around(self.engine.embed_model, vectors)
        ingestor.pipeline.transformations[-1] = reuse  # the pipeline's embedding step, for this ingestor only
        report = ingestor.ingest([p.article for p in batch], source=self.config.name, allow_widening=self.widen())
        for p in batch:
            if p.reuse_from is not None:
                self.moved_from[p.reuse_from] = p.key
        return report, reuse.reused

    def store(self, batch: list[_Pending], result: tuple[IngestReport, int]) -> None:
        """Save the states of the batch's articles that are stored and indexed now; report the others failed."""
        report, reused = result
        self.report.chunks_embedded += report.chunks_written - reused
        self.report.chunks_reused += reused
        self.report.embed_seconds += report.embed_seconds
        self.report.recovered += report.recovered
        refused = {kb_id: f"its id belongs to source {owner!r}; left as it is" for kb_id, owner in report.conflicts}
        refused.update(
            {
                kb_id: "this would let more people read it than before; left as stored (ragidx sync --allow-widening "
                "applies it)"
                for kb_id in report.widening_refused
            }
        )
        ledger = self.engine.article_store.states([p.article.kb_id for p in batch])
        done: list[_Pending] = []
        for p in batch:
            reason = refused.get(p.article.kb_id)
            if reason is None and ledger.get(p.article.kb_id) != (p.article.content_hash, INDEXED):
                reason = "not stored (see the log); read again next sync"
            if reason is not None:
                self.emit(ItemOutcome(p.key, "failed", kb_id=p.article.kb_id, reason=reason))
                self.kept_kb_ids.discard(p.article.kb_id)
                if p.key in self.previous:
                    self.kept_kb_ids.add(self.previous[p.key].kb_id)
                continue
            done.append(p)
        # an item now stored under another id (a canonical URL that changed): its old article goes before the new
        # state is saved, so a kill in between leaves the old id in the state, and the next sync deletes it again
        replaced = [
            prev.kb_id for p in done if (prev := self.previous.get(p.key)) is not None and prev.kb_id != p.article.kb_id
        ]
        self.delete_articles(replaced)
        self.states.save(self.config.name, [p.state for p in done], body_hashes={p.key: p.body for p in done})
        for p in done:
            self.by_body.setdefault(p.body, p.key)
            self.emit(ItemOutcome(p.key, p.what, kb_id=p.article.kb_id))

    def save_unchanged(self) -> None:
        batch, self.unchanged = self.unchanged, []
        self.states.save(self.config.name, batch, body_hashes={})

    def delete_articles(self, kb_ids: Sequence[str]) -> None:
        """Delete these articles, but those a kept item still uses and those another source owns now."""
        unused = list(dict.fromkeys(k for k in kb_ids if k not in self.kept_kb_ids))
        owners = self.engine.article_store.owners(unused) if unused else {}
        mine = [k for k in unused if owners.get(k, (self.config.name, ""))[0] == self.config.name]
        if mine:
            self.engine.delete(mine)

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the articles of these items (see :meth:`delete_articles`), then forget the items."""
        if not keys:
            return
        self.delete_articles([self.previous[k].kb_id for k in keys])
        self.states.forget(self.config.name, list(keys))
        moved = {self.moved_from[k]: k for k in keys if k in self.moved_from}
        for item in self.report.items:
            if item.key in moved and item.what == "new":
                index = self.report.items.index(item)
                self.report.items[index] = dataclasses.replace(item, what="moved", reason=f"from {moved[item.key]}")
        for key in keys:
            if key not in self.moved_from:
                self.emit(ItemOutcome(key, "deleted", kb_id=self.previous[key].kb_id))


def _reason(exc: BaseException, name: str) -> str:
    from ingestion.sync.base import SourceUnavailable

    if isinstance(exc, SourceUnavailable):
        return str(exc)
    if isinstance(exc, (RuntimeError, ValueError, OSError, ImportError)) and str(exc):
        return f"{exc}"
    return f"source {name!r} stopped with {type(exc).__name__}: {exc}; nothing was deleted, the next sync retries"
