"""Which engine the dashboard talks to, and how sidebar settings derive a new one cheaply.

The dashboard builds one *base* engine from ``Settings()`` (environment, ``ragidx.toml``, defaults)
with an engine factory, and derives an engine per sidebar configuration that shares the base's
embedding model, stores and local model servers, so trying a 4K window does not reload anything.

The factory is ``ragidx.engine.Engine`` unless ``RAGIDX_DASHBOARD_ENGINE_FACTORY`` names another
callable as ``package.module:function`` (taking ``Settings``, returning an engine); tests use it to
run the dashboard on a scripted LLM.

Example:
    >>> s = apply_overrides(Settings(data_dir="/tmp/kb"), {"top_k": 3, "llm": {"context_window": 4096}})
    >>> s.top_k, s.llm.context_window, s.llm.model == Settings().llm.model
    (3, 4096, True)
"""

from __future__ import annotations

import hashlib
import importlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import SecretStr, ValidationError

from ragidx.config import Settings
from ragidx.engine import Engine

__all__ = [
    "FACTORY_ENV",
    "EngineFactory",
    "apply_overrides",
    "derive_engine",
    "factory_spec",
    "load_factory",
    "settings_key",
]

FACTORY_ENV = "RAGIDX_DASHBOARD_ENGINE_FACTORY"
DEFAULT_FACTORY = "ragidx.engine:Engine"

EngineFactory = Callable[[Settings], Any]


def factory_spec() -> str:
    """The configured factory as ``module:callable`` (``ragidx.engine:Engine`` by default)."""
    return os.environ.get(FACTORY_ENV, "").strip() or DEFAULT_FACTORY


def load_factory(spec: str) -> EngineFactory:
    """Import ``package.module:callable``.

    Raises:
        ValueError: the spec is malformed, or does not name a callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"engine factory {spec!r}: write it as 'package.module:function'")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"engine factory {spec!r} cannot be imported: {exc}") from exc
    if not callable(target):
        raise ValueError(f"engine factory {spec!r} is not callable")
    factory: EngineFactory = target
    return factory


def apply_overrides(settings: Settings, overrides: Mapping[str, Any]) -> Settings:
    """New, validated settings: ``settings`` with ``overrides`` (``llm`` may be a partial dict).

    Raises:
        ValueError: the combination is invalid (e.g. target above trigger); the message says why.
    """
    data = settings.model_dump()
    for key, value in overrides.items():
        if key == "llm" and isinstance(value, Mapping):
            data["llm"] = {**data["llm"], **value}
        else:
            data[key] = value
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        reasons = "; ".join(_error_text(e) for e in exc.errors())
        raise ValueError(f"these settings cannot be used: {reasons}") from None


def _error_text(error: Mapping[str, Any]) -> str:
    where = ".".join(str(p) for p in error.get("loc", ()))
    message = str(error.get("msg", "invalid"))
    message = message.removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def settings_key(settings: Settings) -> str:
    """A cache key that changes with every setting, secrets included (hashed, never shown)."""
    public = settings.model_dump_json()
    secrets = hashlib.sha256()
    for value in _secrets(settings.model_dump()):
        secrets.update(value.encode())
        secrets.update(b"\x00")
    return f"{public}|{secrets.hexdigest()[:16]}"


def _secrets(data: Any) -> list[str]:
    if isinstance(data, SecretStr):
        return [data.get_secret_value()]
    if isinstance(data, Mapping):
        return [s for v in data.values() for s in _secrets(v)]
    return []


def derive_engine(base: Any, settings: Settings) -> Any:
    """An engine for ``settings`` that shares ``base``'s models, stores and LLM servers.

    Returns ``base`` itself when nothing changed. A derived ``Engine`` must not be closed: it owns
    nothing (closing ``base`` closes the shared parts). An engine of another type derives through
    its own ``with_settings(settings)`` when it has one, else through the factory's type.
    """
    if settings == base.settings:
        return base
    with_settings = getattr(base, "with_settings", None)
    if callable(with_settings):
        return with_settings(settings)
    if isinstance(base, Engine):
        return Engine(
            settings,
            embed_model=base.embed_model,
            chunk_store=base.chunk_store,
            article_store=base.article_store,
            llm_provider=base.llm_provider,
        )
    raise TypeError(f"cannot derive an engine from {type(base).__name__}: give it a with_settings(settings) method")
