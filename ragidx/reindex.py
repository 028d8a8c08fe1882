"""``ragidx reindex``: embed a knowledge base again with the model configured now, then switch to it.

An index holds one model's vectors (:meth:`ragidx.stores.lancedb_store.LanceDBChunkStore.check_embedding` refuses
any other). Moving to another model — a service's (``[embedding]``) or another bundled one — is this command:

1. every article is read from the article store (whole articles are kept there: no source is read again),
   chunked for the new model and embedded by it into a new LanceDB table; the old table keeps answering
   meanwhile (a running ``ragidx serve`` with the old settings goes on unchanged);
2. articles ingested, changed or deleted while it ran are caught up (compared by their content hash);
3. the collection is pointed at the new table in one atomic replace (:mod:`ragidx.stores.active_table`); the old
   table is kept (``--drop-old`` removes it then, or later) until nothing reads it.

Killed half-way, the same command resumes: what it was doing is in ``<collection>.reindex.json`` beside the
tables, and articles whose chunks are already in the new table are not embedded again.

With ``store = "postgres"`` the same steps run in the database (:mod:`ragidx.reindex_postgres`): a new chunk table,
and a pointer row that every engine process follows without a restart.

Example:
    >>> from ragidx.config import Settings
    >>> report = reindex(Settings(data_dir="/tmp/kb", embed_model="e5-multilingual"))  # doctest: +SKIP
    >>> report.articles, report.table  # doctest: +SKIP
    (1200, 'Articles_r3f9c1a2b')
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ragidx.config import Settings
from ragidx.stores.active_table import active_table, previous_tables, switch_table

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ragidx.article import Article
    from ragidx.stores.article_store import ArticleStore

__all__ = ["ReindexReport", "add_reindex_command", "model_identity", "reindex"]

logger = logging.getLogger(__name__)

BATCH_ARTICLES = 64
"""Articles embedded and written per step: one LanceDB write each, so a kill loses at most one step."""
CATCH_UP_ROUNDS = 3


@dataclass
class ReindexReport:
    """What ``reindex`` did: the tables, the model, the articles and chunks written, and the time it took."""

    old_table: str
    table: str
    model: str
    old_model: str | None
    articles: int = 0
    chunks: int = 0
    resumed: int = 0
    deleted: int = 0
    dropped: list[str] = field(default_factory=list)
    seconds: float = 0.0
    switched: bool = False

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def model_identity(embed_model: BaseEmbedding) -> str:
    """The name an index records for ``embed_model``'s vectors (``index_name`` where it has one)."""
    return str(getattr(embed_model, "index_name", None) or embed_model.model_name)


def reindex(
    settings: Settings,
    *,
    drop_old: bool = False,
    batch_articles: int = BATCH_ARTICLES,
    progress: bool = False,
    embed_model: BaseEmbedding | None = None,
) -> ReindexReport:
    """Embed every stored article with the configured model into a new table, then make it the one that answers.

    Args:
        settings: the settings with the new model (``[embedding]``, or ``embed_model``; ``"auto"``: the model it
            picks for the stored articles' languages).
        drop_old: remove the tables the collection answered from before, once switched (also when there is
            nothing to embed again).
        batch_articles: articles per write (a kill loses at most one batch's work).
        progress: a progress bar on stderr.
        embed_model: the model to embed with (None: the one ``settings`` configure).

    Raises:
        ValueError: the store is Weaviate, or the index is already this model's (nothing to do), or (PostgreSQL)
            another reindex of the collection is running.
    """
    from ragidx.stores.factory import build_article_store
    from ragidx.stores.lancedb_store import LanceDBChunkStore

    if settings.store == "postgres":
        from ragidx.reindex_postgres import reindex_postgres

        return reindex_postgres(
            settings, drop_old=drop_old, batch_articles=batch_articles, progress=progress, embed_model=embed_model
        )
    if settings.store != "lancedb":
        raise ValueError(
            f"ragidx reindex moves LanceDB and PostgreSQL indexes; with store={settings.store!r} ingest into a new "
            "collection with the new model and point collection at it"
        )
    started = time.perf_counter()
    uri, collection = settings.lancedb_uri, settings.collection
    old_table = active_table(uri, collection)
    old_store = LanceDBChunkStore(uri, table_name=old_table, tenant=None)
    old_model = old_store.embed_model_name()
    articles = build_article_store(settings.model_copy(update={"tenant": None}))
    try:
        model = embed_model or _configured_model(settings, articles)
        identity = model_identity(model)
        state = _State(uri, collection)
        table = state.resume(identity, old_table)
        report = ReindexReport(old_table=old_table, table=table or old_table, model=identity, old_model=old_model)
        if table is None and old_model == identity:
            if drop_old:
                report.dropped = _drop_previous(uri, collection, old_table)
            elif not previous_tables(uri, collection):
                raise already_embedded(identity)
            report.seconds = time.perf_counter() - started
            return report
        if table is None:
            table = f"{collection}_r{hashlib.sha1(f'{identity}{time.time()}'.encode()).hexdigest()[:8]}"
            state.start(identity, table, old_table)
            report.table = table
        _embed_all(
            settings,
            articles,
            model,
            lambda tenant: LanceDBChunkStore(uri, table_name=table, tenant=tenant),
            report,
            batch_articles=batch_articles,
            progress=progress,
        )
        LanceDBChunkStore(uri, table_name=table, tenant=None).finalize()
        switch_table(uri, collection, table, model=identity)
        report.switched = True
        state.finish()
        if drop_old:
            report.dropped = _drop_previous(uri, collection, table)
    finally:
        articles.close()
    report.seconds = time.perf_counter() - started
    return report


def already_embedded(identity: str) -> ValueError:
    """The error of a reindex to the model the index already has (and no old table left to drop)."""
    return ValueError(
        f"the index is already embedded by {identity!r}: nothing to do (set [embedding] or embed_model to the new "
        "model first)"
    )


def _configured_model(settings: Settings, articles: ArticleStore) -> BaseEmbedding:
    from ragidx.providers.embedding_choice import (
        AUTO_EMBED_MODEL,
        SAMPLE_ARTICLES,
        choose_embed_model,
        sample_languages,
    )
    from ragidx.providers.embedding_factory import build_embed_model

    if settings.embedding is None and settings.embed_model == AUTO_EMBED_MODEL:
        sample: list[Article] = []
        for tenant in _tenants(articles):
            store = _scoped(settings, tenant)
            sample.extend(store.get(store.indexed_ids()[:SAMPLE_ARTICLES]).values())
            store.close()
        chosen = choose_embed_model(sample_languages(sample, settings.default_language))
        settings = settings.model_copy(update={"embed_model": chosen})
    return build_embed_model(settings)


class Recorded(Protocol):
    """Where a run keeps, per tenant, the content hash each article was embedded from (PostgreSQL keeps it in the
    database, so a resumed run embeds again only what changed while it was down)."""

    def load(self, tenant: str) -> dict[str, str]: ...
    def save(self, tenant: str, hashes: dict[str, str]) -> None: ...
    def forget(self, tenant: str, kb_ids: list[str]) -> None: ...


def _embed_all(
    settings: Settings,
    articles: ArticleStore,
    model: BaseEmbedding,
    open_chunks: Callable[[str], Any],
    report: ReindexReport,
    *,
    batch_articles: int,
    progress: bool,
    recorded: Recorded | None = None,
    with_pending: bool = False,
) -> None:
    """Every tenant's articles into the chunk store ``open_chunks(tenant)`` opens (the new table).

    Args:
        recorded: the hashes embedded by earlier (killed) runs (None: this run's only, in memory).
        with_pending: also the articles being indexed now (the last catch-up, while no one writes the old table).
    """
    dim = len(model.get_query_embedding("dimension check"))
    for tenant in _tenants(articles):
        store = _scoped(settings, tenant)
        try:
            chunks = open_chunks(tenant)
            _embed_tenant(
                settings, store, model, chunks, tenant, dim, report, batch_articles, progress, recorded, with_pending
            )
        finally:
            store.close()


def _embed_tenant(
    settings: Settings,
    store: ArticleStore,
    model: BaseEmbedding,
    chunks: Any,
    tenant: str,
    dim: int,
    report: ReindexReport,
    batch_articles: int,
    progress: bool,
    recorded: Recorded | None = None,
    with_pending: bool = False,
) -> None:
    """One tenant's articles into ``chunks``; then, until nothing changed, those written or deleted meanwhile."""
    from ingestion.pipeline import Ingestor

    chunks.check_embedding(dim, model_identity(model))  # a new table records the model
    ingestor = Ingestor(
        chunks,
        store,
        model,
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap_tokens,
        tenant=tenant or None,
        default_language=settings.default_language,
    )
    # kb_id → the content hash its chunks were made from (this run; with ``recorded``, earlier runs' too)
    embedded: dict[str, str] = recorded.load(tenant) if recorded is not None else {}
    bar = _bar(progress, tenant)
    for round_no in range(CATCH_UP_ROUNDS + 1):
        wanted = store.indexed_ids()
        if with_pending:
            wanted = sorted({*wanted, *store.pending_ids()})
        hashes = {k: h for k, (h, _) in store.states(wanted).items()}
        have = chunks.kb_ids()
        if recorded is None:
            todo = [k for k in wanted if k not in have or (k in embedded and embedded[k] != hashes.get(k))]
        else:  # an article whose hash was not recorded (killed between the write and the record) is embedded again
            todo = [k for k in wanted if k not in have or embedded.get(k) != hashes.get(k)]
        if round_no == 0 and not with_pending:
            report.resumed += len((have & set(wanted)) - set(todo))
        gone = sorted(have - set(wanted))
        if gone:
            chunks.delete_articles(gone)
            if recorded is not None:
                recorded.forget(tenant, gone)
            report.deleted += len(gone)
        if not todo:
            break
        if bar is not None:
            bar.total = (bar.total or 0) + len(todo)
            bar.refresh()
        for ids in _batches(todo, batch_articles):
            batch = store.get(ids)
            found = [batch[k] for k in ids if k in batch]
            nodes = ingestor.embedded_chunks(found)
            chunks.delete_articles([a.kb_id for a in found if a.kb_id in have or a.kb_id in embedded])
            chunks.add(nodes)
            done = {a.kb_id: hashes.get(a.kb_id, "") for a in found}
            embedded.update(done)
            if recorded is not None:
                recorded.save(tenant, done)
            report.articles += len(found)
            report.chunks += len(nodes)
            if bar is not None:
                bar.update(len(ids))
    if bar is not None:
        bar.close()


def _tenants(articles: ArticleStore) -> list[str]:
    """Every tenant the article store holds articles of ('' for none)."""
    from sqlalchemy import distinct, select

    with articles.engine.connect() as conn:
        return sorted(str(t or "") for (t,) in conn.execute(select(distinct(articles.table.c.tenant))))


def _scoped(settings: Settings, tenant: str) -> ArticleStore:
    """The article store as ``tenant`` reads it (close it after use)."""
    from ragidx.stores.factory import build_article_store

    return build_article_store(settings.model_copy(update={"tenant": tenant or None}))


def _batches(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _bar(progress: bool, tenant: str) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=0, unit="article", desc=f"reindex{f' ({tenant})' if tenant else ''}", file=sys.stderr)


def _drop_previous(uri: Path, collection: str, keep: str) -> list[str]:
    """Remove the tables ``collection`` answered from before (never ``keep``, the active one)."""
    import lancedb

    db = lancedb.connect(uri)
    names = set(db.table_names())
    dropped = [t for t in previous_tables(uri, collection) if t != keep and t in names]
    for name in dropped:
        db.drop_table(name)
    switch_table(uri, collection, keep, model=_recorded_model(uri, collection), previous=[])
    return dropped


def _recorded_model(uri: Path, collection: str) -> str:
    from ragidx.stores.lancedb_store import LanceDBChunkStore

    return LanceDBChunkStore(uri, table_name=active_table(uri, collection), tenant=None).embed_model_name() or ""


class _State:
    """``<collection>.reindex.json``: the run under way (its model and new table), so a killed run resumes."""

    def __init__(self, uri: Path, collection: str) -> None:
        self.path = Path(uri) / f"{collection}.reindex.json"
        self.uri = uri

    def resume(self, identity: str, old_table: str) -> str | None:
        """The table a killed run for the same model was writing (None: none; one for another model is dropped)."""
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        table = state.get("table")
        if state.get("model") == identity and state.get("from") == old_table and isinstance(table, str):
            logger.info("resuming the reindex into %s", table)
            return table
        if isinstance(table, str) and table != old_table:
            import lancedb

            db = lancedb.connect(self.uri)
            if table in db.table_names():
                logger.warning(
                    "an unfinished reindex to %s is discarded: the model is now %s", state.get("model"), identity
                )
                db.drop_table(table)
        self.path.unlink(missing_ok=True)
        return None

    def start(self, identity: str, table: str, old_table: str) -> None:
        Path(self.uri).mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"model": identity, "table": table, "from": old_table}), encoding="utf-8")

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


# --- the command -------------------------------------------------------------------------------------


def add_reindex_command(sub: Any) -> None:
    """``ragidx reindex`` in the CLI's subcommands."""
    p = sub.add_parser(
        "reindex",
        help="embed every stored article again with the model configured now ([embedding] or embed_model) into a "
        "new index while the old one answers, then switch to it (resumes after a kill)",
    )
    p.add_argument(
        "--drop-old", action="store_true", help="remove the index answered from before, once switched (default: kept)"
    )
    p.add_argument("--batch", type=int, default=BATCH_ARTICLES, help=f"articles per write (default {BATCH_ARTICLES})")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_reindex)


def _cmd_reindex(args: argparse.Namespace) -> int:
    from ragidx.safe_text import printable_json

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    report = reindex(Settings(**overrides), drop_old=args.drop_old, batch_articles=args.batch, progress=not args.quiet)
    print(printable_json(report.as_dict()))
    return 0
