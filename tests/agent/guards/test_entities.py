"""HTML entities a model wrote: restored in the answer, shown as characters on the stream."""

from __future__ import annotations

from ragidx.agent.guards.base import GuardInput
from ragidx.agent.guards.entities import EntityRestore, EntityUnescaper, restore_entities
from ragidx.article import Article

SOURCES = [
    Article.from_dict(
        {"kb_id": "toc", "title": "Table of Contents", "url": "u1", "content": "Click the >> or the << button."}
    ),
    Article.from_dict(
        {"kb_id": "html", "title": "HTML export", "url": "u2", "content": "An ampersand is written &amp; in HTML."}
    ),
]


def test_entities_the_model_invented_become_characters() -> None:
    text = "Click the &gt;&gt; or the &lt;&lt; button, then &quot;OK&quot; [1]."
    assert restore_entities(text, SOURCES[:1]) == 'Click the >> or the << button, then "OK" [1].'


def test_an_entity_the_articles_write_is_kept() -> None:
    text = "Write &amp; for an ampersand; the &gt; sign needs no escape [2]."
    assert restore_entities(text, SOURCES) == "Write &amp; for an ampersand; the > sign needs no escape [2]."


def test_text_without_entities_is_returned_as_is() -> None:
    text = "Use Insert - Table of Contents [1]."
    assert restore_entities(text, SOURCES) is text


def test_the_guard_says_when_it_restored_entities() -> None:
    result = EntityRestore().check(GuardInput("q", "Click the &gt;&gt; button [1].", SOURCES))
    assert result.text == "Click the >> button [1]." and result.reason is not None and not result.not_found
    unchanged = EntityRestore().check(GuardInput("q", "Click the >> button [1].", SOURCES))
    assert unchanged.reason is None and unchanged.text == "Click the >> button [1]."


def test_streamed_answers_show_characters_not_html_entities() -> None:
    """The model copies entities from the articles' JSON (&#34;); an entity split across pieces is held back."""
    shown = EntityUnescaper()
    pieces = ["Select &#3", "4;Table&#34; and R&", "D, then Tools &gt", "; Options"]
    assert "".join(shown.feed(p) for p in pieces) + shown.flush() == 'Select "Table" and R&D, then Tools > Options'
    assert shown.feed("end &am") + shown.flush() == "end &am"  # an unfinished entity at the end is kept as written
