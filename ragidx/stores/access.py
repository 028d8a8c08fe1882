"""Who may read what: an article's principals, the principal a query runs as, and the predicate between them.

An article may carry, in its metadata under ``allowed``, the principals allowed to read it: ``"user:NAME"`` or
``"group:NAME"``. An article that carries none is public. Every query runs as a :class:`Principal` (a user and
the groups it belongs to; by default nobody, who reads public articles only).

Permissions are a query predicate, not a post-filter: :func:`access_filter` is a LlamaIndex ``MetadataFilters``
that the chunk stores translate into their own query (before top-k), and the article store applies the same
rule to every read of whole articles. Nothing above the stores sees an article its principal may not read.

Example:
    >>> ann = Principal(user="ann", groups=("support",))
    >>> ann.principals
    ('user:ann', 'group:support')
    >>> ann.may_read(["group:support"]), Principal().may_read(["group:support"]), Principal().may_read([])
    (True, False, True)
    >>> allowed_of({"allowed": "user:ann"})
    ('user:ann',)
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from ragidx.stores.filters import FilterSpec, as_filters

__all__ = [
    "ALLOWED",
    "PREFIXES",
    "PUBLIC",
    "InvalidPermissions",
    "Principal",
    "Scope",
    "access_filter",
    "allowed_of",
    "checked_permissions",
    "scoped_filters",
]

ALLOWED = "allowed"
"""Metadata key of an article's principals (a list of ``user:NAME`` / ``group:NAME``; none: public)."""
PUBLIC = "public"
"""The stores' boolean field: the article carries no principals."""
PREFIXES = ("user:", "group:")
MAX_PRINCIPAL_CHARS = 512


class InvalidPermissions(ValueError):
    """An article's ``allowed`` value is not a list of ``user:NAME`` / ``group:NAME`` strings."""


@dataclass(frozen=True)
class Principal:
    """Who a query runs as: a user (or nobody) and the groups it belongs to.

    Args:
        user: the user's name (``ann`` reads articles that allow ``user:ann``); None for nobody.
        groups: the user's groups (``support`` reads articles that allow ``group:support``).

    Example:
        >>> Principal.of("ann", ["support", "support"]).principals
        ('user:ann', 'group:support')
        >>> Principal().is_public
        True
    """

    user: str | None = None
    groups: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.user is not None and (not isinstance(self.user, str) or not self.user.strip()):
            raise ValueError(f"user must be a non-empty string or None, got {self.user!r}")
        if isinstance(self.groups, str) or not all(isinstance(g, str) and g.strip() for g in self.groups):
            raise ValueError(f"groups must be a list of non-empty strings, got {self.groups!r}")

    @classmethod
    def of(cls, user: str | None = None, groups: Iterable[str] | None = None) -> Principal:
        """A principal from a user name and any iterable of group names (duplicates dropped, order kept)."""
        if isinstance(groups, str):
            raise ValueError(f"groups must be a list of names, not one string ({groups!r}); use [{groups!r}]")
        return cls(user=user or None, groups=tuple(dict.fromkeys(groups or ())))

    @property
    def principals(self) -> tuple[str, ...]:
        """What an article's ``allowed`` names to let this principal read it."""
        own = (f"user:{self.user}",) if self.user else ()
        return own + tuple(f"group:{g}" for g in self.groups)

    @property
    def is_public(self) -> bool:
        """Nobody: reads public articles only."""
        return not self.principals

    def may_read(self, allowed: Sequence[str]) -> bool:
        """The rule every store applies: public, or one of this principal's names is allowed."""
        return not allowed or bool(set(allowed) & set(self.principals))

    def __str__(self) -> str:
        return ", ".join(self.principals) or "public"


PUBLIC_PRINCIPAL = Principal()


def allowed_of(metadata: Mapping[str, Any]) -> tuple[str, ...]:
    """The principals an article's metadata allows (sorted, duplicates dropped); ``()``: public.

    Raises:
        InvalidPermissions: ``allowed`` is there but not a string or a list of ``user:``/``group:`` strings.
            Such an article must not be stored as public, so ingestion reports it and skips it.
    """
    value = metadata.get(ALLOWED)
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise InvalidPermissions(
            f'\'{ALLOWED}\' must be a list of principals like ["user:ann", "group:support"], got {value!r}'
        )
    out: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item.startswith(PREFIXES) or len(item) <= len(item.split(":")[0]) + 1:
            raise InvalidPermissions(f"'{ALLOWED}' entries must be 'user:NAME' or 'group:NAME' strings, got {item!r}")
        if len(item) > MAX_PRINCIPAL_CHARS:
            raise InvalidPermissions(f"'{ALLOWED}' entry longer than {MAX_PRINCIPAL_CHARS} characters: {item[:40]!r}…")
        out.add(item)
    return tuple(sorted(out))


def checked_permissions(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` with its ``allowed`` checked and written in one form, for ingestion: what it stores.

    Ingestion is where a mistake would widen who reads an article, so it is stricter than :func:`allowed_of`:

    - ``allowed`` present but empty (``[]``, ``""``) is an error, not "public": leave the key out for that;
    - a key that looks like a misspelling of it (``Allowed``, ``allow``, ``allowed_groups``, ``alowed`` ...) is an
      error: taken as ordinary metadata it would leave the article public;
    - an entry is normalised: spaces at its ends and around its colon go (``" group: hr "`` is ``"group:hr"``);
      a space inside the name is an error (``"group:h r"`` would be readable by nobody, silently).

    The result is a new mapping (``allowed`` as a sorted list, duplicates dropped); ``metadata`` is not changed.

    Raises:
        InvalidPermissions: any of the above; the message says what to write instead.

    Example:
        >>> checked_permissions({"allowed": [" group: hr ", "user:ann"], "team": "x"})
        {'allowed': ['group:hr', 'user:ann'], 'team': 'x'}
    """
    for key in metadata:
        if key != ALLOWED and _looks_like_allowed(str(key)):
            raise InvalidPermissions(
                f"metadata key {key!r} looks like a misspelling of {ALLOWED!r}: as it is, the article would be public. "
                f"Name it {ALLOWED!r} (a list of 'user:NAME' / 'group:NAME'), or rename it if it is no permission"
            )
    if ALLOWED not in metadata:
        return dict(metadata)
    value = metadata[ALLOWED]
    items = ([value] if value.strip() else []) if isinstance(value, str) else value
    if isinstance(items, (list, tuple)) and not items:
        raise InvalidPermissions(
            f"'{ALLOWED}' is empty: nobody is named, and the article would be public. Name its readers "
            '(["group:support"]), or leave the key out to make it public'
        )
    if isinstance(items, (list, tuple)):
        items = [_normalised(item) for item in items]
    allowed = allowed_of({ALLOWED: items})
    return {**metadata, ALLOWED: list(allowed)}


_PRINCIPAL = re.compile(r"^\s*(user|group)\s*:\s*(.*?)\s*$")


def _normalised(item: Any) -> Any:
    """``item`` without spaces at its ends or around its colon; a name with a space inside is an error."""
    if not isinstance(item, str):
        return item
    match = _PRINCIPAL.match(item)
    if match is None:
        return item  # allowed_of says what is wrong with it
    kind, name = match.groups()
    if not name:
        raise InvalidPermissions(f"'{ALLOWED}' entry {item!r} names nobody: write '{kind}:NAME'")
    if any(ch.isspace() for ch in name):
        raise InvalidPermissions(
            f"'{ALLOWED}' entry {item!r}: a name has no spaces (it would match nobody); write the {kind}'s name as "
            "the directory spells it"
        )
    return f"{kind}:{name}"


def _looks_like_allowed(key: str) -> bool:
    """A metadata key meant as ``allowed``: its letters in another case or with separators (``Allowed``,
    ``allowed_groups``), ``allow`` with a list's name (``allow``, ``allow_users``), or a typo away (``alowed``)."""
    letters = re.sub(r"[^a-z]", "", key.lower())
    if letters.startswith("allowed"):
        return True
    if letters.startswith("allow") and letters[5:] in ("", "list", "group", "groups", "user", "users", "principals"):
        return True
    return letters[:1] == "a" and difflib.SequenceMatcher(None, letters, ALLOWED).ratio() >= 0.8


def access_filter(principal: Principal) -> MetadataFilters:
    """The store predicate for ``principal``: public chunks, or chunks that allow one of its names."""
    public = MetadataFilter(key=PUBLIC, value="true", operator=FilterOperator.EQ)  # a bool field: the stores parse it
    if principal.is_public:
        return MetadataFilters(filters=[public])
    allowed = MetadataFilter(key=ALLOWED, value=list(principal.principals), operator=FilterOperator.ANY)
    return MetadataFilters(filters=[public, allowed], condition=FilterCondition.OR)


def scoped_filters(filters: MetadataFilters | None, principal: Principal | None) -> MetadataFilters:
    """``filters`` AND the access predicate of ``principal`` (``None``: public): what a store query runs with.

    The caller's filters are nested whole, so an ``OR`` or ``NOT`` in them can only narrow the result.
    """
    access = access_filter(principal or PUBLIC_PRINCIPAL)
    if filters is None or not filters.filters:
        return access
    return MetadataFilters(filters=[filters, access], condition=FilterCondition.AND)


@dataclass(frozen=True)
class Scope:
    """What a query may read: its ``filters`` (None: none), as its ``principal``. One value for what the API takes
    as three keywords (``filters=``, ``user=``, ``groups=``), read once and handed on whole.

    Example:
        >>> scope = Scope.of({"product": "writer"}, user="ann")
        >>> scope.principal.principals, scope.is_default, Scope().is_default
        (('user:ann',), False, True)
        >>> Scope().key
        ''
    """

    filters: MetadataFilters | None = None
    principal: Principal = PUBLIC_PRINCIPAL

    @classmethod
    def of(cls, filters: FilterSpec = None, user: str | None = None, groups: Iterable[str] | None = None) -> Scope:
        """The scope of the API's keywords (a mapping or ``MetadataFilters``; a user; group names).

        Raises:
            ValueError, TypeError: a principal or filters that are not one (see :class:`Principal`, ``as_filters``).
        """
        return cls(as_filters(filters), Principal.of(user, groups))

    @property
    def is_default(self) -> bool:
        """No filters, as the public: what a query runs with when none is given."""
        return self.filters is None and self.principal.is_public

    @property
    def key(self) -> str:
        """The same for equal scopes, and ``""`` for the default one (what the engine's agents are pooled by)."""
        if self.is_default:
            return ""
        return f"{self.principal.principals!r}|{self.filters.model_dump_json() if self.filters is not None else ''}"

    def __hash__(self) -> int:  # MetadataFilters is not hashable: equal scopes have equal keys
        return hash(self.key)
