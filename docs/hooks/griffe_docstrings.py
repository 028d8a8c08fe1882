"""Griffe extension for the API reference: ragidx's docstring conventions rendered as Markdown.

- A Google-style ``Example:`` section (the project's style) is read as ``Examples:``: griffe knows only the plural
  as the examples section and would render the singular as an admonition whose ``>>>`` lines read as Markdown.
- Sphinx roles (``:class:`~ragidx.agent.answer.Answer```, ``:meth:``, ``:attr:``, ...) become inline code
  (``Answer``; the full path without ``~``), which Markdown would otherwise show with the role's colons.

Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|obj|exc|data|const):`(?P<tilde>~?)(?P<target>[^`]+)`")


def _role(match: re.Match[str]) -> str:
    target = match["target"]
    shown = target.rsplit(".", 1)[-1] if match["tilde"] else target
    return f"``{shown}``"


class ExampleSections(griffe.Extension):
    """Rewrite ``Example:`` titles and Sphinx roles before a docstring is parsed."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        docstring = obj.docstring
        if docstring is None:
            return
        value = _EXAMPLE.sub(r"\g<indent>Examples:", docstring.value)
        docstring.value = _ROLE.sub(_role, value)
