"""Healing of the reranker's final answer: every repair is named; unusable replies are reported."""

from __future__ import annotations

import pytest

from ragidx.retrieval.flash.parsing import JsonRepair, coerce_id, heal_json, parse_answer

R = JsonRepair

HEALING_CASES = [
    # (reply, expected ids, expected repairs)
    ('{"topics": [{"id": 4, "reason": "r"}]}', [4], set()),
    ('```json\n{"topics": [{"id": 4, "reason": "r"}]}\n```', [4], {R.MARKDOWN_FENCE}),
    ('```\n{"topics": [{"id": 4, "reason": "r"}]}\n```', [4], {R.MARKDOWN_FENCE}),
    (
        'Sure! Here is my choice:\n{"topics": [{"id": 4, "reason": "r"}]}\nHope it helps.',
        [4],
        {R.SURROUNDING_TEXT},
    ),
    ('{"topics": [{"id": 4, "reason": "r",}, {"id": 2, "reason": "s"},],}', [4, 2], {R.TRAILING_COMMA}),
    ("{'topics': [{'id': 4, 'reason': 'the \"best\" one'}]}", [4], {R.SINGLE_QUOTES}),
    ('{topics: [{id: 4, reason: "r", excerpt: None}]}', [4], {R.SYNTAX}),
    (
        '{"topics": [{"id": 4, "reason": "r"}, {"id": 2, "reason": "cut of',
        [4],
        {R.TRUNCATED},
    ),
    ('{"topics": [{"id": "7", "reason": "r"}, {"id": "ID:3"}, {"id": "[ID:9]"}]}', [7, 3, 9], {R.STRING_IDS}),
    ("[42, 18, 5]", [42, 18, 5], {R.LEGACY_LIST}),
    ("My final answer: [42, 18, 5]", [42, 18, 5], {R.LEGACY_LIST, R.SURROUNDING_TEXT}),
    ('{"topics": [42, 18], "people": []}', [42, 18], {R.LEGACY_LIST}),
    (
        '[ID:3] and [ID:5] look right. {"topics": [{"id": 5, "reason": "r"}]}',
        [5],
        {R.SURROUNDING_TEXT},
    ),
    (
        'Draft: {"topics": [{"id": 1, "reason": "d"}]}\nFinal: {"topics": [{"id": 2, "reason": "f"}]}',
        [2],
        {R.SURROUNDING_TEXT},
    ),
    (
        'Here\'s what I\'d pick: {"topics": [{"id": 6, "reason": "it\'s relevant"}]}',
        [6],
        {R.SURROUNDING_TEXT},
    ),
    (
        '```\nThinking: [ID:3] looks right.\n```\n{"topics": [{"id": 3, "reason": "r"}]}',
        [3],
        {R.SURROUNDING_TEXT},
    ),
]


@pytest.mark.parametrize(("reply", "ids", "repairs"), HEALING_CASES)
def test_healing_recovers_the_selection_and_names_each_repair(
    reply: str, ids: list[int], repairs: set[JsonRepair]
) -> None:
    answer = parse_answer(reply)

    assert answer.ok, answer.error
    assert [t.id for t in answer.topics or []] == ids
    assert set(answer.repairs) == repairs


def test_reason_and_excerpt_are_read_and_blank_excerpt_is_none() -> None:
    answer = parse_answer(
        '{"topics": [{"id": 1, "reason": " why ", "excerpt": "para"}, {"id": 2, "reason": "x", "excerpt": " "}]}'
    )
    assert answer.topics is not None
    assert (answer.topics[0].reason, answer.topics[0].excerpt) == ("why", "para")
    assert answer.topics[1].excerpt is None


def test_empty_selection_is_a_valid_answer() -> None:
    answer = parse_answer('{"topics": []}')
    assert answer.ok
    assert answer.topics == []


def test_duplicate_ids_are_kept_once_in_first_position_and_counted() -> None:
    answer = parse_answer('{"topics": [{"id": 3}, {"id": 1}, {"id": "3"}]}')
    assert [t.id for t in answer.topics or []] == [3, 1]
    assert answer.duplicates == 1


def test_malformed_items_are_skipped_and_counted() -> None:
    answer = parse_answer('{"topics": [{"id": "abc"}, {"id": true}, {"reason": "no id"}, {"id": 2}]}')
    assert [t.id for t in answer.topics or []] == [2]
    assert answer.malformed_items == 3


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("I think article 7 is the most relevant.", "no JSON"),
        ('{"answer": [1, 2]}', '"topics"'),
        ('{"topics": "7, 8"}', '"topics"'),
        ('{"topics": [{"id": "seven"}, {"id": null}]}', "usable id"),
        ("", "no JSON"),
        ('"just a string"', "neither"),
    ],
)
def test_unusable_replies_are_not_ok_and_say_why(reply: str, error: str) -> None:
    answer = parse_answer(reply)
    assert not answer.ok
    assert answer.topics is None
    assert error in (answer.error or "")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(7, (7, False)), ("7", (7, True)), ("ID:7", (7, True)), ("id 7", (7, True)), (7.0, (7, False))],
)
def test_coerce_id_reads_ids_written_as_strings(value: object, expected: tuple[int, bool]) -> None:
    assert coerce_id(value) == expected


@pytest.mark.parametrize("value", [True, "seven", "7a", 7.5, None, [7]])
def test_coerce_id_rejects_non_ids(value: object) -> None:
    assert coerce_id(value) == (None, False)


def test_heal_json_raises_when_there_is_nothing_to_heal() -> None:
    with pytest.raises(ValueError, match="no JSON"):
        heal_json("no brackets at all")
