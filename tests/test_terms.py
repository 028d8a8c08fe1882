from __future__ import annotations

from ragidx.terms import stem, terms


def test_terms_drop_stop_words_and_stem_english() -> None:
    assert terms("The printers were installed") == ["printer", "instal"]
    assert terms("The Proteins were BINDING") == ["protein", "bind"]
    assert stem("1889") == "1889"


def test_russian_words_get_the_russian_stemmer() -> None:
    assert stem("таблицами") == stem("таблицы") == "таблиц"
    assert terms("и в таблице") == ["таблиц"]
    assert terms("Вставка таблиц в документы") == ["вставк", "таблиц", "документ"]


def test_extra_stop_words_are_dropped_before_stemming() -> None:
    assert terms("Explain table styles", extra_stop_words={"explain"}) == ["tabl", "style"]
