"""Values and names a reply states that no article shown writes."""

from __future__ import annotations

from ragidx.agent.guards.base import GuardInput
from ragidx.agent.guards.ungrounded import (
    UngroundedNames,
    UngroundedNumbers,
    UngroundedShortcuts,
    ungrounded_names,
    ungrounded_numbers,
    ungrounded_shortcuts,
)
from ragidx.article import Article


def test_a_shortcut_written_with_another_platforms_key_names_is_grounded() -> None:
    # LibreOffice's help merges the platforms: "CommandCtrl", "OptionAlt"
    sources = [
        Article.from_dict(
            {
                "kb_id": "a",
                "title": "Shortcuts",
                "content": "Press CommandCtrl+OptionAlt+Shift+V to paste unformatted text.",
            }
        )
    ]
    for said in ("Ctrl+Alt+Shift+V", "Command + Option + Shift + V", "cmd+alt+shift+v"):
        assert ungrounded_shortcuts(f"Press {said} [1].", sources) == []
    assert ungrounded_shortcuts("Press Ctrl+Alt+V [1].", sources) == ["Ctrl+Alt+V"]
    # one shortcut the articles write is enough to trust the answer, as with numbers
    assert ungrounded_shortcuts("Press Ctrl+Alt+V, or Ctrl+Alt+Shift+V [1].", sources) == []


def test_where_the_model_says_it_read_something_is_not_a_number_it_states() -> None:
    logging = [
        Article.from_dict(
            {
                "kb_id": "a",
                "title": "Error Reporting and Logging",
                "content": "log_min_messages: the default is WARNING.",
            }
        )
    ]
    # the local model's reply to a PostgreSQL question: right, with a made-up locator
    reply = "The default message level for log_min_messages is WARNING. This can be found in article [2] at line 108."
    assert ungrounded_numbers(reply, logging) == []
    assert ungrounded_numbers("Это указано в статье [1] на странице 6: WARNING.", logging) == []
    # a value beside a locator is still a value; a page the answer itself names is one too
    assert ungrounded_numbers("The limit is 65,536 rows, see article [1] on page 4.", logging) == ["65536"]
    assert ungrounded_numbers("Start the numbering at page 2 [1].", logging) == ["2"]


def test_each_guard_sets_the_reply_aside_with_what_it_states() -> None:
    sources = [
        Article.from_dict(
            {
                "kb_id": "a",
                "title": "Sharing",
                "content": "Share a document with Tools - Share Document. It holds 10 users.",
            }
        )
    ]
    cases = [
        (UngroundedNumbers(), "It holds 65,536 rows [1].", "65536"),
        (UngroundedShortcuts(), "Press Command + Option + V [1].", "Command + Option + V"),
        (UngroundedNames(), "Use Google Sheets, or try Microsoft Excel [1].", "Google Sheets, Microsoft Excel"),
    ]
    for guard, reply, stated in cases:
        result = guard.check(GuardInput("How do I share it?", reply, sources))
        assert result.not_found and result.text == reply
        assert result.reason == f"the model's reply states {stated}, which no article shown writes"
        grounded = guard.check(
            GuardInput("How do I share it?", "Choose Tools - Share Document; 10 users [1].", sources)
        )
        assert grounded.reason is None and not grounded.not_found


def test_one_name_the_articles_do_not_write_is_not_enough() -> None:
    sources = [Article.from_dict({"kb_id": "a", "content": "Choose Data - Filter."})]
    assert ungrounded_names("Unlike in Excel, choose Data - Filter.", sources) == []
    assert ungrounded_names("Unlike MySQL or Oracle, choose Data - Filter.", sources) == ["MySQL", "Oracle"]
