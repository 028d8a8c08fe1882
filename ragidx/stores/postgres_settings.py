"""Settings of the PostgreSQL chunk store (``store = "postgres"``): pgvector's HNSW index and its search.

Kept apart from :mod:`ragidx.stores.postgres_store` so that ``ragidx.config`` imports no database driver.

Example:
    >>> PgvectorSettings().ef_search
    400
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PgvectorSettings"]


class PgvectorSettings(BaseModel):
    """pgvector's HNSW index (``RAGIDX_PGVECTOR__M``, ``__EF_CONSTRUCTION``, ``__EF_SEARCH`` ...).

    The defaults are above pgvector's (16, 64, 40): near-copies of a chunk (an article's versions, pages repeated
    across a manual) fill a node's links with each other at 16, and searches stop finding the rest of the graph.
    Measured with ``benchmarks/store_scale.py`` (100k chunks, clusters of ~33 near-copies, 100 hybrid queries
    of 100 candidates): m 16 gave recall@10 0.89 (0.72 filtered) at any ef_search; m 32 / ef_construction 128
    gave 0.997 (0.74) at ef_search 100 and 1.0 (0.95) at 400, p95 192 ms (245 ms filtered) on the loaded 2 cores.

    Example:
        >>> PgvectorSettings(ef_search=200).m
        32
    """

    model_config = ConfigDict(extra="forbid")

    m: int = Field(default=32, ge=2, le=100, description="HNSW: links per node (pgvector's default 16).")
    ef_construction: int = Field(
        default=128, ge=4, le=1000, description="HNSW: candidates kept while building (pgvector's default 64)."
    )
    ef_search: int = Field(
        default=400,
        ge=1,
        le=1000,
        description="HNSW: candidates kept while searching; at least the number of chunks asked for is used.",
    )
    index_min_rows: int = Field(
        default=20_000,
        ge=0,
        description="The HNSW index is built once a table holds this many chunks; below, every search is exact.",
    )
    iterative_scan: Literal["off", "relaxed_order", "strict_order"] = Field(
        default="relaxed_order",
        description="pgvector 0.8's iterative index scan: a filtered search reads on until it has its k chunks "
        "('off': a narrow filter may return fewer).",
    )
