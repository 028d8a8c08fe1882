"""The pointer ragidx reindex switches: which table answers for a collection."""

from __future__ import annotations

import json

import pytest

from ragidx.stores.active_table import active_table, pointer_path, previous_tables, switch_table


def test_without_a_switch_the_collection_is_its_own_table(tmp_path) -> None:
    assert active_table(tmp_path, "Articles") == "Articles"
    assert previous_tables(tmp_path, "Articles") == []


def test_a_switch_points_at_the_new_table_and_keeps_the_old_in_mind(tmp_path) -> None:
    switch_table(tmp_path, "Articles", "Articles_r1", model="bge-m3@tei")
    switch_table(tmp_path, "Articles", "Articles_r2", model="minilm")

    assert active_table(tmp_path, "Articles") == "Articles_r2"
    assert previous_tables(tmp_path, "Articles") == ["Articles", "Articles_r1"]
    assert json.loads(pointer_path(tmp_path, "Articles").read_text())["model"] == "minilm"
    assert active_table(tmp_path, "Other") == "Other"  # each collection has its own
    assert [p.name for p in tmp_path.iterdir()] == ["Articles.active.json"]  # no temporary file left


def test_an_unreadable_pointer_is_an_error_with_its_fix(tmp_path) -> None:
    pointer_path(tmp_path, "Articles").write_text("{not json")

    with pytest.raises(RuntimeError, match="delete it to use the table named after the collection"):
        active_table(tmp_path, "Articles")
