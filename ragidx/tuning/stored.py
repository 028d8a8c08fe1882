"""The tuned configuration on disk, beside the index, valid only for the index it was tuned on.

``ragidx tune`` writes ``DATA_DIR/tuning.json`` (``tuning.<Collection>[.<tenant>].json`` for another
collection or a tenant) holding the chosen values of the tunable settings (``TUNABLE_FIELDS``), every
candidate's scores, and the *index fingerprint*: a hash of the settings that shape the index (embedding
model and runtime, chunking, store, collection, tenant, and any setting not known to be index-neutral)
and of the article ledger's digest (article and chunk counts, the latest write). An ingest that adds,
changes or deletes anything, or a changed index setting, changes the fingerprint, and the stored
choice is then ignored (with a log line saying to re-run ``ragidx tune``); an ingest that finds every
article unchanged writes nothing and keeps it.

The engine applies a valid choice to every tunable field that was not set explicitly: a keyword
argument, a ``RAGIDX_*`` variable or a ``ragidx.toml`` entry wins (``Settings.explicit_fields``).

Example:
    >>> from ragidx.config import Settings
    >>> tuning_path(Settings(data_dir="/tmp/kb")).name
    'tuning.json'
    >>> apply_tuning(Settings(hybrid_alpha=0.7), {"hybrid_alpha": 0.2, "reranker": "none"}).hybrid_alpha
    0.7
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from ragidx.config import TUNABLE_FIELDS, Settings

__all__ = [
    "TUNING_FORMAT",
    "TuningResult",
    "apply_tuning",
    "index_fingerprint",
    "load_tuning",
    "save_tuning",
    "tuning_path",
]

logger = logging.getLogger(__name__)

TUNING_FORMAT = 1
"""Bump when what a tuned value means changes (a new reranker feature, a new fusion): old files are ignored."""

INDEX_NEUTRAL_FIELDS = frozenset(
    {
        *TUNABLE_FIELDS,
        "data_dir",
        "weaviate_url",
        "weaviate_grpc_port",
        "weaviate_api_key",
        "article_store_url",
        "embed_batch_size",
        "embed_threads",
        "model_cache_dir",
        "rerank_top_n",
        "top_k",
        "article_score_threshold",
        "cohere_api_key",
        "flash",
        "llm",
        "fallback_llm",
        "local_llm_threads",
        "budget_trigger_pct",
        "budget_target_pct",
        "budget_min_article_tokens",
        "budget_relevance_floor",
        "budget_safety_margin_pct",
        "memory_trigger_pct",
        "compressor",
        "max_tool_rounds",
        "plan_searches",
    }
)
"""Settings that leave the index and the ranking of configurations alone. Every other field (including
ones added later) counts as shaping the index: changing it invalidates a stored tuning."""


@dataclass
class TuningResult:
    """What ``tune`` chose and why: the values, every candidate's scores, and the index it is valid for."""

    settings: dict[str, Any]
    """The chosen values of the tunable fields."""
    picked: str
    untuned: str
    method: str
    queries: int
    candidates: list[dict[str, Any]]
    """``{"config": label, "settings": {...}, "ndcg@10": ..., "recall@10": ..., "mrr@10": ...}`` each."""
    fingerprint: str
    seconds: float = 0.0
    load_average: float | None = None
    """The machine's 1-minute load average when tuning ended (for reading ``seconds``)."""
    created_at: float = field(default_factory=time.time)
    format: int = TUNING_FORMAT

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuningResult:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def tuning_path(settings: Settings) -> Path:
    """Where the tuned configuration of this collection (and tenant) lives."""
    name = "tuning"
    if settings.collection != "Articles":
        name += f".{settings.collection}"
    if settings.tenant:
        name += "." + re.sub(r"[^\w.-]", "_", settings.tenant)
    return settings.data_dir / f"{name}.json"


def index_fingerprint(settings: Settings, article_store: Any) -> str:
    """Hash of the index-shaping settings and the article ledger (see the module docstring)."""
    index = {k: v for k, v in settings.model_dump(mode="json").items() if k not in INDEX_NEUTRAL_FIELDS}
    payload = {"format": TUNING_FORMAT, "index": index, "ledger": article_store.ledger_digest()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save_tuning(result: TuningResult, path: Path) -> Path:
    """Write ``result`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(result.as_dict(), indent=1, ensure_ascii=False), encoding="utf-8")
    tmp.replace(path)
    return path


def load_tuning(settings: Settings, article_store: Any) -> TuningResult | None:
    """The stored tuning if it was made on this very index, else None (and a log line saying why)."""
    path = tuning_path(settings)
    if not path.is_file():
        return None
    try:
        result = TuningResult.from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as exc:
        logger.warning("ignoring %s: unreadable (%s); run `ragidx tune` again", path, exc)
        return None
    if result.format != TUNING_FORMAT:
        logger.warning("ignoring %s: written by another version; run `ragidx tune` again", path)
        return None
    if result.fingerprint != index_fingerprint(settings, article_store):
        logger.warning(
            "ignoring %s: the index changed since it was tuned (ingest or index settings); run `ragidx tune` again",
            path,
        )
        return None
    return result


_TunedValues: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "TunedValues",
    __config__=ConfigDict(extra="ignore"),
    **{name: (Settings.model_fields[name].annotation, Settings.model_fields[name]) for name in TUNABLE_FIELDS},
)


def apply_tuning(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """``settings`` with the tuned ``values`` for every tunable field it does not set explicitly.

    Values are validated as the settings' own fields; an invalid file is ignored with a warning.
    """
    explicit = settings.explicit_fields()
    wanted = {k: v for k, v in values.items() if k in TUNABLE_FIELDS and k not in explicit}
    if not wanted:
        return settings
    defaults = {k: getattr(settings, k) for k in TUNABLE_FIELDS}
    try:
        checked = _TunedValues(**{**defaults, **wanted})
    except ValidationError as exc:
        logger.warning("ignoring the tuned settings: %s", exc)
        return settings
    return settings.model_copy(update={k: getattr(checked, k) for k in wanted})
