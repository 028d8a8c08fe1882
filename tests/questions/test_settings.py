"""``[questions]``: on by default with 90 days' retention; hashing readers needs a key from the environment; a
team's pattern that is no regular expression stops the settings with what to fix."""

from __future__ import annotations

import re

import pytest

from ragidx.config import Settings, SettingsError
from ragidx.questions.settings import HASH_KEY_VARIABLE


def test_defaults_and_the_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = Settings().questions
    assert (cfg.enabled, cfg.retention_days, cfg.hash_readers, cfg.redact_patterns) == (True, 90, False, [])
    monkeypatch.setenv(HASH_KEY_VARIABLE, "a-long-random-secret")
    monkeypatch.setenv("RAGIDX_QUESTIONS__HASH_READERS", "true")
    hashed = Settings().questions
    assert hashed.hash_key is not None and hashed.hash_key.get_secret_value() == "a-long-random-secret"
    assert "a-long-random-secret" not in str(Settings().public_dict())


def test_hashing_without_a_key_is_refused_with_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(HASH_KEY_VARIABLE, raising=False)
    with pytest.raises(SettingsError, match=re.escape(f"questions.hash_readers needs a key: set {HASH_KEY_VARIABLE}")):
        Settings(questions={"hash_readers": True})


def test_a_bad_pattern_and_a_retention_under_a_day_are_refused() -> None:
    with pytest.raises(SettingsError, match=re.escape("redact pattern '[a-' is no regular expression")):
        Settings(questions={"redact_patterns": ["[a-"]})
    with pytest.raises(SettingsError, match="retention_days"):
        Settings(questions={"retention_days": 0})
