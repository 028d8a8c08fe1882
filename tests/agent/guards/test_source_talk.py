"""Sentences that only say where the answer was found."""

from __future__ import annotations

from ragidx.agent.guards.base import GuardInput
from ragidx.agent.guards.source_talk import SourceTalk, source_talk_units, strip_source_talk
from ragidx.article import Article


def test_a_sentence_that_only_says_where_the_answer_was_found_is_dropped_its_marker_kept() -> None:
    # replies of the local model in the six-set runs of 2026-11-27 (LibreOffice en, PostgreSQL, HotpotQA)
    assert strip_source_talk("The extension is .BAK. This can be found in article [1].") == "The extension is .BAK [1]."
    assert (
        strip_source_talk("The level is WARNING, the lowest written. This can be found in article [2] at line 108.")
        == "The level is WARNING, the lowest written [2]."
    )
    assert (
        strip_source_talk('It is set in the soap opera "Neighbours". This information can be found in articles [2].')
        == 'It is set in the soap opera "Neighbours" [2].'
    )
    assert (
        strip_source_talk("Shirley Temple played her in Kiss and Tell. This can be confirmed by citing article [1].")
        == "Shirley Temple played her in Kiss and Tell [1]."
    )
    assert strip_source_talk("Wait 2 seconds between runs [1]. Sources: [1]") == "Wait 2 seconds between runs [1]."
    assert strip_source_talk("Нажмите F4. Это описано в статье [2].") == "Нажмите F4 [2]."
    assert strip_source_talk("Type an apostrophe first. The article [1] provides more information on this topic.") == (
        "Type an apostrophe first [1]."
    )
    # a marker the statement already has is not repeated; another is added beside it
    assert strip_source_talk("It is 4MB [1]. The source for this information is [1].") == "It is 4MB [1]."
    assert strip_source_talk("It is 4MB [2]. The source for this information is [1].") == "It is 4MB [2] [1]."
    # naming the article by its title says no more (the titles of the articles shown)
    talk = 'It is .BAK. This can be found in the article [1] on "Saving Documents Automatically".'
    assert strip_source_talk(talk, ["Saving Documents Automatically", "Start Center"]) == "It is .BAK [1]."
    assert strip_source_talk(talk) == talk


def test_a_sentence_with_anything_else_to_say_stays() -> None:
    for text in (
        "According to article [1], the default is 4MB.",
        "It is 2 kB. This can be found in the article [1] on CREATE TABLE.",  # names where: a word of its own
        "This information is found in article [1]. The default is 4MB.",  # nothing before it to carry the marker
        "Choose Insert - Table. [1]",  # a bare marker is a citation, not talk
        "Choose Insert - Table. This opens the dialog [1].",
    ):
        assert strip_source_talk(text) == text


def test_a_closing_sentence_is_held_while_it_may_still_be_source_talk() -> None:
    assert source_talk_units("It is 4MB. This inform") == (11, [])
    assert source_talk_units("It is 4MB. This information is found in article [1].") == (11, ["[1]"])
    assert source_talk_units("It is 4MB. This opens") == (11, [])  # "opens" may still be cut
    assert source_talk_units("It is 4MB. This opens the") == (25, [])
    assert source_talk_units("This information") == (16, [])  # the first sentence is never talk


def test_the_guard_reads_the_titles_the_model_saw() -> None:
    talk = 'It is .BAK. This can be found in the article [1] on "Saving Documents Automatically".'
    sources = [Article("auto", "Saving Documents Automatically", "", "")]
    result = SourceTalk().check(GuardInput("q", talk, sources))
    assert result.text == "It is .BAK [1]." and result.reason is not None and not result.not_found
    assert SourceTalk().check(GuardInput("q", "It is .BAK [1].", sources)).reason is None
