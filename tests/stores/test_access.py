"""Ingestion's permission check: a mistake in ``allowed`` is an error, never a public article."""

from __future__ import annotations

import re

import pytest

from ragidx.stores.access import InvalidPermissions, checked_permissions


@pytest.mark.parametrize("value", [[], (), ""])
def test_an_empty_allowed_is_an_error_not_public(value: object) -> None:
    with pytest.raises(InvalidPermissions, match=re.escape("leave the key out to make it public")):
        checked_permissions({"allowed": value})


@pytest.mark.parametrize("key", ["Allowed", "ALLOWED", "allow", "allowed_groups", "Allowed-Users", "alowed", "allowd"])
def test_a_key_that_looks_like_allowed_is_an_error_naming_it(key: str) -> None:
    with pytest.raises(InvalidPermissions, match=f"metadata key {re.escape(repr(key))} looks like a misspelling"):
        checked_permissions({key: ["group:hr"], "product": "writer"})


@pytest.mark.parametrize("key", ["allowance", "author", "followed", "audience", "title"])
def test_ordinary_keys_are_not_taken_for_allowed(key: str) -> None:
    assert checked_permissions({key: "x"}) == {key: "x"}


def test_spaces_around_the_colon_and_at_the_ends_are_dropped_and_the_input_is_kept() -> None:
    metadata = {"allowed": [" group: hr ", "user :ann", "group:hr"], "product": "calc"}
    assert checked_permissions(metadata) == {"allowed": ["group:hr", "user:ann"], "product": "calc"}
    assert metadata["allowed"] == [" group: hr ", "user :ann", "group:hr"]  # not mutated
    assert checked_permissions({"allowed": "group: hr"}) == {"allowed": ["group:hr"]}
    assert checked_permissions({"product": "calc"}) == {"product": "calc"}  # no key: public, as before


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("group:h r", "a name has no spaces"),
        ("group: ", "names nobody"),
        ("ann", "must be 'user:NAME' or 'group:NAME'"),
        (7, "must be 'user:NAME' or 'group:NAME'"),
    ],
)
def test_a_malformed_entry_is_an_error(entry: object, message: str) -> None:
    with pytest.raises(InvalidPermissions, match=re.escape(message)):
        checked_permissions({"allowed": ["user:ann", entry]})
