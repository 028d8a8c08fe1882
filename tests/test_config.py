"""Settings: env vars, a TOML file, validation with what-to-do messages, secrets never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from ragidx.config import (
    KEY_VARIABLE_PREFIX,
    NON_SETTING_VARIABLES,
    ServerKey,
    ServerSettings,
    Settings,
    SettingsError,
    _setting_variables,
)


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
    with pytest.raises(SettingsError, match=message):
        Settings(**kwargs)


def test_missing_config_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RAGIDX_CONFIG", str(tmp_path / "nope.toml"))
    with pytest.raises(SettingsError, match="RAGIDX_CONFIG points to .*nope.toml, which is not a file"):
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
        ({"key": "k", "role": "owner"}, "Input should be 'reader' or 'admin'"),
        ({"key": "k", "admin": True}, "Extra inputs"),
    ],
)
def test_a_serve_key_entry_must_say_where_its_key_is_and_whose_it_is(entry: dict[str, object], message: str) -> None:
    from ragidx.config import ServerKey

    with pytest.raises(ValidationError, match=message):
        ServerKey.model_validate(entry)


# --- every value checked, whatever its source (issue 54) -----------------------------------------------


@pytest.mark.parametrize(
    ("variable", "nearest"),
    [
        ("RAGIDX_DATADIR", "RAGIDX_DATA_DIR"),
        ("RAGIDX_TOPK", "RAGIDX_TOP_K"),
        ("RAGIDX_LLM_MODEL", "RAGIDX_LLM__MODEL"),
        ("RAGIDX_LLM__MODLE", "RAGIDX_LLM__MODEL"),
        ("RAGIDX_FLASH__LLM__API_BASES", "RAGIDX_FLASH__LLM__API_BASE"),
        ("ragidx_datadir", "RAGIDX_DATA_DIR"),  # read whatever its case, so checked whatever its case
    ],
)
def test_a_variable_that_is_no_setting_is_refused_naming_the_nearest_one(
    variable: str, nearest: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, "3")
    with pytest.raises(SettingsError) as caught:
        Settings()
    assert caught.value.problems == (f"{variable} is not a setting: did you mean {nearest}?",)


def test_every_problem_is_listed_at_once_one_per_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ragidx.toml").write_text('top_k = 0\n[llm]\nmodle = "x"\n')
    monkeypatch.setenv("RAGIDX_TOPK", "3")
    monkeypatch.setenv("RAGIDX_CANDIDATE_CHUNKS", "many")
    with pytest.raises(SettingsError) as caught:
        Settings()
    file = tmp_path / "ragidx.toml"
    assert str(caught.value).splitlines() == [
        "invalid settings:",
        "  RAGIDX_TOPK is not a setting: did you mean RAGIDX_TOP_K?",
        "  RAGIDX_CANDIDATE_CHUNKS: Input should be a valid integer, unable to parse string as an integer",
        f"  {file}: top_k: Input should be greater than or equal to 1",
        f"  {file}: llm.modle: unknown key; did you mean llm.model?",
    ]


def test_variables_read_elsewhere_and_key_variables_are_no_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    toml = tmp_path / "ragidx.toml"
    toml.write_text('[[serve.keys]]\nkey_env = "RAGIDX_ANN_KEY"\nuser = "ann"\n')
    for name in NON_SETTING_VARIABLES:
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("RAGIDX_CONFIG", str(toml))
    monkeypatch.setenv("RAGIDX_ANN_KEY", "sk-ann")  # named by a key_env: a key, not a setting
    monkeypatch.setenv("RAGIDX_SERVE__API_KEYS", '["sk-public"]')
    assert Settings().serve.key_readers()[0] == ("sk-ann", "ann", ())
    monkeypatch.setenv("RAGIDX_BOB_KEY", "sk-bob")  # named in the variable's JSON (it replaces the file's list)
    monkeypatch.setenv("RAGIDX_SERVE__KEYS", '[{"key_env": "RAGIDX_BOB_KEY"}]')
    assert Settings().serve.key_readers()[0] == ("sk-bob", None, ())
    monkeypatch.setenv("RAGIDX_CAROL_KEY", "sk-carol")  # named by nothing
    with pytest.raises(SettingsError, match="RAGIDX_CAROL_KEY is not a setting"):
        Settings()
    serve = ServerSettings(keys=[ServerKey(key_env="RAGIDX_CAROL_KEY")])  # named by an argument
    assert Settings(serve=serve).serve.key_readers()[0] == ("sk-carol", None, ())


def test_key_variables_named_as_the_serving_guide_names_them_are_no_error_anywhere(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no settings file names it: a client's shell, where curl sends $RAGIDX_KEY_ANN
    monkeypatch.setenv("RAGIDX_KEY_ANN", "sk-ann")
    assert not Settings().serve.has_keys
    assert not [name for name in _setting_variables() if name.startswith(KEY_VARIABLE_PREFIX)]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[llm]\nmodle = "x"\n', "llm.modle: unknown key; did you mean llm.model?"),
        ("topk = 3\n", "topk: unknown key; did you mean top_k?"),
        (
            '[flash.llm]\nmodel = "x"\ntemprature = 0\n',
            "flash.llm.temprature: unknown key; did you mean flash.llm.temperature?",
        ),
        (
            '[[serve.keys]]\nkey_env = "K"\nscope = "admin"\n',
            "serve.keys[0].scope: unknown key; the keys here are key, key_env, user, groups, role",
        ),
        ("[serve]\nport = 99999\n", "serve.port: Input should be less than or equal to 65535"),
    ],
)
def test_a_bad_key_in_the_file_names_the_file_the_key_and_the_nearest_one(
    text: str, problem: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    toml = tmp_path / "conf" / "ragidx.toml"
    toml.parent.mkdir()
    toml.write_text(text)
    monkeypatch.setenv("RAGIDX_CONFIG", str(toml))
    with pytest.raises(SettingsError) as caught:
        Settings()
    assert caught.value.problems == (f"{toml}: {problem}",)


def test_a_file_that_is_not_toml_is_named_with_its_line_and_column(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # ./ragidx.toml, named by its full path
    (tmp_path / "ragidx.toml").write_text('top_k = 3\n[llm\nmodel = "x"\n')
    with pytest.raises(SettingsError) as caught:
        Settings()
    (problem,) = caught.value.problems
    assert problem.startswith(f"{tmp_path / 'ragidx.toml'}: not valid TOML: ") and "(at line 2, column 5)" in problem


# --- no message quotes a key (issue 55) -----------------------------------------------------------------

SECRET = "sk-test-SECRET-1234567890abcdef"


def _quotes(text: str, secret: str = SECRET) -> list[str]:
    """The pieces of ``secret`` 6 characters or longer that ``text`` holds."""
    return [secret[i : i + 6] for i in range(len(secret) - 5) if secret[i : i + 6] in text]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RAGIDX_SERVE__KEYS", f'["{SECRET}"]'),  # a list of keys instead of tables
        ("RAGIDX_SERVE__KEYS", f'{{"key": "{SECRET}"}}'),  # one table instead of a list
        ("RAGIDX_SERVE__KEYS", f'[{{"key": "{SECRET}", "key_env": "K"}}]'),  # both: pydantic showed 16 + 6 chars
        ("RAGIDX_SERVE__KEYS", f'[{{"key": "{SECRET}", "scope": "admin"}}]'),
        ("RAGIDX_SERVE__KEYS", SECRET),  # not JSON
        ("RAGIDX_SERVE__API_KEYS", SECRET),
        ("RAGIDX_SERVE__API_KEYS", f'"{SECRET}"'),
        ("RAGIDX_SERVE__API_KEYS", f'{{"reader": "{SECRET}"}}'),
        ("RAGIDX_SERVE__API_KEYS", f'[["{SECRET}"]]'),
        ("RAGIDX_SERVE", f'{{"api_keys": "{SECRET}"}}'),
        ("RAGIDX_LLM", f'{{"api_key": ["{SECRET}"]}}'),
        ("RAGIDX_LLM", f'{{"api_key": "{SECRET}", "modle": "{SECRET}"}}'),
        ("RAGIDX_FLASH__LLM", f'{{"api_key": {{"k": "{SECRET}"}}}}'),
        ("RAGIDX_FALLBACK_LLM", SECRET),
    ],
)
def test_no_problem_with_a_key_variable_quotes_the_key(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        Settings()
    assert caught.value.problems and all(p.startswith(variable) for p in caught.value.problems)
    assert _quotes(str(caught.value)) == []


@pytest.mark.parametrize(
    "text",
    [
        f'[serve]\napi_keys = "{SECRET}"\n',
        f'[serve]\nkeys = ["{SECRET}"]\n',
        f'[[serve.keys]]\nkey = "{SECRET}"\nkey_env = "K"\n',
        f'[llm]\napi_key = ["{SECRET}"]\n',
        f'weaviate_api_key = {{ k = "{SECRET}" }}\n',
        f'cohere_api_key = "{SECRET}\n',  # not TOML: an unclosed string
        f'[serve]\napi_keys = ["{SECRET}"\n',  # not TOML: an unclosed list
    ],
)
def test_no_problem_with_a_key_in_the_file_quotes_the_key(
    text: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ragidx.toml").write_text(text)
    with pytest.raises(SettingsError) as caught:
        Settings()
    assert _quotes(str(caught.value)) == []


def test_no_problem_with_a_key_argument_quotes_the_key() -> None:
    with pytest.raises(SettingsError) as caught:
        Settings(serve={"keys": [SECRET], "api_keys": {"a": SECRET}}, llm={"api_key": [SECRET]})
    assert len(caught.value.problems) == 3 and _quotes(str(caught.value)) == []
