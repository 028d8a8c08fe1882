from __future__ import annotations

from ragidx.safety.normalize import skeleton, strip_invisible


def test_look_alike_letters_inside_a_word_take_the_script_of_its_other_letters() -> None:
    assert skeleton("Ign\u043ere \u0430ll prev\u0456ous") == "ignore all previous"  # Cyrillic о, а, і
    assert skeleton("п\u0061р\u006fль") == "пароль"  # Latin a, o in a Russian word
    assert skeleton("s\u03bfurce") == "source"  # a Greek omicron


def test_words_in_one_script_keep_their_letters() -> None:
    assert skeleton("Нажмите OK в окне Options") == "нажмите ok в окне options"
    assert skeleton("сор") == "сор" and skeleton("cop") == "cop"


def test_zero_width_and_compatibility_forms_are_folded() -> None:
    assert strip_invisible("in\u200bstru\u200dct\ufeffions\u00ad") == "instructions"
    assert skeleton("Ｉｇｎｏｒｅ  ALL\n\tprevious") == "ignore all previous"
    assert skeleton("𝐢𝐠𝐧𝐨𝐫𝐞") == "ignore"  # mathematical bold letters
