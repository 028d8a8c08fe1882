from __future__ import annotations

from ragidx.sentences import split_units


def test_markdown_lists_headings_and_lines_stay_apart() -> None:
    text = "# Install\n\nRun the setup. Then reboot!\n- step one\n- step two\n1. Open File\n| a | b |"
    assert [u.text for u in split_units(text)] == [
        "# Install",
        "Run the setup.",
        "Then reboot!",
        "- step one",
        "- step two",
        "1. Open File",
        "| a | b |",
    ]


def test_spans_point_into_the_source() -> None:
    text = "First one.  Second one?\nThird"
    assert all(text[u.start : u.end] == u.text for u in split_units(text))


def test_abbreviations_and_initials_do_not_split() -> None:
    units = split_units("Dr. Smith met J. R. Tolkien, e.g. at noon. Then he left.")
    assert [u.text for u in units] == ["Dr. Smith met J. R. Tolkien, e.g. at noon.", "Then he left."]


def test_russian_sentences() -> None:
    units = split_units("Откройте меню «Файл». Выберите пункт т.д. и нажмите. Готово!")
    assert [u.text for u in units][-1] == "Готово!"
    assert units[0].text == "Откройте меню «Файл»."


def test_blank_text_has_no_units() -> None:
    assert split_units("   \n\n ") == []
