from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.dashboard.engines import (
    FACTORY_ENV,
    apply_overrides,
    derive_engine,
    factory_spec,
    load_factory,
    settings_key,
)
from ragidx.engine import Engine
from tests.dashboard.fakes import ScriptedProvider, make_engine


def test_overrides_merge_into_llm_and_validate(tmp_path: Path) -> None:
    base = Settings(data_dir=tmp_path)
    s = apply_overrides(base, {"llm": {"context_window": 4096}, "budget_trigger_pct": 0.9, "reranker": "none"})
    assert (s.llm.context_window, s.llm.model, s.budget_trigger_pct, s.reranker) == (4096, base.llm.model, 0.9, "none")
    assert base.llm.context_window == 8192  # the base is not touched
    with pytest.raises(ValueError, match=re.escape("budget_target_pct must not exceed budget_trigger_pct")):
        apply_overrides(base, {"budget_trigger_pct": 0.5, "budget_target_pct": 0.9})
    with pytest.raises(ValueError, match="llm.context_window"):
        apply_overrides(base, {"llm": {"context_window": 100}})


def test_settings_key_changes_with_secrets_but_never_shows_them(tmp_path: Path) -> None:
    a = Settings(data_dir=tmp_path, cohere_api_key="secret-one")
    b = Settings(data_dir=tmp_path, cohere_api_key="secret-two")
    assert settings_key(a) != settings_key(b) and "secret-one" not in settings_key(a)
    assert settings_key(a) == settings_key(Settings(data_dir=tmp_path, cohere_api_key="secret-one"))


def test_factory_spec_and_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FACTORY_ENV, raising=False)
    assert load_factory(factory_spec()) is Engine
    monkeypatch.setenv(FACTORY_ENV, "tests.dashboard.fakes:make_engine")
    assert load_factory(factory_spec()) is make_engine
    with pytest.raises(ValueError, match="write it as 'package.module:function'"):
        load_factory("tests.dashboard.fakes.make_engine")
    with pytest.raises(ValueError, match="cannot be imported"):
        load_factory("tests.dashboard.fakes:nothing_here")
    with pytest.raises(ValueError, match="not callable"):
        load_factory("ragidx.dashboard.engines:FACTORY_ENV")


def test_derived_engine_shares_the_loaded_parts(tmp_path: Path) -> None:
    base = make_engine(Settings(data_dir=tmp_path))
    assert derive_engine(base, base.settings) is base
    small = derive_engine(base, apply_overrides(base.settings, {"llm": {"context_window": 4096}}))
    assert small is not base and small.settings.llm.context_window == 4096
    assert small.embed_model is base.embed_model and small.chunk_store is base.chunk_store
    assert small.article_store is base.article_store and small.llm_provider is base.llm_provider
    assert isinstance(base.llm_provider, ScriptedProvider)
    with pytest.raises(TypeError, match="with_settings"):
        derive_engine(type("Other", (), {"settings": None})(), base.settings)
    base.close()
