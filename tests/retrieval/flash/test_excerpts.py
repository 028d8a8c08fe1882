"""Excerpts are whole paragraphs of the article, never cut sentences or invented text."""

from __future__ import annotations

from ragidx.retrieval.flash.excerpts import snap_excerpt

ARTICLE = (
    "Intro paragraph about keys.\n\n"
    "To rotate keys, run `kms rotate`. Then restart the agents so they reload.\n\n"
    "Unrelated notes.\n\n"
    "Rollback: run `kms restore` with the old key id."
)


def test_a_cut_sentence_is_expanded_to_its_whole_paragraph() -> None:
    assert snap_excerpt("To rotate keys, run", ARTICLE) == (
        "To rotate keys, run `kms rotate`. Then restart the agents so they reload."
    )


def test_paragraphs_come_back_in_article_order_and_ellipses_are_skipped() -> None:
    excerpt = "Rollback: run `kms restore`\n...\nTo rotate keys, run `kms rotate`."
    assert snap_excerpt(excerpt, ARTICLE) == (
        "To rotate keys, run `kms rotate`. Then restart the agents so they reload.\n\n"
        "Rollback: run `kms restore` with the old key id."
    )


def test_whitespace_differences_still_match() -> None:
    assert snap_excerpt("To   rotate keys,\trun `kms rotate`.", ARTICLE) is not None


def test_paraphrased_or_invented_text_rejects_the_excerpt() -> None:
    assert snap_excerpt("To rotate keys, call the rotate endpoint.", ARTICLE) is None
    assert snap_excerpt("...", ARTICLE) is None


def test_a_long_chat_log_is_cut_at_whole_messages() -> None:
    lines = [f"[User (2025-07-25 14:{i:02d})]: message number {i} with some words" for i in range(100)]
    chat = "\n".join(lines)
    assert len(chat) > 3000
    assert snap_excerpt("message number 42 with", chat) == lines[42]
