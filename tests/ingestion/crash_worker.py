"""Ingests a generated corpus slowly, announcing each embedding call, so a test can SIGKILL it mid-run
or run several at once.

python -m tests.ingestion.crash_worker DATA_DIR N_ARTICLES [VERSION] [--articles URL] [--first K]
                                       [--tenant T] [--source NAME] [--wait-for FILE]

Chunks go to LanceDB in DATA_DIR; articles and the ledger to DATA_DIR/articles.sqlite, or to the
database at ``--articles``. Ingests articles ``a{K}..a{N-1}``. With ``--wait-for``, prints ``ready`` and
starts only once FILE exists (so several workers start at the same moment). Prints
``done CHUNKS NEW UNCHANGED``.
"""

from __future__ import annotations

import argparse
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


def corpus(n: int, version: int = 1, first: int = 0) -> list[Article]:
    """Articles of varying length (1-6 chunks each at chunk_tokens=40); version 2 changes every 3rd."""
    out = []
    for i in range(first, n):
        body = " ".join(f"Sentence {j} of article {i} talks about topic{i % 7} and item{j}." for j in range(4 + i % 20))
        if version == 2 and i % 3 == 0:
            body += " This paragraph was added in version two."
        out.append(Article(kb_id=f"a{i}", title=f"Article {i}", url=f"https://kb/{i}", content=body))
    return out


def make_ingestor(
    data_dir: Path,
    embed: HashEmbedding | None = None,
    *,
    articles: str | None = None,
    tenant: str | None = None,
) -> Ingestor:
    return Ingestor(
        LanceDBChunkStore(uri=data_dir / "lancedb", tenant=tenant),
        ArticleStore(articles or data_dir / "articles.sqlite", tenant=tenant),
        embed or HashEmbedding(dim=32),
        chunk_tokens=40,
        chunk_overlap=0,
        batch_articles=4,
        tenant=tenant,
    )


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("data_dir", type=Path)
    p.add_argument("n", type=int)
    p.add_argument("version", type=int, nargs="?", default=1)
    p.add_argument("--articles", default=None)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--tenant", default=None)
    p.add_argument("--source", default="gen")
    p.add_argument("--wait-for", type=Path, default=None)
    args = p.parse_args()
    ingestor = make_ingestor(args.data_dir, AnnouncingEmbedding(dim=32), articles=args.articles, tenant=args.tenant)
    ingestor.pipeline  # noqa: B018  (the tokenizer loads before the start line, not after)
    if args.wait_for is not None:
        print("ready", flush=True)
        while not args.wait_for.exists():
            time.sleep(0.01)
    report = ingestor.ingest(corpus(args.n, args.version, args.first), source=args.source)
    print("done", report.chunks_written, report.new, report.unchanged, flush=True)
