"""Settings: env vars, a TOML file, validation with what-to-do messages, secrets never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ragidx.config import Settings


def test_env_and_toml_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "ragidx.toml"
    toml.write_text('top_k = 7\nreranker = "none"\n[llm]\nmodel = "gpt-4o-mini"\napi_base = "https://api.example/v1"\n')
    monkeypatch.setenv("RAGIDX_CONFIG", str(toml))
    monkeypatch.setenv("RAGIDX_TOP_K", "9")  # env beats the file
    monkeypatch.setenv("RAGIDX_LLM__API_KEY", "sk-secret-123")
    monkeypatch.setenv("RAGIDX_LLM__CONTEXT_WINDOW", "128000")
    s = Settings()
    assert (s.top_k, s.reranker, s.llm.model, s.llm.context_window) == (9, "none", "gpt-4o-mini", 128000)
    assert s.llm.api_key is not None and s.llm.api_key.get_secret_value() == "sk-secret-123"
    again = Settings(**json.loads(json.dumps(s.model_dump(mode="python"), default=str)))
    assert again.top_k == 9 and again.llm.model == "gpt-4o-mini"


def test_language_and_multilingual_settings_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toml = tmp_path / "ragidx.toml"
    toml.write_text('default_language = "ru"\n')
    monkeypatch.setenv("RAGIDX_CONFIG", str(toml))
    s = Settings()
    assert s.default_language == "ru"
    again = Settings(**json.loads(json.dumps(s.model_dump(mode="json"))))
    assert again.default_language == "ru" and again == s
    monkeypatch.setenv("RAGIDX_DEFAULT_LANGUAGE", "de")
    assert Settings().default_language == "de"


def test_secrets_are_masked_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGIDX_COHERE_API_KEY", "co-secret-456")
    monkeypatch.setenv("RAGIDX_LLM__API_KEY", "sk-secret-123")
    monkeypatch.setenv("RAGIDX_ARTICLE_STORE_URL", "postgresql://ragidx:pg-secret-789@db:5432/kb")
    s = Settings(reranker="cohere")
    shown = " ".join([repr(s), str(s), json.dumps(s.public_dict())])
    assert "co-secret-456" not in shown and "sk-secret-123" not in shown and "pg-secret-789" not in shown


def test_defaults_are_the_offline_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    s = Settings()
    assert (s.store, s.embed_model, s.reranker, s.llm.is_local) == ("lancedb", "auto", "offline", True)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"store": "weaviate"}, "needs weaviate_url"),
        ({"reranker": "cohere"}, "needs cohere_api_key"),
        ({"reranker": "cross-encoder"}, "needs cross_encoder_path"),
        ({"budget_target_pct": 0.9, "budget_trigger_pct": 0.8}, "must not exceed"),
        ({"collection": "my-collection"}, "use letters, digits and '_'"),
        ({"article_store_url": "mysql://u:p@db/kb"}, "use postgresql://USER:PASSWORD@HOST:PORT/DATABASE"),
    ],
)
def test_inconsistent_settings_say_what_to_set(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Settings(**kwargs)


def test_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGIDX_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(FileNotFoundError, match="nope.toml"):
        Settings()


def test_endpoint_timeouts_default_short_for_endpoints_and_long_for_the_local_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ragidx.config import LLMEndpoint

    remote = LLMEndpoint(api_base="http://127.0.0.1:9/v1")
    assert (remote.connect_timeout_s, remote.effective_read_timeout_s, remote.effective_timeout_s) == (5.0, 20.0, 120.0)
    assert LLMEndpoint().effective_read_timeout_s == 900.0  # the local model reads the whole prompt first
    assert LLMEndpoint(api_base="http://x/v1", timeout_s=300).effective_read_timeout_s == 300.0  # as it was
    monkeypatch.setenv("RAGIDX_LLM__API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGIDX_LLM__CONNECT_TIMEOUT_S", "2")
    monkeypatch.setenv("RAGIDX_LLM__READ_TIMEOUT_S", "7.5")
    s = Settings()
    assert (s.llm.connect_timeout_s, s.llm.effective_read_timeout_s) == (2.0, 7.5)
    for field in ("connect_timeout_s", "read_timeout_s"):
        assert LLMEndpoint.model_fields[field].description  # documented


def test_serve_keys_map_each_key_to_its_reader_from_toml_and_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "ragidx.toml"
    toml.write_text(
        '[serve]\nhost = "0.0.0.0"\n\n[[serve.keys]]\nkey_env = "TEST_KEY_ANN"\nuser = "ann"\ngroups = ["hr", "hr"]\n\n'
        '[[serve.keys]]\nkey_env = "TEST_KEY_WIDGET"\n'
    )
    monkeypatch.setenv("RAGIDX_CONFIG", str(toml))
    monkeypatch.setenv("TEST_KEY_ANN", "sk-ann-1")
    monkeypatch.setenv("TEST_KEY_WIDGET", " sk-widget-2 ")
    monkeypatch.setenv("RAGIDX_SERVE__API_KEYS", '["sk-old-3"]')
    serve = Settings().serve
    assert serve.has_keys and serve.keys[0].groups == ["hr"]
    assert serve.key_readers() == [("sk-ann-1", "ann", ("hr",)), ("sk-widget-2", None, ()), ("sk-old-3", None, ())]
    shown = json.dumps(Settings().public_dict()) + repr(serve)
    assert "TEST_KEY_ANN" in shown and "sk-ann-1" not in shown and "sk-old-3" not in shown
    # the whole list from one variable, as JSON
    monkeypatch.setenv("RAGIDX_SERVE__KEYS", '[{"key": "sk-bob-4", "user": "bob"}]')
    assert Settings().serve.key_readers()[0] == ("sk-bob-4", "bob", ())


@pytest.mark.parametrize(
    ("keys", "api_keys", "message"),
    [
        ([{"key_env": "TEST_KEY_UNSET"}], [], "the variable TEST_KEY_UNSET is empty or not set"),
        ([{"key": "k-1", "user": "ann"}], ["k-1"], r"keys\[0\] and api_keys\[0\] hold the same key"),
        ([{"key": "k-1"}, {"key": "k-1", "groups": ["hr"]}], [], r"keys\[0\] and keys\[1\] hold the same key"),
        ([], [" "], "empty key"),
    ],
)
def test_serve_keys_that_cannot_work_are_refused_naming_the_entry_never_the_key(
    keys: list[dict[str, object]], api_keys: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ragidx.config import ServerSettings

    monkeypatch.delenv("TEST_KEY_UNSET", raising=False)
    serve = ServerSettings.model_validate({"keys": keys, "api_keys": api_keys})
    with pytest.raises(ValueError, match=message) as caught:
        serve.key_readers()
    assert "k-1" not in str(caught.value)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"user": "ann"}, "either key or key_env"),
        ({"key": "k", "key_env": "K"}, "either key or key_env"),
        ({"key": "k", "user": " "}, "non-empty name"),
        ({"key": "k", "groups": [""]}, "non-empty names"),
        ({"key": "k", "role": "admin"}, "Extra inputs"),
    ],
)
def test_a_serve_key_entry_must_say_where_its_key_is_and_whose_it_is(entry: dict[str, object], message: str) -> None:
    from ragidx.config import ServerKey

    with pytest.raises(ValidationError, match=message):
        ServerKey.model_validate(entry)
