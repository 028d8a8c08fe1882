"""``ragidx reindex`` of a PostgreSQL deployment in a process of its own, for the test that kills it (SIGKILL)
half-way: ``python -m tests.reindex_process URL DATA_DIR SECONDS_PER_TEXT``.

Re-embeds with :class:`NewHash` (the tests' hash embedding, 96 wide, recorded as ``hash-96``), slowed by
``SECONDS_PER_TEXT`` so the test can kill it mid-run, two articles per write."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from llama_index.core.base.embeddings.base import Embedding

from ragidx.config import Settings
from tests.fakes.hash_embedding import HashEmbedding


class NewHash(HashEmbedding):
    """The hash embedding as another model: 96 wide, named ``hash-96``; ``pause`` seconds per text."""

    pause: float = 0.0

    def __init__(self, pause: float = 0.0) -> None:
        super().__init__(dim=96, reads=frozenset({"en"}))
        self.model_name = "hash-96"
        self.pause = pause

    def _get_text_embedding(self, text: str) -> Embedding:
        time.sleep(self.pause)
        return super()._get_text_embedding(text)


def main(url: str, data_dir: str, pause: float) -> int:
    from ragidx.reindex import reindex

    settings = Settings(data_dir=Path(data_dir), store="postgres", article_store_url=url)
    print(reindex(settings, embed_model=NewHash(pause), batch_articles=2).as_dict(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
