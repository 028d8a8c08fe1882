"""Settings of the PostgreSQL chunk store (``store = "postgres"``): pgvector's HNSW index and its search.

Kept apart from :mod:`ragidx.stores.postgres_store` so that ``ragidx.config`` imports no database driver.

Example:
    >>> PgvectorSettings().ef_search
    100
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PgvectorSettings"]


class PgvectorSettings(BaseModel):
    """pgvector's HNSW index (``RAGIDX_PGVECTOR__M``, ``__EF_CONSTRUCTION``, ``__EF_SEARCH`` ...).

    Example:
        >>> PgvectorSettings(ef_search=200).m
        16
    """

    model_config = ConfigDict(extra="forbid")

    m: int = Field(default=16, ge=2, le=100, description="HNSW: links per node (pgvector's default 16).")
    ef_construction: int = Field(
        default=64, ge=4, le=1000, description="HNSW: candidates kept while building (pgvector's default 64)."
    )
    ef_search: int = Field(
        default=100,
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
