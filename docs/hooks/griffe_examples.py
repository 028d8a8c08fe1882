"""Griffe extension for the API reference: a Google-style ``Example:`` section is read as ``Examples:``.

ragidx's docstrings title their usage examples ``Example:`` (the project's style); griffe knows only the plural as
the examples section and would render the singular as an admonition whose ``>>>`` lines read as Markdown. With this
extension they render as code. Loaded by ``mkdocs.yml`` (mkdocstrings' ``extensions`` option).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` section titles to ``Examples:`` before a docstring is parsed."""

    def on_instance(self, *, obj: griffe.Object, **_: Any) -> None:
        docstring = obj.docstring
        if docstring is not None and "Example:" in docstring.value:
            docstring.value = _EXAMPLE.sub(r"\g<indent>Examples:", docstring.value)
