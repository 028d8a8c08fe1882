"""LlamaIndex's ``PGVectorStore`` and ragidx's PostgreSQL store, each measured against LanceDB's ranking. One JSON line.

    pip install llama-index-vector-stores-postgres   # LlamaIndex's store: not a dependency of ragidx
    python benchmarks/pgvector_peer.py [--chunks 3000] [--queries 100] [--k 10]

The question it answers: could ``store = "postgres"`` be LlamaIndex's ``PGVectorStore``
(``llama-index-vector-stores-postgres``) instead of ragidx's own ``PostgresChunkStore``? The condition is that an
index answers the same on PostgreSQL as on LanceDB (``ragidx migrate`` moves it between them). The chunks and
queries are ``benchmarks/store_scale.py``'s real sample (windows of LibreOffice and Docker articles, MiniLM
vectors, cached in its work folder); the same chunks and vectors go into the three stores, and each query runs
in hybrid mode (alpha 0.5, top ``--k``). Figures per store: the share of queries whose top k is LanceDB's in the
same order, the mean overlap of the top k with LanceDB's, and the query p50. ``PGVectorStore`` runs with
``hybrid_search=True`` and the ``english`` text-search configuration (its default); it logs that it ignores alpha.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core.schema import TextNode  # noqa: E402
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode  # noqa: E402

from benchmarks.store_scale import embed_sample, nodes_of, real_sample, synthetic  # noqa: E402
from ragidx.stores.lancedb_store import LanceDBChunkStore  # noqa: E402
from ragidx.stores.postgres_store import PostgresChunkStore  # noqa: E402
from tests.postgres_server import PostgresServer  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunks", type=int, default=3000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/ragidx-store-scale"))
    args = p.parse_args()
    args.work_dir.mkdir(parents=True, exist_ok=True)
    sample, titles = real_sample(args.chunks, 0)
    import random

    queries = random.Random(1).sample(titles, args.queries + 3)
    real_vectors, query_vectors = embed_sample(args.work_dir, sample, queries)
    records, vectors = synthetic(len(sample), sample, real_vectors, 0)
    nodes = nodes_of(records, vectors, 0, len(records))

    server = PostgresServer.start()
    try:
        url = server.create_database("peer")
        server.execute("CREATE EXTENSION vector", "peer")
        lance = LanceDBChunkStore(uri=tempfile.mkdtemp(prefix="peer-lance-"))
        ours = PostgresChunkStore(url=url)
        from llama_index.vector_stores.postgres import PGVectorStore

        theirs = PGVectorStore.from_params(
            host="127.0.0.1",
            port=str(server.port),
            database="peer",
            user="postgres",
            password="",
            table_name="peer",
            embed_dim=vectors.shape[1],
            hybrid_search=True,
            text_search_config="english",
        )
        for store in (lance, ours):
            store.add(nodes)
            store.finalize()
        theirs.add([TextNode(id_=n.node_id, text=n.text, metadata=n.metadata, embedding=n.embedding) for n in nodes])

        results: dict[str, dict[str, Any]] = {}
        reference: list[list[str]] = []
        for name, store in (("lancedb", lance), ("ragidx_postgres", ours), ("llamaindex_pgvectorstore", theirs)):
            found, took = [], []
            for text, vector in zip(queries[3:], query_vectors[3:], strict=True):
                q = VectorStoreQuery(
                    query_str=text,
                    query_embedding=vector.tolist(),
                    similarity_top_k=args.k,
                    sparse_top_k=args.k,
                    mode=VectorStoreQueryMode.HYBRID,
                    alpha=0.5,
                )
                started = time.perf_counter()
                result = store.query(q)
                took.append((time.perf_counter() - started) * 1000)
                found.append([n.node_id for n in result.nodes][: args.k])
            if name == "lancedb":
                reference = found
            pairs = list(zip(found, reference, strict=True))
            results[name] = {
                "same_order_share": round(sum(a == b for a, b in pairs) / len(pairs), 3),
                "overlap_at_k": round(statistics.mean(len(set(a) & set(b)) / max(1, len(b)) for a, b in pairs), 3),
                "p50_ms": round(statistics.median(took), 1),
            }
        print(
            json.dumps(
                {
                    "chunks": len(nodes),
                    "queries": args.queries,
                    "k": args.k,
                    "stores": results,
                    "load_avg": [round(x, 2) for x in os.getloadavg()],
                }
            )
        )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
