"""One engine process that ingests a file into a PostgreSQL deployment (chunks and articles), for the tests that run
several at once or kill one: ``python -m tests.stores.ingest_process URL DATA_DIR FILE [SECONDS_PER_CHUNK]``.

Embeds with the tests' hash embedding (``SECONDS_PER_CHUNK`` slows it, so a test can kill it mid-ingest) and
prints the ingest report's ``new`` count."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from llama_index.core.base.embeddings.base import Embedding

from ragidx.config import Settings
from tests.dashboard.fakes import ScriptedProvider
from tests.fakes.hash_embedding import HashEmbedding


class SlowHashEmbedding(HashEmbedding):
    """The hash embedding, ``pause`` seconds per text: an ingest long enough to be killed half-way."""

    pause: float = 0.0

    def _get_text_embedding(self, text: str) -> Embedding:
        time.sleep(self.pause)
        return super()._get_text_embedding(text)


def main(url: str, data_dir: str, path: str, pause: float = 0.0) -> int:
    from ragidx.engine import Engine

    settings = Settings(data_dir=Path(data_dir), store="postgres", article_store_url=url)
    embed = SlowHashEmbedding(dim=256, reads=frozenset({"en"}), pause=pause)
    with Engine(settings, embed_model=embed, llm_provider=ScriptedProvider()) as engine:  # type: ignore[arg-type]
        print(engine.ingest(path).new, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:4], *(float(a) for a in sys.argv[4:5])))
