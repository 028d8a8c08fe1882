"""Model speeds: the deadline's arithmetic, learning from real calls, the per-machine log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.providers.speed import AnswerDeadline, ModelSpeed, SpeedLog, machine_key, probe_speed
from ragidx.providers.tokenizer import TokenCounter
from tests.fakes.scripted_llm import ScriptedLLM, text_of


def test_the_cap_leaves_time_to_write_the_answer() -> None:
    speed = ModelSpeed(prefill_tps=30.0, decode_tps=5.0, answer_tokens=50.0)
    assert speed.prompt_tokens_within(40.0) == 900  # (40 - 50/5) * 30
    assert speed.prompt_tokens_within(5.0) == 0
    assert speed.seconds_for(900) == 40.0


def test_time_already_spent_in_the_turn_shrinks_the_cap_down_to_the_floor() -> None:
    deadline = AnswerDeadline(40.0, ModelSpeed(30.0, 5.0, answer_tokens=50.0), floor_tokens=300)
    assert deadline.prompt_cap(elapsed_s=0.0) == 900
    assert deadline.prompt_cap(elapsed_s=15.0) == 450
    assert deadline.prompt_cap(elapsed_s=39.0) == 300


def test_a_fast_model_is_held_to_the_ceiling_and_the_floor_still_wins_over_it() -> None:
    fast = ModelSpeed(150.0, 26.0, answer_tokens=52.0)  # a native build on 2 AVX-512 cores: 28 s -> 4,200 tokens
    assert AnswerDeadline(30.0, fast, floor_tokens=1024).prompt_cap(elapsed_s=0.0) == 4200
    held = AnswerDeadline(30.0, fast, floor_tokens=1024, ceiling_tokens=1536)
    assert held.prompt_cap(elapsed_s=0.0) == 1536
    assert held.prompt_cap(elapsed_s=25.0) == 1024  # late in the turn the deadline is tighter than the ceiling
    assert AnswerDeadline(30.0, fast, floor_tokens=1024, ceiling_tokens=512).prompt_cap(elapsed_s=0.0) == 1024


def test_real_calls_move_the_rates_and_a_prompt_cache_hit_is_ignored() -> None:
    speed = ModelSpeed(prefill_tps=30.0, decode_tps=4.0, answer_tokens=40.0)
    slower = speed.observed(prompt_tokens=1000, ttft_s=50.0, completion_tokens=61, total_s=70.0)
    assert slower.prefill_tps < 30.0 and slower.decode_tps == 3.7 and slower.samples == 1
    # 1,000 tokens "read" in 1 s: the server reused a cached prefix; the prefill rate must not jump
    cached = speed.observed(prompt_tokens=1000, ttft_s=1.0, completion_tokens=41, total_s=11.0)
    assert cached.prefill_tps == 30.0 and cached.decode_tps == 4.0


def test_an_estimate_that_cache_hits_pushed_up_comes_down_with_real_readings() -> None:
    # a speeds.json that answers after the check (cache hits under 3x the estimate) had pushed up step by step
    inflated = ModelSpeed(prefill_tps=706.0, decode_tps=20.0, answer_tokens=20.0, samples=830)
    real = inflated.observed(prompt_tokens=700, ttft_s=5.0, completion_tokens=0, total_s=5.0)
    assert real.prefill_tps == pytest.approx(0.7 * 706.0 + 0.3 * 140.0) and real.decode_tps == 20.0
    assert real.answer_tokens == 20.0  # no answer was written
    for _ in range(10):
        real = real.observed(prompt_tokens=700, ttft_s=5.0, completion_tokens=0, total_s=5.0)
    assert real.prefill_tps < 160.0
    # a call whose prompt an earlier one read reports no reading: only its writing counts
    after_check = real.observed(prompt_tokens=0, ttft_s=0.9, completion_tokens=41, total_s=4.9)
    assert after_check.prefill_tps == real.prefill_tps and after_check.decode_tps < real.decode_tps


def test_an_answer_that_arrives_in_one_burst_does_not_make_writing_look_instant() -> None:
    speed = ModelSpeed(prefill_tps=150.0, decode_tps=20.0, answer_tokens=50.0)
    # 49 tokens "written" in 0.2 ms: the server held the text back and sent it at once
    burst = speed.observed(prompt_tokens=700, ttft_s=5.0, completion_tokens=50, total_s=5.0002)
    assert burst.decode_tps == 20.0 and burst.prefill_tps != 150.0 and burst.samples == 1
    # a rate stored from such a burst before this check (seen in a real speeds.json: 1.7 million tokens/s)
    # is replaced by the first plausible sample, not averaged with it
    broken = ModelSpeed(prefill_tps=150.0, decode_tps=1_758_740.0, answer_tokens=50.0)
    healed = broken.observed(prompt_tokens=700, ttft_s=5.0, completion_tokens=41, total_s=7.0)
    assert healed.decode_tps == 20.0
    assert healed.prompt_tokens_within(30.0) < broken.prompt_tokens_within(30.0)


def test_the_log_keeps_speeds_per_key_and_survives_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "speeds.json"
    log = SpeedLog(path)
    assert log.get("x") is None
    log.put("a", ModelSpeed(30.0, 4.0))
    log.put("b", ModelSpeed(60.0, 8.0, samples=3))
    assert SpeedLog(path).get("a") == ModelSpeed(30.0, 4.0) and SpeedLog(path).get("b").samples == 3  # type: ignore[union-attr]
    path.write_text("{not json")
    assert log.get("a") is None
    log.put("a", ModelSpeed(31.0, 4.0))
    assert json.loads(path.read_text())["a"]["prefill_tps"] == 31.0


def test_a_deadline_saves_what_it_learned(tmp_path: Path) -> None:
    log = SpeedLog(tmp_path / "speeds.json")
    deadline = AnswerDeadline(60.0, ModelSpeed(30.0, 4.0), log=log, key="k")
    deadline.observe(prompt_tokens=900, ttft_s=30.0, completion_tokens=41, total_s=40.0)
    assert log.get("k") == deadline.speed and deadline.speed.samples == 1


def test_the_machine_key_names_model_threads_and_cpu() -> None:
    key = machine_key("/models/qwen2.5-1.5b.gguf", 2)
    assert key.startswith("qwen2.5-1.5b.gguf|threads=2|") and "llama_cpp" in key


def test_the_probe_times_one_streamed_call_on_a_fresh_prompt() -> None:
    llm = ScriptedLLM(["The knowledge base describes configuration parameters."], cycle=True)
    count = TokenCounter("cl100k_base").count
    first, second = probe_speed(llm, count), probe_speed(llm, count)
    assert first.prefill_tps > 0 and first.decode_tps > 0 and first.samples == 1
    prompts = [text_of(c.messages[0]) for c in llm.calls]
    assert prompts[0] != prompts[1] and count(prompts[0]) >= 300  # a new nonce: no cached prefix
    assert llm.calls[0].kwargs.get("max_tokens") == 24 and second.samples == 1


def test_the_provider_probes_once_per_machine_and_leaves_endpoints_uncapped(tmp_path: Path) -> None:
    from ragidx.config import LLMEndpoint
    from ragidx.providers.llms import LLMProvider

    provider = LLMProvider(model_cache_dir=tmp_path)
    endpoint = LLMEndpoint(model="m", api_base="http://127.0.0.1:9/v1")
    llm = ScriptedLLM(["ok"], cycle=True)
    counter = TokenCounter("cl100k_base")
    assert provider.answer_deadline(endpoint, llm, counter) is None and not llm.calls  # endpoints: the window rules
    timed = endpoint.model_copy(update={"answer_deadline_s": 45.0})
    deadline = provider.answer_deadline(timed, llm, counter)
    assert deadline is not None and deadline.deadline_s == 45.0 and len(llm.calls) == 1
    assert (deadline.floor_tokens, deadline.ceiling_tokens) == (timed.min_prompt_tokens, timed.max_answer_prompt_tokens)
    again = LLMProvider(model_cache_dir=tmp_path).answer_deadline(timed, llm, counter)
    assert again is not None and again.speed == deadline.speed and len(llm.calls) == 1  # read from the log
    assert (tmp_path / "speeds.json").is_file()
