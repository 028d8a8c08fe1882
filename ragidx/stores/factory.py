"""Build the configured stores from Settings. The only place that knows which backend is in use."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlparse

from ragidx.config import Settings
from ragidx.stores.active_table import active_table
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore

logger = logging.getLogger(__name__)


def build_chunk_store(settings: Settings) -> Any:
    """LanceDB on disk by default; pgvector when ``store='postgres'``; Weaviate when ``store='weaviate'``."""
    if settings.store == "postgres":
        return build_postgres_store(settings)
    if settings.store == "lancedb":
        return LanceDBChunkStore(
            # "" without a tenant: such a process sees the chunks of no tenant, never every tenant's
            uri=settings.lancedb_uri,
            table_name=active_table(settings.lancedb_uri, settings.collection),  # `ragidx reindex` may switch it
            collection=settings.collection,  # and the store follows the switch (follow_switch)
            tenant=settings.tenant or "",
        )
    return build_weaviate_store(settings)


def build_postgres_store(settings: Settings) -> Any:
    """The chunks in the PostgreSQL database of ``article_store_url``, beside the articles and the ledger."""
    from ragidx.stores.postgres_store import PostgresChunkStore

    if settings.article_store_url is None:
        raise ValueError(
            "store='postgres' keeps the chunks in the database of article_store_url: set it "
            "(RAGIDX_ARTICLE_STORE_URL=postgresql://USER:PASSWORD@HOST:5432/DB)"
        )
    return PostgresChunkStore(
        url=settings.article_store_url.get_secret_value(),
        collection=settings.collection,
        tenant=settings.tenant or "",
        hnsw=settings.pgvector,
    )


def build_weaviate_store(settings: Settings) -> Any:
    import weaviate

    from ragidx.stores.weaviate_store import WeaviateChunkStore

    if not settings.weaviate_url:
        raise ValueError("store='weaviate' needs weaviate_url (RAGIDX_WEAVIATE_URL)")
    url = urlparse(settings.weaviate_url)
    auth = weaviate.auth.AuthApiKey(settings.weaviate_api_key.get_secret_value()) if settings.weaviate_api_key else None
    try:
        client = weaviate.connect_to_custom(
            http_host=url.hostname or "localhost",
            http_port=url.port or (443 if url.scheme == "https" else 8080),
            http_secure=url.scheme == "https",
            grpc_host=url.hostname or "localhost",
            grpc_port=settings.weaviate_grpc_port,
            grpc_secure=url.scheme == "https",
            auth_credentials=auth,
        )
    except Exception as exc:
        raise ConnectionError(
            f"cannot reach Weaviate at {settings.weaviate_url} (gRPC port {settings.weaviate_grpc_port}): "
            f"{type(exc).__name__}. Start it (docs: 'Deployment past one machine') or set RAGIDX_STORE=lancedb."
        ) from exc
    logger.info("connected to Weaviate at %s, collection %s", settings.weaviate_url, settings.collection)
    return WeaviateChunkStore(weaviate_client=client, index_name=settings.collection, tenant=settings.tenant)


def build_article_store(settings: Settings) -> ArticleStore:
    """The SQLite file in ``data_dir``, or the shared database at ``article_store_url``; scoped to the tenant."""
    if settings.article_store_url is None:
        if settings.store == "weaviate":
            logger.info(
                "store='weaviate' with the articles and ingest ledger in %s on this machine: other engine "
                "processes will not see them. Set article_store_url to a PostgreSQL database to share them.",
                settings.article_db_path,
            )
        return ArticleStore(settings.article_db_path, tenant=settings.tenant)
    return ArticleStore(settings.article_store_url.get_secret_value(), tenant=settings.tenant)
