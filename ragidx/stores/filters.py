"""Metadata filters as users write them, turned into LlamaIndex ``MetadataFilters`` (the one type every store takes).

Three ways in, one way out:

- ``MetadataFilters`` as they are (nested AND/OR/NOT, any operator a store supports);
- a mapping ``{"product": "writer", "version": ["7.4", "7.5"]}``: each field equals its value, or one of a
  list's values; all fields together;
- the CLI's and the dashboard's expressions, one condition each (:func:`parse_filter`)::

      product=writer        product!=calc        version>=7.4        version<8
      product in writer,calc               product not in calc,impress

Values stay strings here; the store converts them to the field's type (``version>=7.4`` on a number field is
a number comparison) and quotes them, so a value may hold any character.

Example:
    >>> parse_filters(["product=writer", "version>=7.4"]).filters[1].operator.value
    '>='
    >>> as_filters({"product": ["writer", "calc"]}).filters[0].operator.value
    'in'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

__all__ = [
    "INTERNAL_FIELDS",
    "FilterSpec",
    "as_filters",
    "describe_filters",
    "parse_filter",
    "parse_filters",
    "user_fields",
]

FilterSpec: TypeAlias = MetadataFilters | Mapping[str, Any] | None
"""What the API's ``filters=`` accepts."""
INTERNAL_FIELDS = frozenset(
    {"id", "chunk_no", "tenant", "public", "location_url", "heading_path", "section", "page", "anchor"}
    | {"spanned_sections"}
)
"""Fields the stores keep for themselves: a chunk's id and place in its article (ingestion sets ``section``,
``page``, ``anchor``, ``heading_path``, ``location_url`` and ``spanned_sections`` on each chunk), the tenant,
whether it is public.
Nobody sets them on an article, so no list of filterable fields names them, and ``ragidx serve`` refuses a
request filtering on them. (``allowed``, the permissions, is named by no list either, but a request may narrow
with it: a store ANDs every search with the reader's own.)"""
_UNLISTED = INTERNAL_FIELDS | {"allowed"}


def user_fields(fields: Iterable[str]) -> list[str]:
    """The fields of ``fields`` a user filters on (sorted): an article's own and its metadata, not
    :data:`INTERNAL_FIELDS` nor ``allowed``. What an error about an unknown field lists.

    Example:
        >>> user_fields(["chunk_no", "product", "tenant", "kb_id", "allowed"])
        ['kb_id', 'product']
    """
    return sorted(f for f in fields if f not in _UNLISTED)


_EXPRESSION = re.compile(
    r"^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*"
    r"(?:(?P<op>>=|<=|!=|==|=|>|<)|\s(?P<word>not\s+in|in)\s)\s*(?P<value>.*?)\s*$",
    re.DOTALL | re.IGNORECASE,
)
_OPERATORS = {
    "=": FilterOperator.EQ,
    "==": FilterOperator.EQ,
    "!=": FilterOperator.NE,
    ">": FilterOperator.GT,
    "<": FilterOperator.LT,
    ">=": FilterOperator.GTE,
    "<=": FilterOperator.LTE,
}


def parse_filter(expression: str) -> MetadataFilter:
    """One condition: ``key=value``, ``key!=value``, ``key>=x`` (also ``>``, ``<``, ``<=``), ``key in a,b`` or
    ``key not in a,b``.

    Raises:
        ValueError: the expression is not one of those, saying what is.
    """
    match = _EXPRESSION.match(expression)
    if match is None or (match["value"] == "" and match["op"] not in ("=", "==", "!=")):
        raise ValueError(
            f"filter {expression!r}: write key=value, key!=value, key>=value (or >, <, <=), key in a,b or "
            "key not in a,b (key: letters, digits, _)"
        )
    key, value = match["key"], match["value"]
    if match["word"]:
        values = [v.strip() for v in value.split(",") if v.strip()]
        if not values:
            raise ValueError(f"filter {expression!r}: 'in' needs one or more values, separated by commas")
        operator = FilterOperator.NIN if match["word"].lower().startswith("not") else FilterOperator.IN
        return MetadataFilter(key=key, value=values, operator=operator)
    return MetadataFilter(key=key, value=value, operator=_OPERATORS[match["op"]])


def parse_filters(expressions: Iterable[str]) -> MetadataFilters | None:
    """All the conditions together (AND); None when there are none."""
    filters: list[MetadataFilter | MetadataFilters] = [parse_filter(e) for e in expressions]
    return MetadataFilters(filters=filters, condition=FilterCondition.AND) if filters else None


def as_filters(spec: FilterSpec) -> MetadataFilters | None:
    """``MetadataFilters`` from what the API accepts (see the module docstring); None: no filter."""
    if spec is None:
        return None
    if isinstance(spec, MetadataFilters):
        return spec if spec.filters else None
    if not isinstance(spec, Mapping):
        raise TypeError(f"filters must be MetadataFilters or a mapping of field to value, got {type(spec).__name__}")
    out: list[MetadataFilter | MetadataFilters] = []
    for key, value in spec.items():
        if isinstance(value, (list, tuple, set, frozenset)):
            out.append(MetadataFilter(key=str(key), value=[_value(v) for v in value], operator=FilterOperator.IN))
        else:
            out.append(MetadataFilter(key=str(key), value=_value(value), operator=FilterOperator.EQ))
    return MetadataFilters(filters=out, condition=FilterCondition.AND) if out else None


def _value(value: Any) -> Any:
    return str(value).lower() if isinstance(value, bool) else value


def describe_filters(filters: MetadataFilters | None) -> str:
    """The filters as one line for people (the CLI's and the dashboard's captions)."""
    if filters is None or not filters.filters:
        return ""
    parts = []
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            parts.append(f"({describe_filters(f)})")
        elif isinstance(f.value, list):
            parts.append(f"{f.key} {f.operator.value} {', '.join(map(str, f.value))}")
        else:
            parts.append(f"{f.key} {f.operator.value} {f.value}")
    joiner = f" {(filters.condition or FilterCondition.AND).value} "
    text = joiner.join(parts)
    return f"not ({text})" if filters.condition == FilterCondition.NOT else text
