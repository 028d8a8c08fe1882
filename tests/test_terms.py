from __future__ import annotations

from ragidx.terms import base_language, stem, terms


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


def test_the_language_picks_the_stemmer_for_words_of_its_script() -> None:
    assert terms("Die Tabellen wurden eingefügt", language="de") == ["tabell", "wurd", "eingefugt"]
    assert terms("Die Tabellen", language="de-AT") == terms("Die Tabellen", language="de")
    # German stop words only count in German text; without a language the English rules apply.
    assert terms("Die Tabellen") == ["die", "tabellen"]


def test_english_words_in_a_russian_text_stem_as_english() -> None:
    assert terms("Выберите Insert - Tables", language="ru") == ["выбер", "insert", "tabl"]
    assert terms("Выберите Insert - Tables", language="en") == terms("Выберите Insert - Tables")


def test_base_language() -> None:
    assert [base_language(t) for t in ("en-US", "RU", "pt_BR", "", None)] == ["en", "ru", "pt", None, None]
