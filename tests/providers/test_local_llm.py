"""The packaged local model: assembled from PyPI parts, served on loopback, spoken to over OpenAI's protocol."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool

from ragidx.agent.guards.gates import check_log_odds, check_options
from ragidx.config import LLMEndpoint
from ragidx.providers.chat import usage
from ragidx.providers.llms import LLMProvider
from ragidx.providers.local_llm import (
    PACKAGED_MODELS,
    LocalLLMServer,
    LocalModelError,
    PackagedModel,
    _parent_death_hook,
    assemble_gguf,
    prune_server_logs,
    server_environment,
    spawn,
)


def test_unknown_model_and_missing_parts_are_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(LocalModelError, match="unknown local model 'gpt-9'"):
        assemble_gguf("gpt-9")
    monkeypatch.setitem(PACKAGED_MODELS, "ghost", PackagedModel("ghost", "ragidx_no_such_part", 2, "x"))
    with pytest.raises(LocalModelError, match=r"ragidx-no-such-part1 … ragidx-no-such-part2"):
        assemble_gguf("ghost")


def test_a_gguf_path_is_used_as_is(tmp_path: Path) -> None:
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF....")
    assert assemble_gguf(str(f)) == f


def test_old_server_logs_are_pruned_and_nothing_else_is_touched(tmp_path: Path) -> None:
    for i in range(25):
        log = tmp_path / f"server-{40000 + i}.log"
        log.write_text(f"run {i}")
        os.utime(log, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "qwen2.5-0.5b.gguf").write_bytes(b"GGUF")
    prune_server_logs(tmp_path, keep=20)
    left = sorted(p.name for p in tmp_path.glob("server-*.log"))
    assert left == [f"server-{40000 + i}.log" for i in range(5, 25)]  # the 20 newest
    assert (tmp_path / "qwen2.5-0.5b.gguf").is_file()


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_a_child_started_from_a_short_lived_thread_outlives_the_thread() -> None:
    """The dashboard's chat answers on a thread per question: the model server it starts must not die with it."""

    def start(how: Callable[..., subprocess.Popen[bytes]], into: list[subprocess.Popen[bytes]]) -> None:
        into.append(how(["sleep", "30"], preexec_fn=_parent_death_hook()))

    children: list[subprocess.Popen[bytes]] = []
    for how in (subprocess.Popen, spawn):
        thread = threading.Thread(target=start, args=(how, children))
        thread.start()
        thread.join()
    plain, spawned = children
    try:
        assert plain.wait(timeout=10) == -signal.SIGKILL  # what happened to the server before
        time.sleep(0.5)
        assert spawned.poll() is None
    finally:
        spawned.kill()
        spawned.wait()


def test_server_is_cheap_to_build_and_needs_start() -> None:
    server = LocalLLMServer("qwen2.5-0.5b")
    assert not server.running
    with pytest.raises(LocalModelError, match="call start"):
        _ = server.api_base


def test_server_command_skips_prompt_logits_and_keeps_threads_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = LocalLLMServer("qwen2.5-1.5b", n_ctx=4096, n_threads=3)
    server.port = 40123
    cmd = server.command(tmp_path / "m.gguf")
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert cmd[1:3] == ["-m", "ragidx.providers.llama_server"] and flags["--chat_format"] == "ragidx-chatml"
    assert flags["--logits_all"] == "False"  # the server's own default is True
    assert flags["--interrupt_requests"] == "False"  # its default cuts a streamed reply off for the next request
    assert flags["--n_ctx"] == "4096" and flags["--n_threads"] == flags["--n_threads_batch"] == "3"
    assert flags["--host"] == "127.0.0.1" and flags["--port"] == "40123"
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("RAGIDX_SOMETHING", "kept")
    env = server_environment()
    assert "OMP_WAIT_POLICY" not in env and env["RAGIDX_SOMETHING"] == "kept"
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"  # ours is left as it was


@pytest.mark.slow
def test_packaged_model_assembles_once(tmp_path: Path) -> None:
    first = assemble_gguf("qwen2.5-0.5b", tmp_path)
    assert first.read_bytes()[:4] == b"GGUF" and first.stat().st_size > 400_000_000
    mtime = first.stat().st_mtime_ns
    assert assemble_gguf("qwen2.5-0.5b", tmp_path).stat().st_mtime_ns == mtime  # reused, not rewritten


@pytest.mark.slow
def test_local_model_answers_and_makes_a_forced_tool_call() -> None:
    def retrieve_context(query: str) -> str:
        """Search the knowledge base for articles that answer the query."""
        return "{}"

    with LLMProvider(threads=2) as provider:
        llm = provider.get(LLMEndpoint(model="qwen2.5-0.5b", context_window=2048, max_output_tokens=32))
        reply = llm.complete("Reply with the single word: ready")
        assert reply.text.strip()
        response = llm.chat_with_tools(
            [FunctionTool.from_defaults(retrieve_context)],
            user_msg="How do I insert a table of contents?",
            tool_choice={"type": "function", "function": {"name": "retrieve_context"}},
        )
        [call] = llm.get_tool_calls_from_response(response)
        assert call.tool_name == "retrieve_context" and isinstance(call.tool_kwargs.get("query"), str)
        # The answer check's call (ragidx.agent.workflow): one token, YES or NO, moved by the margin.
        question = [ChatMessage(role="user", content="Is Paris in France? Reply with one word: YES or NO.")]
        odds = []
        for margin, expected in ((-50.0, "YES"), (50.0, "NO")):
            reply = llm.chat(question, **check_options(margin))
            assert reply.message.content == expected and (usage(reply) or {}).get("completion_tokens") == 1
            odds.append(check_log_odds(reply))  # reported although the server has no logits_all
        # the model's own log-odds, before the bias: the same under either margin; it does think Paris is in France
        assert odds[0] is not None and odds[0] > 0 and odds[1] == pytest.approx(odds[0], abs=1e-3)
        # Each question runs on its own event loop (Engine.ask): a second loop's call must not meet the first
        # loop's kept-alive connection.
        for _ in range(2):
            assert asyncio.run(llm.achat(question, **check_options(50.0))).message.content == "NO"
        server = next(iter(provider._servers.values()))
        assert server.running
    assert not server.running  # stopped when the provider closed


@pytest.mark.slow
def test_server_dies_with_its_parent_process(tmp_path: Path) -> None:
    import contextlib
    import os
    import signal
    import subprocess
    import sys
    import time

    script = (
        "from ragidx.providers.local_llm import LocalLLMServer\n"
        "s = LocalLLMServer('qwen2.5-0.5b', n_ctx=512, n_threads=1)\n"
        "s.start()\n"
        "print(s._proc.pid, flush=True)\n"
        "import time; time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    server_pid = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)  # no atexit, no cleanup: the kernel must stop the server
    parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(server_pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):  # reap it if it became our zombie
            os.waitpid(server_pid, os.WNOHANG)
        time.sleep(0.2)
    os.kill(server_pid, signal.SIGKILL)
    pytest.fail("the model server outlived its parent")
