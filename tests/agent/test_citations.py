from __future__ import annotations

import dataclasses

import pytest

from ragidx.agent.citations import check_markers, resolve_citations
from ragidx.agent.guards import GuardInput
from ragidx.article import Article

SOURCES = [
    Article.from_dict(
        {"kb_id": "toc", "title": "Table of Contents", "url": "u1", "content": "Click the >> or the << button."}
    ),
    Article.from_dict(
        {"kb_id": "html", "title": "HTML export", "url": "u2", "content": "An ampersand is written &amp; in HTML."}
    ),
]


def test_invalid_markers_are_dropped_and_valid_ones_cited_in_order() -> None:
    text, cites, method = resolve_citations("See [2] and [9], then [1].", SOURCES)
    assert (text, [c.kb_id for c in cites], method) == ("See [2] and , then [1].", ["html", "toc"], "markers")


def test_a_document_citation_links_to_the_page_and_section_of_its_best_passage() -> None:
    located = Article.from_dict(
        {
            "kb_id": "guide.pdf",
            "title": "Guide",
            "url": "file:///kb/guide.pdf",
            "content": "The default is 1930 to 2029.",
            "metadata": {"location": {"section": "19xx/20xx Years", "page": 3, "url": "file:///kb/guide.pdf#page=3"}},
        }
    )
    _, [cite], _ = resolve_citations("The default is 1930 to 2029 [1].", [located])
    assert (cite.url, cite.where) == ("file:///kb/guide.pdf#page=3", "p. 3, 19xx/20xx Years")
    opening = dataclasses.replace(located, title="19xx/20xx Years")  # a section named like its document is not repeated
    _, [cite], _ = resolve_citations("The default is 1930 to 2029 [1].", [opening])
    assert cite.where == "p. 3"
    _, [plain], _ = resolve_citations("Click the >> button [1].", SOURCES)
    assert (plain.url, plain.where) == ("u1", "")


# --- markers checked against the statement they close -------------------------------------------------
PG = [
    Article.from_dict(
        {
            "kb_id": "preset",
            "title": "Preset Options",
            "url": "",
            "content": "block_size reports the size of a disk block, 8192 bytes.",
        }
    ),
    Article.from_dict(
        {
            "kb_id": "resource",
            "title": "Resource Consumption",
            "url": "",
            "content": "shared_buffers sets the memory for shared buffers. The default is 128MB.",
        }
    ),
    Article.from_dict(
        {
            "kb_id": "wal",
            "title": "Write Ahead Log",
            "url": "",
            "content": "wal_buffers is taken as WAL blocks of XLOG_BLCKSZ bytes.",
        }
    ),
]


def test_a_marker_moves_to_the_source_that_holds_the_statement() -> None:
    text, cites, method = resolve_citations(
        "The default size of shared_buffers is 128MB.\n\n[1]",
        PG,
        question="What is the default size of shared_buffers?",
    )
    assert (text, [c.kb_id for c in cites], method) == (
        "The default size of shared_buffers is 128MB.\n\n[2]",
        ["resource"],
        "markers",
    )


def test_words_the_question_uses_do_not_decide_the_source() -> None:
    # "block" and "size" are in the question and in [1]; the value the answer adds is only in [2]
    text = check_markers("The block size default is 128MB [1].", PG, question="What is the default block size?")
    assert text == "The block size default is 128MB [2]."


def test_a_marker_whose_source_holds_the_statement_stays() -> None:
    text = "shared_buffers defaults to 128MB [2]; WAL blocks are XLOG_BLCKSZ bytes [3]."
    assert check_markers(text, PG, question="shared_buffers?") == text


def test_of_several_markers_the_unsupported_one_is_dropped() -> None:
    text = check_markers("The default is 128MB [1][2].", PG, question="What is shared_buffers' default?")
    assert text == "The default is 128MB [2]."


def test_the_value_a_statement_asserts_decides_its_source() -> None:
    # Both articles discuss autovacuum_naptime in the same words; only [1] writes the value. Recorded from
    # Qwen2.5-1.5B over the PostgreSQL docs: the right answer, cited [2].
    sources = [
        Article.from_dict({"kb_id": "autovacuum", "title": "20.10. Automatic Vacuuming", "content": (
            "autovacuum_naptime (integer): Specifies the minimum delay between autovacuum runs on any given "
            "database. If this value is specified without units, it is taken as seconds. The default is one "
            "minute (1min). This parameter can only be set in the postgresql.conf file.")}),
        Article.from_dict({"kb_id": "vacuuming", "title": "25.1. Routine Vacuuming", "content": (
            "The autovacuum launcher attempts to start one worker within each database every "
            "autovacuum_naptime seconds; the parameter is set in the postgresql.conf file on a given database.")}),
    ]  # fmt: skip
    text = (
        "The autovacuum launcher waits between runs on a given database by default for one minute (1min). "
        "This can be adjusted using the autovacuum_naptime parameter in the postgresql.conf file. [2]"
    )
    question = "How long does the autovacuum launcher wait between runs on a given database by default?"
    assert check_markers(text, sources, question=question).endswith("file. [1]")
    # a value both write, or one the question already names, decides nothing
    assert (
        check_markers("It is run every autovacuum_naptime [2].", sources) == "It is run every autovacuum_naptime [2]."
    )
    asked = "Is the default 1min?"
    assert check_markers("Yes, 1min [2].", sources, question=asked) == "Yes, 1min [2]."
    # a bare digit proves nothing: most articles write one
    steps = [
        Article.from_dict({"kb_id": "a", "title": "", "content": "Step 2: open the table."}),
        Article.from_dict({"kb_id": "a", "title": "", "content": "Repeat it for the tables."}),
    ]
    assert check_markers("Repeat it for the 2 tables [2].", steps) == "Repeat it for the 2 tables [2]."
    # a list's own numbering is not a value
    steps = "1. Open postgresql.conf.\n2. Set autovacuum_naptime [2]."
    assert check_markers(steps, sources) == steps


def test_a_statement_no_source_holds_keeps_the_models_markers() -> None:
    text = "Restart the cluster afterwards [1]."
    assert check_markers(text, PG, question="How do I change it?") == text


def test_a_source_holding_half_the_best_share_is_kept() -> None:
    # shares weighted by rarity: b holds 3 of a's 4 words (0.65 of a's share), c only the common one
    sources = [
        Article.from_dict({"kb_id": "a", "title": "", "content": "alpha beta gamma delta"}),
        Article.from_dict({"kb_id": "b", "title": "", "content": "alpha beta gamma"}),
        Article.from_dict({"kb_id": "c", "title": "", "content": "alpha"}),
    ]
    assert check_markers("alpha beta gamma delta [2].", sources) == "alpha beta gamma delta [2]."
    assert check_markers("alpha beta gamma delta [3].", sources) == "alpha beta gamma delta [1]."


def test_words_about_sources_do_not_keep_a_wrong_marker() -> None:
    # "information", "found", "article" are in [1]'s text too; the statement's own words are only in [2]
    sources = [
        Article.from_dict(
            {"kb_id": "save", "title": "Saving", "content": "Information about saving is found in this article."}
        ),
        Article.from_dict(
            {"kb_id": "qr", "title": "QR codes", "content": "The High level restores 30% of the codewords."}
        ),
    ]
    text = check_markers(
        "The High level restores 30% of them. This information is found in article [1].",
        sources,
        question="What share of a QR code can be restored?",
    )
    assert text == "The High level restores 30% of them. This information is found in article [2]."


def test_markers_joined_by_and_are_checked_together() -> None:
    text = check_markers(
        "The backup copy gets the extension .BAK. This can be found in articles [1] and [2].",
        [
            Article.from_dict(
                {"kb_id": "auto", "title": "Saving Automatically", "content": "The backup copy has the extension .BAK."}
            ),
            Article.from_dict({"kb_id": "save", "title": "Saving Documents", "content": "Choose File - Save."}),
        ],
        question="What extension does the backup copy get?",
    )
    assert text == "The backup copy gets the extension .BAK. This can be found in articles [1]."


def test_a_marker_stays_when_one_sentence_of_its_statement_comes_from_its_source() -> None:
    # the first sentence is [1]'s; the second paraphrases [2] with more words, which alone would move the marker
    sources = [
        Article.from_dict(
            {"kb_id": "zero", "title": "Leading Zeros", "content": "Enter the number starting with an apostrophe."}
        ),
        Article.from_dict(
            {
                "kb_id": "convert",
                "title": "Converting Text to Numbers",
                "content": "Calc treats the string as text and attempts no numeric conversion of the entire cell.",
            }
        ),
    ]
    text = (
        "Type an apostrophe before the number. Calc then treats the entire string as text and attempts no "
        "numeric conversion [1]."
    )
    assert check_markers(text, sources, question="How do I keep a leading zero in Calc?") == text
    # without the sentence that [1] holds, the marker moves
    alone = "Calc then treats the entire string as text and attempts no numeric conversion [1]."
    moved = alone.replace("[1]", "[2]")
    assert check_markers(alone, sources, question="How do I keep a leading zero in Calc?") == moved


SIGNING = [
    Article.from_dict({"kb_id": "send", "title": "Digitally Signing Documents", "url": "u1",
     "content": "Choose File - Digital Signatures to sign a document. The signature covers the document."}),
    Article.from_dict({"kb_id": "about", "title": "About Digital Signatures", "url": "u2",
     "content": "Every file of the ODF package is signed except META-INF/documentsignatures.xml, which holds them."}),
]  # fmt: skip
SIGNING_Q = "Which file inside a signed ODF document is not itself covered by the digital signature?"


def test_a_marker_inside_a_sentence_is_checked_against_the_words_after_it() -> None:
    # the local model's own reply (LibreOffice en): the marker before the value, all words before it the question's
    text = "The file not covered by the digital signature is [1] META-INF/documentsignatures.xml."
    assert check_markers(text, SIGNING, question=SIGNING_Q) == text.replace("[1]", "[2]")
    # a marker that closes its sentence is checked against that sentence only, not the next one
    text = "Choose File - Digital Signatures [1]. It is META-INF/documentsignatures.xml [2]."
    assert check_markers(text, SIGNING, question=SIGNING_Q) == text
    # a marker at the start of a sentence stands for the rest of it
    text = "According to [1], every file is signed except META-INF/documentsignatures.xml."
    assert check_markers(text, SIGNING, question=SIGNING_Q) == text.replace("[1]", "[2]")


# --- the place a citation points at: the section and page of the sentence it cites ---------------------
MANUAL = Article.from_dict(
    {
        "kb_id": "ops.pdf",
        "title": "Operations Guide",
        "url": "file:///kb/ops.pdf",
        "content": (
            "Overview\nThe service runs in three regions.\n\n"
            "Retention\nArchives move to cold storage. Backups are kept for 35 days in the vault.\n\n"
            "Restoring\nBackups that are kept can be restored; long backups take long."
        ),
        "metadata": {
            "sections": [
                {"start": 0, "section": "Overview", "heading_path": ["Overview"], "page": 1},
                {"start": 45, "section": "Retention", "heading_path": ["Retention"], "page": 2},
                {"start": 130, "section": "Restoring", "heading_path": ["Restoring"], "page": 3},
            ],
            # the article's best search match: the page that repeats the question's words
            "location": {"section": "Restoring", "page": 3, "url": "file:///kb/ops.pdf#page=3"},
        },
    }
)


def test_a_citation_points_at_the_section_and_page_of_the_sentence_it_cites() -> None:
    assert MANUAL.content[45:54] == "Retention" and MANUAL.content[130:139] == "Restoring"
    _, [cite], _ = resolve_citations(
        "Backups are kept for 35 days [1].", [MANUAL], question="How long are backups kept?"
    )
    assert (cite.url, cite.where, cite.section, cite.page) == (
        "file:///kb/ops.pdf#page=2",
        "p. 2, Retention",
        "Retention",
        2,
    )
    # a marker before the sentence, and a reply without markers, find the same sentence
    _, [cite], _ = resolve_citations("According to [1], backups are kept for 35 days.", [MANUAL])
    assert cite.url == "file:///kb/ops.pdf#page=2"
    _, [cite], method = resolve_citations("Backups are kept for 35 days in the vault.", [MANUAL])
    assert (method, cite.url) == ("overlap", "file:///kb/ops.pdf#page=2")


def test_an_anchor_links_to_the_section_of_the_cited_table_row() -> None:
    page = Article.from_dict(
        {
            "kb_id": "handbook.md",
            "title": "Handbook",
            "url": "https://docs/handbook.html",
            "content": "# Handbook\n\n## Hours\n\nOpen at eight.\n\n## Holidays\n\n"
            "| Holiday | Days off |\n| --- | --- |\n"
            "| Midsummer | 2 |",
            "metadata": {
                "sections": [
                    {"start": 0, "section": "Handbook", "heading_path": ["Handbook"], "anchor": "handbook"},
                    {"start": 12, "section": "Hours", "heading_path": ["Handbook", "Hours"], "anchor": "hours"},
                    {
                        "start": 38,
                        "section": "Holidays",
                        "heading_path": ["Handbook", "Holidays"],
                        "anchor": "holidays",
                    },
                ]
            },
        }
    )
    _, [cite], _ = resolve_citations("Midsummer gives 2 days off [1].", [page])
    assert (cite.url, cite.where, cite.page) == ("https://docs/handbook.html#holidays", "Holidays", None)


def test_a_source_whose_text_is_not_the_stored_articles_keeps_its_best_matchs_place() -> None:
    # the budget compressed it: the offsets of its sections no longer hold in its text
    compressed = MANUAL.with_metadata(compressed=True)
    _, [cite], _ = resolve_citations("Backups are kept for 35 days [1].", [compressed])
    assert (cite.url, cite.where) == ("file:///kb/ops.pdf#page=3", "p. 3, Restoring")
    # a statement no sentence of the source holds keeps it too
    _, [cite], _ = resolve_citations("Call the support line [1].", [MANUAL])
    assert cite.url == "file:///kb/ops.pdf#page=3"


def test_articles_as_dicts_are_still_read_with_a_deprecation_warning() -> None:
    as_dicts = [a.to_dict() for a in SOURCES]
    with pytest.warns(DeprecationWarning, match="pass ragidx.Article objects"):
        text, cites, method = resolve_citations("See [2], then [1].", as_dicts)
    assert (text, [c.kb_id for c in cites], method) == ("See [2], then [1].", ["html", "toc"], "markers")
    with pytest.warns(DeprecationWarning):
        inp = GuardInput("q", "Use Table [1].", as_dicts)
    assert inp.sources == tuple(SOURCES)


def test_a_quote_is_the_articles_own_words_never_a_models_summary() -> None:
    text = "Backups run nightly. They are kept for 35 days in the vault."
    whole = Article("ops", "Operations", "https://x/ops.html", text)
    extracted = whole.with_metadata(compressed=True, compressed_verbatim=True)
    summarized = dataclasses.replace(
        whole, content="Backups are nightly and are kept 35 days.", metadata={"compressed": True}
    ).with_metadata(compressed_verbatim=False)
    for shown, quoted in ((whole, True), (extracted, True), (summarized, False)):
        _, [cite], _ = resolve_citations("Backups are kept for 35 days [1].", [shown])
        assert bool(cite.quote) is quoted, shown.metadata
        assert (":~:text=" in cite.url) is quoted
        if quoted:
            assert cite.quote in text
