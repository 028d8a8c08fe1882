"""``ragidx serve`` end to end: a real uvicorn server on loopback over a real engine (LanceDB, article store,
retriever, agent, budget; hash embeddings and a scripted chat model), asked by the ``openai`` package and httpx."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest

from ragidx.config import QueueSettings, ServerSettings, Settings
from ragidx.engine import Engine
from ragidx.server import create_app
from tests.dashboard.fakes import ScriptedProvider, make_engine
from tests.server.helpers import SlowWriter, running

QUESTION = "How do I create a table of contents?"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Iterator[Engine]:
    with make_engine(Settings(data_dir=tmp_path_factory.mktemp("serve"))) as eng:
        assert eng.ingest(writer_kb_file).new == 26
        yield eng


@pytest.fixture(scope="module")
def base_url(engine: Engine) -> Iterator[str]:
    with running(create_app(engine)) as url:
        yield url


@pytest.fixture()
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=0)


def sibling(engine: Engine, **settings: object) -> Engine:
    """Another engine over the same index, with some settings changed."""
    return make_engine(engine.settings.model_copy(update=settings))


def test_the_openai_client_gets_an_answer_with_citations_and_sources(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])

    content = completion.choices[0].message.content or ""
    extra = (completion.model_extra or {})["ragidx"]
    assert completion.choices[0].finish_reason == "stop" and "[1]" in content
    assert not extra["not_found"] and extra["reason"] is None and extra["queries"][0] == QUESTION
    cited = extra["citations"]
    assert [c["number"] for c in cited] == [1, 2] and all(c["kb_id"] and c["title"] for c in cited)
    # the closing block names them, for clients that ignore the extra field
    body, _, block = content.partition("\n\nSources:\n")
    assert body == extra["text"] and block.splitlines() == [f"[{c['number']}] {c['title']} — {c['url']}" for c in cited]
    ranks = [s["article_rank"] for s in extra["sources"]]
    assert ranks == list(range(len(ranks))) and {c["kb_id"] for c in cited} <= {s["kb_id"] for s in extra["sources"]}
    assert completion.usage is not None and completion.usage.prompt_tokens > 0


def test_the_openai_client_streams_the_answer_then_its_sources(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="ragidx", messages=[{"role": "user", "content": QUESTION}], stream=True
    )
    chunks = list(stream)

    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    last = chunks[-1]
    extra = (last.model_extra or {})["ragidx"]
    assert last.choices[0].finish_reason == "stop" and chunks[0].choices[0].delta.role == "assistant"
    assert text.startswith(extra["text"]) and "\n\nSources:\n[1] " in text
    assert [c["number"] for c in extra["citations"]] == [1, 2]


def test_the_conversation_is_the_session(engine: Engine, client: openai.OpenAI) -> None:
    provider = engine.llm_provider
    assert isinstance(provider, ScriptedProvider)
    first = client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
    before = len(engine.memory._sessions)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And how do I update it?"},
    ]
    follow_up = client.chat.completions.create(model="ragidx", messages=messages)  # type: ignore[arg-type]

    extra = (follow_up.model_extra or {})["ragidx"]
    # a follow-up is searched with the question before it (forced mode reads the conversation's questions)
    assert QUESTION.rstrip("?") in extra["queries"][0] and "update it" in extra["queries"][0]
    assert len(engine.memory._sessions) == before  # the throwaway session holding the history is gone


def test_models_search_health_and_metrics(base_url: str, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["ragidx"]

    found = httpx.post(f"{base_url}/v1/search", json={"query": "table of contents", "top_k": 3}).json()
    assert [a["article_rank"] for a in found["data"]] == [0, 1, 2]
    assert found["data"][0]["normalized_rank"] == 0.0 and found["data"][-1]["normalized_rank"] == 1.0
    assert "Table of Contents" in found["data"][0]["title"] and found["data"][0]["content"]

    health = httpx.get(f"{base_url}/health").json()
    assert health["status"] == "ok" and health["queue"]["busy"] == 0 and health["queue"]["slots"] == 1

    client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
    metrics = httpx.get(f"{base_url}/metrics").text
    assert 'ragidx_answers_total{outcome="answered"}' in metrics and "ragidx_queue_wait_seconds_bucket" in metrics
    assert 'ragidx_http_requests_total{route="/v1/chat/completions",status="200"}' in metrics


@pytest.mark.parametrize(
    ("body", "status", "wanted"),
    [
        (b'{"messages": [', 400, "not valid JSON"),
        (b"[]", 400, "JSON object"),
        (b'{"messages": []}', 400, "non-empty list"),
        (b'{"messages": [{"role": "assistant", "content": "hi"}]}', 400, "last message"),
        (b'{"messages": [{"role": "user", "content": "   "}]}', 400, "empty"),
        (b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}', 400, "only text"),
        (b'{"messages": [{"role": "user", "content": "' + b"x" * 1_200_000 + b'"}]}', 413, "larger than"),
    ],
)
def test_bad_requests_get_clear_openai_errors(base_url: str, body: bytes, status: int, wanted: str) -> None:
    response = httpx.post(f"{base_url}/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status
    error = response.json()["error"]
    assert wanted in error["message"] and error["type"] == "invalid_request_error"


def test_a_chunked_body_over_the_limit_is_refused_too(base_url: str) -> None:
    def parts() -> Iterator[bytes]:  # no content-length: the limit is counted as the body arrives
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 100_000
        yield b'"}]}'

    response = httpx.post(f"{base_url}/v1/chat/completions", content=parts())
    assert response.status_code == 413 and "larger than" in response.json()["error"]["message"]


def test_a_full_queue_answers_429_with_retry_after_at_once(engine: Engine) -> None:
    busy = sibling(engine, queue=QueueSettings(max_waiting=0))
    with running(create_app(busy)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
        with busy.model_queue.slot():  # another question holds the model
            t0 = time.monotonic()
            with pytest.raises(openai.RateLimitError) as caught:
                client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
            assert time.monotonic() - t0 < 5  # refused at once, not after a wait
            streamed = httpx.post(
                f"{url}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": QUESTION}], "stream": True},
            )
        assert streamed.status_code == 429 and int(streamed.headers["retry-after"]) >= 1
        response = caught.value.response
        assert int(response.headers["retry-after"]) >= 1 and "busy" in response.json()["error"]["message"]
        # and once the model is free the same question is answered
        assert client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
    busy.close()


def test_a_dead_model_endpoint_is_a_502(engine: Engine, tmp_path: Path) -> None:
    from ragidx.config import LLMEndpoint
    from tests.fakes.hash_embedding import HashEmbedding

    dead = LLMEndpoint(model="m", api_base="http://127.0.0.1:9/v1", max_retries=0)
    down = Engine(
        engine.settings.model_copy(update={"llm": dead}),
        embed_model=HashEmbedding(dim=256, reads=frozenset({"en"})),
    )
    with running(create_app(down)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": QUESTION}]})
        assert response.status_code == 502
        assert "failed" in response.json()["error"]["message"] and response.json()["error"]["code"] == "upstream_error"
        assert httpx.get(f"{url}/health").json()["queue"]["busy"] == 0  # nothing stuck
    down.close()


def test_api_keys_are_required_when_configured(engine: Engine) -> None:
    keyed = sibling(engine, serve=ServerSettings(api_keys=["k-1", "k-2"]))
    with running(create_app(keyed)) as url:
        question = [{"role": "user", "content": QUESTION}]
        for key in (None, "wrong"):
            headers = {"authorization": f"Bearer {key}"} if key else {}
            response = httpx.post(f"{url}/v1/chat/completions", json={"messages": question}, headers=headers)
            assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{url}/v1", api_key="wrong", max_retries=0).models.list()
        assert httpx.get(f"{url}/health").status_code == 200  # a probe needs no key
        good = openai.OpenAI(base_url=f"{url}/v1", api_key="k-2", max_retries=0)
        assert good.chat.completions.create(model="ragidx", messages=question).choices[0].message.content  # type: ignore[arg-type]
    keyed.close()


def test_without_keys_only_loopback_clients_are_answered(engine: Engine) -> None:
    from ragidx.server import check_bind

    app = create_app(engine)

    async def get(client_host: str) -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=(client_host, 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://ragidx") as http:
            return await http.get("/v1/models")

    assert asyncio.run(get("10.1.2.3")).status_code == 403
    assert asyncio.run(get("127.0.0.1")).status_code == 200
    with pytest.raises(ValueError, match="no API key"):
        check_bind("0.0.0.0", has_keys=False)


def test_a_client_that_goes_away_mid_stream_stops_the_model_and_frees_its_place(engine: Engine) -> None:
    slow = SlowWriter(words=60, pause_s=0.1)

    class SlowProvider(ScriptedProvider):
        def get(self, endpoint: object) -> SlowWriter:  # type: ignore[override]
            return slow

    # the "off" profile streams the model's words as written (a profile whose guards judge the whole reply holds
    # it until the model is done, and a client would see nothing to hang up after)
    settings = engine.settings.model_copy(update={"llm": engine.settings.llm.model_copy(update={"guards": "off"})})
    quick = Engine(settings, embed_model=engine.embed_model, llm_provider=SlowProvider())  # type: ignore[arg-type]
    with running(create_app(quick)) as url:
        body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
            assert response.status_code == 200
            for line in response.iter_lines():  # read until the model has written a few words, then hang up
                if line.startswith("data: {") and "word2" in json.loads(line[6:])["choices"][0]["delta"].get(
                    "content", ""
                ):
                    break
        deadline = time.monotonic() + 10
        while quick.model_queue.stats().busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert quick.model_queue.stats().busy == 0  # the place is free again
        written = slow.written
        time.sleep(0.5)
        assert slow.written == written < slow.words  # and the model stopped writing
        # the next question is answered whole
        slow.words = 3
        answer = httpx.post(f"{url}/v1/chat/completions", json={"messages": body["messages"]}, timeout=30)
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        assert slow.written == written + 3
    quick.close()


def test_questions_to_the_server_at_once_take_turns_at_the_model(engine: Engine) -> None:
    slow = SlowWriter(words=10, pause_s=0.1)

    class SlowProvider(ScriptedProvider):
        def get(self, endpoint: object) -> SlowWriter:  # type: ignore[override]
            return slow

    turns = Engine(engine.settings, embed_model=engine.embed_model, llm_provider=SlowProvider())  # type: ignore[arg-type]
    with running(create_app(turns)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="-", max_retries=0)
        client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])  # warm

        def ask(_: int) -> dict[str, float]:
            done = client.chat.completions.create(model="ragidx", messages=[{"role": "user", "content": QUESTION}])
            return (done.model_extra or {})["ragidx"]["timings"]

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=3) as pool:
            timings = sorted(pool.map(ask, range(3)), key=lambda t: t["queue_wait"])
    waits = [t["queue_wait"] for t in timings]
    assert all(t["total"] >= 0.9 for t in timings)  # each wrote its ten words at 0.1 s each
    assert waits[0] < 0.5 and waits[1] >= 0.8 and waits[2] >= waits[1] + 0.8  # one after the other
    turns.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_hangs_up_while_waiting_leaves_the_queue(engine: Engine, stream: bool) -> None:
    waiting = sibling(engine)
    with running(create_app(waiting)) as url:
        body = {"messages": [{"role": "user", "content": QUESTION}], "stream": stream}
        with waiting.model_queue.slot():  # another question holds the model
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{url}/v1/chat/completions", json=body, timeout=1.5)  # gives up and hangs up
            deadline = time.monotonic() + 10
            while waiting.model_queue.stats().waiting and time.monotonic() < deadline:
                time.sleep(0.05)
            assert waiting.model_queue.stats().waiting == 0  # its place in the line is given up
        assert waiting.model_queue.stats().busy == 0
        assert httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False}, timeout=30).status_code == 200
    waiting.close()


def test_one_key_filling_the_queue_does_not_turn_another_key_away(engine: Engine) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from ragidx.config import ServerKey

    keys = [ServerKey(key="k-ann", user="ann"), ServerKey(key="k-bob", user="bob")]
    fair = sibling(engine, serve=ServerSettings(keys=keys), queue=QueueSettings(max_waiting=4))
    body = {"messages": [{"role": "user", "content": QUESTION}]}

    def ask(key: str) -> httpx.Response:
        return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                          timeout=60)  # fmt: skip

    def until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 20
        while not done() and time.monotonic() < deadline:
            time.sleep(0.02)

    with running(create_app(fair)) as url, ThreadPoolExecutor(max_workers=8) as pool:
        queue = fair.model_queue
        with queue.slot("someone else"):  # the model is busy
            ann = [pool.submit(ask, "k-ann") for _ in range(6)]  # 4 wait, 2 are refused at once
            until(lambda: queue.stats().waiting == 4 and queue.stats().refused == 2)
            bob = pool.submit(ask, "k-bob")  # a place for bob: ann's newest question makes room
            until(lambda: queue.stats().readers_waiting == 2)
            assert queue.stats().waiting == 4 and queue.stats().refused == 3
        statuses = sorted(f.result().status_code for f in ann)
        assert bob.result().status_code == 200 and statuses == [200, 200, 200, 429, 429, 429]
        refused = next(f.result() for f in ann if f.result().status_code == 429)
        assert int(refused.headers["retry-after"]) >= 1 and "busy" in refused.json()["error"]["message"]
    fair.close()
