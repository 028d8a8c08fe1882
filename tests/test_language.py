"""Language identification: right on short en/ru queries when told the knowledge base's languages."""

from __future__ import annotations

import pytest

from ragidx.language import detect_language

EN_RU = ("en", "ru")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("insert table", "en"),  # unrestricted, py3langid calls this Norwegian
        ("crop a picture", "en"),
        ("VLOOKUP", "en"),
        ("буквица", "ru"),  # unrestricted: Serbian
        ("обрезать рисунок", "ru"),
        ("как вставить номер страницы", "ru"),
        ("Как в Calc сделать VLOOKUP по двум столбцам?", "ru"),
    ],
)
def test_short_queries_among_the_knowledge_bases_languages(query: str, expected: str) -> None:
    assert detect_language(query, EN_RU) == expected


def test_unrestricted_detection_of_sentences() -> None:
    assert detect_language("How do I number the pages of a long document?") == "en"
    assert detect_language("Как пронумеровать страницы длинного документа?") == "ru"
    assert detect_language("Wie füge ich eine Tabelle in ein Dokument ein?") == "de"


def test_one_candidate_needs_no_model_and_tags_are_reduced() -> None:
    assert detect_language("anything at all", ["de-AT"]) == "de"
    assert detect_language("Tabelle einfügen", ["en-US", "de_DE"]) == "de"


def test_no_letters_is_none_and_unknown_candidates_fall_back_to_the_first() -> None:
    assert detect_language("12345 -- 678") is None
    assert detect_language("", EN_RU) is None
    assert detect_language("text", ["xx", "zz"]) == "xx"
