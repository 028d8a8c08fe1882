from __future__ import annotations

from ragidx.budget.lru import TextLRU


def test_least_recently_used_goes_first_past_the_entry_bound() -> None:
    lru = TextLRU[int](max_entries=2, max_chars=1000)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("c", 3)
    assert (lru.get("a"), lru.get("b"), lru.get("c"), len(lru)) == (1, None, 3, 2)


def test_bounded_in_characters_and_a_key_larger_than_the_bound_is_not_kept() -> None:
    lru = TextLRU[str](max_entries=10, max_chars=100)
    for ch in "abc":
        lru.put(ch * 40, ch)
    assert len(lru) == 2 and lru.chars == 80 and lru.get("a" * 40) is None
    lru.put("z" * 101, "z")
    assert lru.get("z" * 101) is None and len(lru) == 2  # nothing pushed out for it
    lru.put("b" * 40, "again")
    assert lru.get("b" * 40) == "b"  # a key already there keeps its value
    lru.clear()
    assert len(lru) == 0 and lru.chars == 0
