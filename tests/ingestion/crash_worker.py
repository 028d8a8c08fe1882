"""Ingests a generated corpus slowly, announcing each embedding call, so a test can SIGKILL it mid-run.

python -m tests.ingestion.crash_worker DATA_DIR N_ARTICLES [VERSION]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ingestion.pipeline import Ingestor
from ragidx.article import Article
from ragidx.stores.article_store import ArticleStore
from ragidx.stores.lancedb_store import LanceDBChunkStore
from tests.fakes.hash_embedding import HashEmbedding


class AnnouncingEmbedding(HashEmbedding):
    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        print(f"embedding {len(texts)}", flush=True)
        time.sleep(0.05)
        return [self._get_text_embedding(t) for t in texts]


def corpus(n: int, version: int = 1) -> list[Article]:
    """Articles of varying length (1-6 chunks each at chunk_tokens=40); version 2 changes every 3rd."""
    out = []
    for i in range(n):
        body = " ".join(
            f"Sentence {j} of article {i} talks about topic{i % 7} and item{j}." for j in range(4 + i % 20)
        )
        if version == 2 and i % 3 == 0:
            body += " This paragraph was added in version two."
        out.append(Article(kb_id=f"a{i}", title=f"Article {i}", url=f"https://kb/{i}", content=body))
    return out


def make_ingestor(data_dir: Path, embed: HashEmbedding | None = None) -> Ingestor:
    return Ingestor(
        LanceDBChunkStore(uri=data_dir / "lancedb"),
        ArticleStore(data_dir / "articles.sqlite"),
        embed or HashEmbedding(dim=32),
        chunk_tokens=40,
        chunk_overlap=0,
        batch_articles=4,
    )


if __name__ == "__main__":
    data_dir, n = Path(sys.argv[1]), int(sys.argv[2])
    version = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    report = make_ingestor(data_dir, AnnouncingEmbedding(dim=32)).ingest(corpus(n, version), source="gen")
    print("done", report.chunks_written, flush=True)
