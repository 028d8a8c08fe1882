"""Prometheus metrics of the flash reranker, on a registry the caller owns.

Metrics never go to prometheus_client's global registry: each ``FlashMetrics`` gets the registry it is
given, or a private ``CollectorRegistry``, so tests and several rerankers don't clash. Serve it with
``prometheus_client.start_http_server(port, registry=metrics.registry)`` or merge it in your app.

Example:
    >>> from prometheus_client import CollectorRegistry
    >>> m = FlashMetrics(CollectorRegistry())
    >>> m.registry.get_sample_value("ragidx_flash_rerank_tool_calls_total")
    0.0
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ragidx.retrieval.flash.result import FlashResult

__all__ = ["FlashMetrics"]

_COUNT_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 30, 50, 75, 100)
_DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 30)


class FlashMetrics:
    """Duration, tool calls, candidates in/out, tokens, cost, fallbacks, invented ids, JSON repairs.

    Example:
        >>> m = FlashMetrics()  # private registry
        >>> m.fallbacks.labels(reason="timeout", source="upstream").inc()
    """

    def __init__(self, registry: CollectorRegistry | None = None, namespace: str = "ragidx") -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        try:
            self._create(namespace)
        except ValueError as exc:  # prometheus_client: "Duplicated timeseries in CollectorRegistry"
            raise ValueError(
                f"{exc}: this registry already holds flash metrics; share one FlashMetrics between "
                "rerankers (FlashReranker(llm, metrics=...)) or pass another namespace"
            ) from exc

    def _create(self, ns: str) -> None:
        self.duration = Histogram(
            "flash_rerank_duration_seconds",
            "Wall time of one flash rerank, all turns together.",
            namespace=ns,
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "flash_rerank_tool_calls",
            "get_topics_content calls executed for the model.",
            namespace=ns,
            registry=self.registry,
        )
        self.candidates_in = Histogram(
            "flash_rerank_candidates_input",
            "Candidates shown to the model per rerank.",
            namespace=ns,
            buckets=_COUNT_BUCKETS,
            registry=self.registry,
        )
        self.candidates_out = Histogram(
            "flash_rerank_candidates_output",
            "Candidates returned per rerank.",
            namespace=ns,
            buckets=_COUNT_BUCKETS,
            registry=self.registry,
        )
        self.tokens = Counter(
            "flash_rerank_tokens",
            "LLM tokens billed, by kind (input/output).",
            ["kind"],
            namespace=ns,
            registry=self.registry,
        )
        self.cost = Counter(
            "flash_rerank_cost_usd",
            "Estimated cost in USD (tokens x configured prices per 1M tokens).",
            namespace=ns,
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "flash_rerank_fallback",
            "Reranks that did not end in an accepted answer, by reason and by the list used instead.",
            ["reason", "source"],
            namespace=ns,
            registry=self.registry,
        )
        self.invented_ids = Counter(
            "flash_rerank_invented_ids",
            "Ids the model named that were not among the candidates (dropped).",
            namespace=ns,
            registry=self.registry,
        )
        self.json_repairs = Counter(
            "flash_rerank_json_repairs",
            "Repairs needed to parse the model's final answer, by kind.",
            ["repair"],
            namespace=ns,
            registry=self.registry,
        )

    def observe(self, result: FlashResult) -> None:
        """Record one finished rerank."""
        self.duration.observe(result.duration_s)
        self.tool_calls.inc(result.tool_calls)
        self.candidates_in.observe(result.candidates_shown)
        self.candidates_out.observe(len(result.selections))
        self.tokens.labels(kind="input").inc(result.input_tokens)
        self.tokens.labels(kind="output").inc(result.output_tokens)
        self.cost.inc(result.cost_usd)
        if result.is_fallback:
            self.fallbacks.labels(reason=result.decision.value, source=result.source.value).inc()
        self.invented_ids.inc(result.invented_count)
        for repair in result.repairs:
            self.json_repairs.labels(repair=repair.value).inc()
