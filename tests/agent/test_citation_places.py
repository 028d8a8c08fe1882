"""A citation names the section and page of the sentence it cites, over documents ingested for real.

PDF, Word, HTML and Markdown documents are written here (the PDF by ``tests.ingestion.simple_pdf``, the Word file
by python-docx), ingested into real LanceDB and article stores, and asked about through a real ``Engine`` whose
chat model is scripted: it quotes one sentence of one document with that document's ``[n]``. In each document a
decoy section repeats the question's words, so the article's best search match is there while the quoted
sentence is elsewhere: a citation placed at the best match (as it was) names the decoy's page or section.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ragidx.agent.answer import Citation
from ragidx.config import LLMEndpoint, Settings
from ragidx.engine import Engine
from tests.dashboard.fakes import ScriptedProvider, cite_sources
from tests.fakes.hash_embedding import HashEmbedding
from tests.fakes.scripted_llm import RecordedCall, ScriptedLLM, text_of
from tests.ingestion.simple_pdf import pdf, text

# question -> (the document's title, the sentence the scripted model quotes)
QUOTES = {
    "How long are backups kept?": ("Operations Guide", "Backups are kept for 35 days in the vault."),
    "Which hotel rate may travellers book?": (
        "Travel Policy",
        "Travellers may book hotel rooms up to 180 EUR a night.",
    ),
    "How many days does a refund take?": ("Billing Help", "A refund reaches the card within 9 working days."),
    "How many days off does Midsummer give?": ("Team Handbook", "Midsummer gives 2 days off."),
}
_LISTED = re.compile(r"^\[(\d+)\] (.+)$", re.MULTILINE)


def _quotes(messages: list[Any], call: RecordedCall) -> Any:
    """The scripted model: the quoted sentence of the question's document, cited by the number the answer
    prompt lists that document under."""
    if call.tools:
        return cite_sources(messages, call)
    instruction = text_of(messages[-1])
    question = instruction.rpartition("Question:")[2].strip().splitlines()[0].strip()
    title, sentence = QUOTES[question]
    listed = {name.strip(): n for n, name in _LISTED.findall(instruction.rpartition("Sources:")[2])}
    return f"{sentence[:-1]} [{listed[title]}]." if title in listed else "NOT_FOUND"


class _Quoting(ScriptedProvider):
    def get(self, endpoint: LLMEndpoint) -> ScriptedLLM:
        llm = ScriptedLLM([_quotes], cycle=True)
        llm.context_window = endpoint.context_window
        llm.num_output = endpoint.max_output_tokens
        return llm


def _lines(prefix: str, words: str, n: int) -> list[str]:
    return [f"{prefix} {i + 1}: {words}" for i in range(n)]


def _write_pdf(path: Path) -> None:
    """Three pages, one outline heading each; the answer on page 2, the decoy (backups, kept, long) on page 3."""
    overview = _lines("Overview note", "the service runs in three regions with rotating keys.", 10)
    retention = [
        *_lines("Retention note", "storage tiers and archive rules are described here.", 5),
        QUOTES["How long are backups kept?"][1],
        *_lines("Tier note", "cold storage is cheaper than warm storage.", 5),
    ]
    restoring = _lines("Restore step", "backups that are kept can be restored; long backups take long.", 10)
    pages = [
        [text(72, 720, title), *(text(72, 700 - 18 * i, line) for i, line in enumerate(lines))]
        for title, lines in (("Overview", overview), ("Retention", retention), ("Restoring", restoring))
    ]
    outline = [("Overview", 0, 730), ("Retention", 1, 730), ("Restoring", 2, 730)]
    path.write_bytes(pdf(pages, outline, "Operations Guide"))


def _write_docx(path: Path) -> None:
    """Sections Flights, Hotels (the answer), Hotel loyalty (the decoy: hotel, rate, book, travellers)."""
    import docx

    document = docx.Document()
    document.add_heading("Travel Policy", level=1)
    document.add_heading("Flights", level=2)
    for line in _lines("Flight rule", "economy class is booked through the agency portal.", 8):
        document.add_paragraph(line)
    document.add_heading("Hotels", level=2)
    for line in _lines("Stay rule", "stays are approved by the team lead first.", 4):
        document.add_paragraph(line)
    document.add_paragraph(QUOTES["Which hotel rate may travellers book?"][1])
    for line in _lines("Stay rule", "receipts are uploaded within a week.", 4):
        document.add_paragraph(line)
    document.add_heading("Hotel loyalty", level=2)
    decoy = "which hotel rate may travellers book? travellers book hotel points at the hotel rate they book."
    for line in _lines("Loyalty rule", decoy, 10):
        document.add_paragraph(line)
    document.save(str(path))


def _write_html(path: Path) -> None:
    """Sections #payments, #refunds (the answer), #refund-disputes (the decoy: refund, days, take)."""
    payments = "".join(f"<p>{line}</p>" for line in _lines("Payment note", "cards and invoices are accepted.", 8))
    refunds = "".join(
        [
            *(f"<p>{line}</p>" for line in _lines("Refund note", "a refund is asked for from the orders page.", 4)),
            f"<p>{QUOTES['How many days does a refund take?'][1]}</p>",
            *(f"<p>{line}</p>" for line in _lines("Refund note", "partial refunds are possible.", 4)),
        ]
    )
    disputes = "".join(
        f"<p>{line}</p>" for line in _lines("Dispute note", "a refund dispute can take many days; days pass.", 10)
    )
    path.write_text(
        "<html><head><title>Billing Help | Example Help Center</title></head><body><main>"
        "<h1>Billing Help</h1>"
        f'<h2 id="payments">Payments</h2>{payments}'
        f'<h2 id="refunds">Refunds</h2>{refunds}'
        f'<h2 id="refund-disputes">Refund disputes</h2>{disputes}'
        "</main></body></html>",
        encoding="utf-8",
    )


def _write_markdown(path: Path) -> None:
    """Sections Working hours, Holidays (the answer in a table cell), Days off in lieu (the decoy)."""
    hours = "\n\n".join(_lines("Hours note", "the office opens at eight and closes at five.", 8))
    table = "\n".join(
        [
            "| Holiday | Days off |",
            "| --- | --- |",
            "| New Year | 1 |",
            "| Midsummer | 2 |",
            "| Christmas | 3 |",
        ]
    )
    decoy = "\n\n".join(_lines("Lieu note", "days off in lieu give days off; many days off are given.", 10))
    path.write_text(
        f"# Team Handbook\n\n## Working hours\n\n{hours}\n\n## Holidays\n\nThe holidays of the year:\n\n{table}\n\n"
        f"## Days off in lieu\n\n{decoy}\n",
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("places")
    docs = root / "docs"
    docs.mkdir()
    _write_pdf(docs / "ops.pdf")
    _write_docx(docs / "travel.docx")
    _write_html(docs / "billing.html")
    _write_markdown(docs / "handbook.md")
    settings = Settings(data_dir=root / "data", llm=LLMEndpoint(guards="endpoint"))
    embed = HashEmbedding(dim=256, reads=frozenset({"en"}))
    with Engine(settings, embed_model=embed, llm_provider=_Quoting()) as engine:  # type: ignore[arg-type]
        report = engine.ingest(docs)
        assert (report.new, report.errors) == (4, [])
        yield engine


def _cited(engine: Engine, question: str) -> tuple[Citation, dict[str, Any]]:
    answer = engine.ask(question)
    assert answer.citation_method == "markers" and len(answer.citations) == 1, answer.text
    [citation] = answer.citations
    article = next(a for a in answer.articles if a["kb_id"] == citation.kb_id)
    return citation, article["metadata"].get("location", {})


def test_a_pdf_citation_opens_at_the_page_of_the_quoted_sentence(engine: Engine) -> None:
    citation, best_match = _cited(engine, "How long are backups kept?")
    assert best_match["page"] == 3  # the decoy page is the best search match: the sentence is on page 2
    assert citation.url.endswith("/docs/ops.pdf#page=2")  # a PDF viewer takes the page, not a text fragment
    assert citation.quote and citation.quote in engine.article_store.get([citation.kb_id])[citation.kb_id].content
    assert (citation.page, citation.section, citation.where) == (2, "Retention", "p. 2, Retention")


def test_a_word_citation_names_the_section_of_the_quoted_sentence(engine: Engine) -> None:
    citation, best_match = _cited(engine, "Which hotel rate may travellers book?")
    assert best_match["section"] == "Hotel loyalty"
    assert (citation.section, citation.where, citation.page) == ("Hotels", "Hotels", None)
    assert citation.url.endswith("/docs/travel.docx")  # Word files have no anchors to link to


def test_an_html_citation_links_to_the_anchor_of_the_quoted_sentence(engine: Engine) -> None:
    citation, best_match = _cited(engine, "How many days does a refund take?")
    assert best_match["section"] == "Refund disputes"
    # the page opens at its section, and a browser with text fragments scrolls to the sentence and highlights it
    assert citation.quote == "A refund reaches the card within 9 working days."
    assert citation.url.endswith(
        "/docs/billing.html#refunds:~:text=A%20refund%20reaches%20the%20card%20within%209%20working%20days."
    )
    assert (citation.section, citation.where) == ("Refunds", "Refunds")


def test_a_markdown_citation_of_a_table_cell_links_to_the_tables_section(engine: Engine) -> None:
    citation, best_match = _cited(engine, "How many days off does Midsummer give?")
    assert best_match["section"] == "Days off in lieu"
    assert citation.url.endswith("/docs/handbook.md#holidays")
    assert (citation.section, citation.where) == ("Holidays", "Holidays")
