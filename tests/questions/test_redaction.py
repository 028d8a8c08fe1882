"""Redaction before the question log stores text: planted e-mail addresses, phone numbers, card numbers, long
numbers and keys never survive; ordinary help-desk words, dates and versions do."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragidx.questions.redaction import Redactor, compile_patterns, luhn_valid

PLANTED = [
    ("write to ann.smith+kb@mail.example.co.uk today", "[email]"),
    ("my address is Jörg.Müller@beispiel.de", "[email]"),
    ("call (555) 123-4567", "[phone]"),
    ("call +1-415-555-2671", "[phone]"),
    ("ring 06 12 34 56 78", "[phone]"),
    ("ring +44 20 7946 0958", "[phone]"),
    ("card 4111 1111 1111 1111", "[card]"),
    ("card 5500-0000-0000-0004", "[card]"),
    ("card 378282246310005", "[card]"),
    ("card 4111 1111 1111 1112 was refused", "[number]"),  # fails Luhn: still a long number
    ("account 0123456789", "[number]"),
    ("key sk-proj-Abcdefghijklmnopqrstuvwx123", "[key]"),
    ("key sk_live_51HcZyZAbCdEfGhIj", "[key]"),
    ("key AKIAIOSFODNN7EXAMPLE", "[key]"),
    ("token ghp_16C7e42F292c6912E7710c838347Ae178B4a", "[key]"),
    ("token xoxb-123456789012-1234567890123-AbCdEfGh", "[key]"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "[key]"),
    ("hash 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "[token]"),
    ("secret QWxhZGRpbjpvcGVuIHNlc2FtZQ1234567890abcdef==", "[token]"),
]


@pytest.mark.parametrize(("text", "placeholder"), PLANTED)
def test_each_kind_of_personal_data_becomes_its_placeholder(text: str, placeholder: str) -> None:
    out = Redactor().redact(text)
    assert placeholder in out
    assert not re.search(r"\d{4}|@|sk-|AKIA|ghp_|eyJ", out), out


@pytest.mark.parametrize(
    "text",
    [
        "How do I number pages in LibreOffice Writer 7.6?",
        "What changed on 2024-01-15 in version 3.11.4?",
        "Set work_mem to 4MB and io_method to worker on 192.168.1.20",
        "Donaudampfschifffahrtsgesellschaftskapitaenswitwe reads docs/guide/configuration/settings-reference.md",
        "Room 12, floor 3, year 2024, 15.01.2024",
    ],
)
def test_ordinary_questions_are_kept_as_written(text: str) -> None:
    assert Redactor().redact(text) == text


def test_a_teams_own_patterns_are_redacted_first_and_bad_ones_refused() -> None:
    assert Redactor([r"CUST-\d{3}"]).redact("customer CUST-042 asks") == "customer [redacted] asks"
    with pytest.raises(ValueError, match=re.escape("redact pattern '(' is no regular expression")):
        compile_patterns(["("])
    with pytest.raises(ValueError, match="matches empty text"):
        compile_patterns(["x*"])


def test_what_a_question_hid_is_hidden_in_text_derived_from_it() -> None:
    r = Redactor()
    hidden = r.hidden("I am bob@example.com, card 4111 1111 1111 1111")
    assert hidden == ["bob@example.com", "4111 1111 1111 1111"]
    assert r.redact("no article found mentions example.com", hiding=hidden) == "no article found mentions [redacted]"


def test_luhn() -> None:
    assert luhn_valid("79927398713") and not luhn_valid("79927398710")


def _luhn_complete(body: str) -> str:
    return next(body + d for d in "0123456789" if luhn_valid(body + d))


_word = st.sampled_from(["how", "do", "I", "reset", "my", "password", "printer", "table", "on", "the", "?", "version"])
_user = st.from_regex(r"[a-z][a-z0-9._]{2,12}", fullmatch=True)
_domain = st.from_regex(r"[a-z]{3,10}\.(com|org|de|co\.uk)", fullmatch=True)
_email = st.builds(lambda u, d: f"{u}@{d}", _user, _domain)
_phone = st.builds(
    lambda cc, a, b, c, sep: f"+{cc}{sep}{a}{sep}{b}{sep}{c}",
    st.integers(1, 99), st.integers(100, 999), st.integers(100, 999), st.integers(1000, 9999),
    st.sampled_from([" ", "-", "."]),
)  # fmt: skip
_card = st.builds(
    lambda body, sep: sep.join(re.findall(".{1,4}", _luhn_complete(body))),
    st.from_regex(r"[3-6][0-9]{14}", fullmatch=True),
    st.sampled_from(["", " ", "-"]),
)
_key = st.one_of(
    st.from_regex(r"sk-[A-Za-z0-9]{24,40}", fullmatch=True),
    st.from_regex(r"AKIA[0-9A-Z]{16}", fullmatch=True),
    st.from_regex(r"ghp_[A-Za-z0-9]{36}", fullmatch=True),
)
_secret = st.one_of(_email, _phone, _card, _key)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_word, _secret.map(lambda s: ("secret", s))), min_size=1, max_size=12))
def test_property_no_planted_secret_survives_and_redaction_is_idempotent(parts: list[object]) -> None:
    secrets = [p[1] for p in parts if isinstance(p, tuple)]
    text = " ".join(p[1] if isinstance(p, tuple) else str(p) for p in parts)
    out = Redactor().redact(text)
    for secret in secrets:
        assert secret not in out
        digits = re.sub(r"\D", "", secret)
        if len(digits) >= 7:
            assert digits[-7:] not in re.sub(r"\D", "", out)  # nor its last seven digits, however spaced
    assert "@" not in out
    assert Redactor().redact(out) == out
