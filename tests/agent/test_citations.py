from __future__ import annotations

from ragidx.agent.citations import resolve_citations, restore_entities

SOURCES = [
    {"kb_id": "toc", "title": "Table of Contents", "url": "u1", "content": "Click the >> or the << button."},
    {"kb_id": "html", "title": "HTML export", "url": "u2", "content": "An ampersand is written &amp; in HTML."},
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


def test_invalid_markers_are_dropped_and_valid_ones_cited_in_order() -> None:
    text, cites, method = resolve_citations("See [2] and [9], then [1].", SOURCES)
    assert (text, [c.kb_id for c in cites], method) == ("See [2] and , then [1].", ["html", "toc"], "markers")
