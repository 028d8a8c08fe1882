"""Metrics land on the registry passed in, with the values of the runs."""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from ragidx.retrieval.flash import FlashMetrics
from tests.fakes.scripted_llm import ScriptedLLM
from tests.retrieval.flash.helpers import UsageScriptedLLM, article_nodes, make_reranker, tool_call


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels or None)


def test_metrics_after_an_accepted_run_and_a_fallback() -> None:
    registry = CollectorRegistry()
    llm = UsageScriptedLLM(
        [
            tool_call(1, 2, 77),
            '```json\n{"topics": [{"id": 2, "reason": "r"}, {"id": 1, "reason": "s"}]}\n```',
            "no json here",
        ],
        usage={"prompt_tokens": 1_000_000, "completion_tokens": 10_000},
    )
    flash = make_reranker(llm, registry=registry, input_price_per_million=0.3, output_price_per_million=2.5)

    flash.rerank_detailed("q", article_nodes(10))
    flash.rerank_detailed("q", article_nodes(10))

    assert _value(registry, "ragidx_flash_rerank_tool_calls_total") == 1
    assert _value(registry, "ragidx_flash_rerank_duration_seconds_count") == 2
    assert _value(registry, "ragidx_flash_rerank_candidates_input_sum") == 20
    assert _value(registry, "ragidx_flash_rerank_candidates_output_sum") == 2 + 5
    assert _value(registry, "ragidx_flash_rerank_invented_ids_total") == 1
    assert _value(registry, "ragidx_flash_rerank_tokens_total", kind="input") == 3_000_000
    assert _value(registry, "ragidx_flash_rerank_cost_usd_total") == pytest.approx(3 * (0.3 + 0.025))
    assert _value(registry, "ragidx_flash_rerank_fallback_total", reason="invalid_json", source="upstream") == 1
    assert _value(registry, "ragidx_flash_rerank_json_repairs_total", repair="markdown_fence") == 1


def test_a_protocol_violation_is_counted_as_a_fallback_with_its_reason() -> None:
    registry = CollectorRegistry()
    skipped_the_tool = ScriptedLLM([json.dumps({"topics": [{"id": 2, "reason": "r"}]})])
    flash = make_reranker(skipped_the_tool, registry=registry, tool_mode="forced")
    flash.rerank_detailed("q", article_nodes(4))
    assert _value(registry, "ragidx_flash_rerank_fallback_total", reason="protocol_violation", source="upstream") == 1


def test_accepted_runs_count_no_fallback() -> None:
    registry = CollectorRegistry()
    make_reranker(ScriptedLLM([json.dumps({"topics": []})]), registry=registry).rerank_detailed("q", article_nodes(3))
    assert _value(registry, "ragidx_flash_rerank_duration_seconds_count") == 1
    fallbacks = [s for m in registry.collect() for s in m.samples if "fallback_total" in s.name]
    assert fallbacks == []


def test_instances_use_private_registries_never_the_global_one() -> None:
    a = make_reranker(ScriptedLLM([json.dumps({"topics": []})]))
    b = make_reranker(ScriptedLLM([]))
    a.rerank_detailed("q", article_nodes(2))

    assert a.metrics.registry is not b.metrics.registry
    assert a.metrics.registry is not REGISTRY
    assert _value(a.metrics.registry, "ragidx_flash_rerank_duration_seconds_count") == 1
    assert _value(b.metrics.registry, "ragidx_flash_rerank_duration_seconds_count") == 0
    assert REGISTRY.get_sample_value("ragidx_flash_rerank_duration_seconds_count") is None


def test_rerankers_share_metrics_through_one_flash_metrics() -> None:
    registry = CollectorRegistry()
    shared = FlashMetrics(registry)
    for _ in range(2):
        llm = ScriptedLLM([json.dumps({"topics": []})])
        make_reranker(llm, metrics=shared).rerank_detailed("q", article_nodes(2))

    assert _value(registry, "ragidx_flash_rerank_duration_seconds_count") == 2


def test_a_second_metric_set_on_one_registry_says_how_to_share() -> None:
    registry = CollectorRegistry()
    FlashMetrics(registry)
    with pytest.raises(ValueError, match="share one FlashMetrics"):
        FlashMetrics(registry)
    assert FlashMetrics(registry, namespace="other").registry is registry
