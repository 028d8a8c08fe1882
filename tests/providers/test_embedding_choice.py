"""``embed_model="auto"``: which model a knowledge base's languages get, and how the sample is drawn."""

from __future__ import annotations

from collections import Counter

from ragidx.article import Article
from ragidx.providers.embedding_choice import choose_embed_model, model_for_dim, sample_languages


def test_english_keeps_minilm_and_a_fifth_in_another_language_gets_the_multilingual_model() -> None:
    assert choose_embed_model(Counter({"en": 100}), multilingual=True) == "minilm"
    assert choose_embed_model(Counter({"en": 81, "ru": 19}), multilingual=True) == "minilm"
    assert choose_embed_model(Counter({"en": 80, "ru": 20}), multilingual=True) == "e5-multilingual"
    assert choose_embed_model(Counter({"de": 5, "": 95}), multilingual=True) == "e5-multilingual"  # '' not counted
    assert choose_embed_model(Counter({"uk": 10}), multilingual=True) == "e5-multilingual"  # not among USE's 16


def test_without_the_extra_or_for_a_language_it_does_not_read_minilm_stays() -> None:
    assert (
        choose_embed_model(Counter({"ru": 10}), multilingual=False) == "minilm"
    )  # the ingest warning says what to install
    assert choose_embed_model(Counter({"eo": 10}), multilingual=True) == "minilm"  # Esperanto: e5 was not trained on it
    assert choose_embed_model(Counter(), multilingual=True) == "minilm"


def test_an_index_made_before_the_model_was_recorded_tells_it_by_the_width_of_its_vectors() -> None:
    assert (model_for_dim(384), model_for_dim(512), model_for_dim(768), model_for_dim(None)) == (
        "minilm",
        "use-multilingual",
        None,
        None,
    )


def test_the_sample_is_drawn_from_the_whole_file_not_its_head() -> None:
    english = [Article(f"en{i}", "Tables", "", "Insert a table.", language="en") for i in range(300)]
    russian = [Article(f"ru{i}", "Таблицы", "", "Вставка таблицы.", language="ru") for i in range(100)]
    counts = sample_languages([*english, "not an article", *russian], k=64)
    assert sum(counts.values()) == 64 and counts["ru"] >= 8 and counts["en"] >= 32, counts
    assert counts == sample_languages([*english, *russian], k=64)  # seeded: the same file, the same choice
