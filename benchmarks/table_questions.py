"""Questions whose answers are table cells, over Word, PDF, HTML and Markdown documents: does retrieval bring the
answer's row back whole, every cell in its column, and filed under the table's section? One JSON line.

    python benchmarks/table_questions.py                          # the code of this checkout
    PYTHONPATH=/tmp/before python benchmarks/table_questions.py   # another checkout's code (a git worktree)
    python benchmarks/table_questions.py --build benchmarks/fixtures/table_docs   # write the documents again

The documents (``benchmarks/fixtures/table_docs``: 10 files, written by ``--build`` with python-docx and the PDF
writer of ``tests/ingestion/simple_pdf.py``) hold what broke tables in the readers: equal neighbouring cells
("Agent, yes, no, no"), a Word cell merged across columns, a Word heading in a house style based on Heading 2, an
HTML cell spanning rows, a Markdown setext heading over a table, a PDF outline heading written with its section
number, and HTML page chrome around the article. Each is read by the readers of the code on ``sys.path`` (the
checkout's own, or the one ``PYTHONPATH`` names first), ingested into a fresh LanceDB chunk store with a
deterministic hashed bag-of-words embedding (``tests/fakes/hash_embedding.py``: no model runs) and searched
hybrid (dense + BM25, the store's own fusion), ``--top-k`` chunks per question. Per question:

- ``cell_at_1``: the top article's best chunk (the first chunk) holds the answer cell: a Markdown row whose first
  cell is the row's key and whose cell in the asked column (by the header's position) is the expected value;
- ``cell_at_k``: one of the top-k chunks holds it;
- ``row_at_k``: one of the top-k chunks holds the whole expected row, every cell;
- ``section_at_k``: the best-ranked chunk holding the answer cell is filed under the table's section
  (its ``section``, which a citation of that chunk names);
- ``spanned_at_k``: that chunk names the table's section among those it spans (``section`` or
  ``spanned_sections``; code without ``spanned_sections`` counts its ``section`` only).

Figures are shares of the questions (``questions``), with the code's commit and the readers' file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: another checkout's code named there comes first

FIXTURES = ROOT / "benchmarks" / "fixtures" / "table_docs"


@dataclass(frozen=True)
class Question:
    """A question whose answer is one cell: the row ``key``'s cell in ``column`` of the table in ``section``."""

    text: str
    file: str
    section: str
    header: tuple[str, ...]
    row: tuple[str, ...]
    column: str

    @property
    def value(self) -> str:
        return self.row[self.header.index(self.column)]


ROLES = ("Role", "Export reports", "Import data", "Delete users")
PLANS = ("Plan", "Storage", "Seats", "Support")
TIERS = ("Tier", "Copies", "Regions", "Encrypted")
QUESTIONS = [
    Question("Can an Agent delete users?", "roles.docx", "Permissions", ROLES, ("Agent", "yes", "no", "no"),
             "Delete users"),
    Question("Can a Supervisor import data?", "roles.docx", "Permissions", ROLES,
             ("Supervisor", "yes", "yes", "no"), "Import data"),
    Question("How many seats does the Team plan include?", "plans.docx", "Plan limits", PLANS,
             ("Team", "100 GB", "10", "Email"), "Seats"),
    Question("What support does the Starter plan get?", "plans.docx", "Plan limits", PLANS,
             ("Starter", "10 GB", "", "Forum"), "Support"),
    Question("How long is an invoice kept?", "retention.docx", "Records kept", ("Record", "Kept for", "Owner"),
             ("Invoice", "7 years", "Finance"), "Kept for"),
    Question("Which port does the SMTP relay listen on?", "ports.html", "Mail ports", ("Service", "Port", "TLS"),
             ("SMTP relay", "587", "yes"), "Port"),
    Question("Who is on call for the database on Tuesday?", "oncall.html", "Rota",
             ("Day", "Database", "Network", "Storage"), ("Tuesday", "Dana", "Lee", "Lee"), "Database"),
    Question("Who covers storage on Monday?", "oncall.html", "Rota", ("Day", "Database", "Network", "Storage"),
             ("Monday", "Dana", "Kim", "Kim"), "Storage"),
    Question("Which shortcut inserts a table?", "shortcuts.html", "Table keys", ("Keys", "Action"),
             ("Ctrl+F12", "Insert table"), "Action"),
    Question("How many days off does Midsummer give?", "holidays.md", "Holidays", ("Holiday", "Days off", "Paid"),
             ("Midsummer", "2", "yes"), "Days off"),
    Question("Is the Christmas holiday paid?", "holidays.md", "Holidays", ("Holiday", "Days off", "Paid"),
             ("Christmas", "3", "yes"), "Paid"),
    Question("What is the timeout of the export job?", "jobs.md", "Job limits", ("Job", "Timeout", "Retries"),
             ("Export", "30 min", "3"), "Timeout"),
    Question("In how many regions does the Archive tier keep copies?", "tiers.pdf", "Storage tiers", TIERS,
             ("Archive", "2", "2", "yes"), "Regions"),
    Question("How many copies does the Hot tier keep?", "tiers.pdf", "Storage tiers", TIERS,
             ("Hot", "3", "3", "yes"), "Copies"),
    Question("Is the Guest role allowed to comment?", "access.pdf", "Permissions", ("Role", "View", "Comment", "Edit"),
             ("Guest", "yes", "no", "no"), "Comment"),
]  # fmt: skip


# --- reading the figures ---------------------------------------------------------------------------------------
def _cells(line: str) -> list[str] | None:
    """The cells of a Markdown table row (``| a | b |``), or None for another line."""
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")) or len(line) < 2:
        return None
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line[1:-1])]


def holds_cell(text: str, q: Question) -> bool:
    """A row of ``text`` whose first cell is the question's key has the expected value in the asked column."""
    at = q.header.index(q.column)
    return any(
        cells is not None and cells[0] == q.row[0] and len(cells) > at and cells[at] == q.value
        for cells in map(_cells, text.splitlines())
    )


def holds_row(text: str, q: Question) -> bool:
    return any(_cells(line) == list(q.row) for line in text.splitlines())


def run(top_k: int) -> dict[str, Any]:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    import ingestion.readers as readers
    from ingestion.pipeline import Ingestor
    from ingestion.sources import read_source
    from ragidx.stores.article_store import ArticleStore
    from ragidx.stores.lancedb_store import LanceDBChunkStore
    from tests.fakes.hash_embedding import HashEmbedding

    embed = HashEmbedding(dim=256)
    per_question = []
    with tempfile.TemporaryDirectory() as tmp:
        store = LanceDBChunkStore(uri=Path(tmp) / "lancedb")
        ingestor = Ingestor(store, ArticleStore(Path(tmp) / "articles.sqlite"), embed)
        report = ingestor.ingest(read_source(FIXTURES), source="table_docs")
        for q in QUESTIONS:
            query = VectorStoreQuery(
                query_embedding=embed.get_query_embedding(q.text),
                query_str=q.text,
                similarity_top_k=top_k,
                mode=VectorStoreQueryMode.HYBRID,
            )
            chunks = store.query(query).nodes or []
            texts = [c.get_content() for c in chunks]
            holding = [c for c, t in zip(chunks, texts, strict=True) if holds_cell(t, q)]
            per_question.append(
                {
                    "question": q.text,
                    "file": q.file,
                    "top_file": chunks[0].metadata.get("kb_id") if chunks else None,
                    "cell_at_1": bool(texts) and holds_cell(texts[0], q),
                    "cell_at_k": bool(holding),
                    "row_at_k": any(holds_row(t, q) for t in texts),
                    "section_at_k": bool(holding) and holding[0].metadata.get("section") == q.section,
                    "spanned_at_k": bool(holding)
                    and q.section
                    in [holding[0].metadata.get("section"), *holding[0].metadata.get("spanned_sections", [])],
                    "answer_chunk_section": holding[0].metadata.get("section") if holding else None,
                }
            )
    n = len(per_question)
    figures = {
        key: round(sum(bool(r[key]) for r in per_question) / n, 3)
        for key in ("cell_at_1", "cell_at_k", "row_at_k", "section_at_k", "spanned_at_k")
    }
    return {
        "benchmark": "table_questions",
        "code": _commit(Path(readers.__file__).resolve().parents[1]),
        "readers": str(Path(readers.__file__).resolve()),
        "documents": report.seen,
        "chunks": report.chunks_written,
        "ingest_errors": report.errors,
        "questions": n,
        "top_k": top_k,
        **figures,
        "misses": [
            {k: r[k] for k in ("question", "top_file", "cell_at_1", "cell_at_k", "row_at_k", "answer_chunk_section")}
            for r in per_question
            if not (r["cell_at_1"] and r["row_at_k"] and r["section_at_k"])
        ],
    }


def _commit(code: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return ""
    dirty = subprocess.run(["git", "-C", str(code), "status", "--porcelain", "ingestion"], capture_output=True)
    return out.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


# --- the documents ---------------------------------------------------------------------------------------------
FILLER = (
    "This page is part of the operations handbook. It is reviewed every quarter by the owners named in it, and "
    "changes are announced in the team channel before they take effect. Questions about it go to the service desk, "
    "which answers within one working day and keeps a record of each answer. Older versions of the page stay in "
    "the archive for a year, so that a decision can be traced back to the text it was taken under. Where the page "
    "and a contract disagree, the contract applies, and the owners correct the page within a week. Translations are "
    "made after the English text is approved, and each one names the version it was made from."
)
"""About 120 words around each table, as help pages have: a document is several chunks, not one."""


def build(folder: Path) -> None:
    """Write the 10 documents the questions ask about into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _docx_roles(folder / "roles.docx")
    _docx_plans(folder / "plans.docx")
    _docx_retention(folder / "retention.docx")
    _html(folder / "ports.html", "Mail Server Settings", [
        ("intro", "Overview", f"<p>{FILLER}</p><p>Mail flows through the relay to the mailbox servers.</p>"),
        ("ports", "Mail ports", _html_table(("Service", "Port", "TLS"), [
            ("SMTP relay", "587", "yes"), ("IMAP", "143", "yes"), ("POP3", "110", "yes"), ("Webmail", "443", "yes"),
        ])),
        ("limits", "Message limits", f"<p>Messages up to 25 MB are accepted. Larger files go through links.</p>"
                                     f"<p>{FILLER}</p>"),
    ])  # fmt: skip
    _html(folder / "oncall.html", "On-call Rota", [
        ("about", "About the rota", f"<p>{FILLER}</p><p>Swaps are agreed with the team lead.</p>"),
        ("rota", "Rota", "<table><tr><th>Day</th><th>Database</th><th>Network</th><th>Storage</th></tr>"
                         "<tr><td>Monday</td><td rowspan=\"2\">Dana</td><td>Kim</td><td>Kim</td></tr>"
                         "<tr><td>Tuesday</td><td>Lee</td><td>Lee</td></tr>"
                         "<tr><td>Wednesday</td><td>Sam</td><td>Kim</td><td>Sam</td></tr></table>"),
        ("escalation", "Escalation", f"<p>Page the duty manager after 30 minutes.</p><p>{FILLER}</p>"),
    ])  # fmt: skip
    _html(folder / "shortcuts.html", "Writer Shortcuts", [
        ("text", "Text keys", _html_table(("Keys", "Action"), [("Ctrl+B", "Bold"), ("Ctrl+I", "Italic")])),
        ("table-keys", "Table keys", _html_table(("Keys", "Action"), [
            ("Ctrl+F12", "Insert table"), ("Ctrl+Shift+T", "Select table"), ("Alt+Enter", "Insert paragraph"),
        ])),
    ], chrome=True)  # fmt: skip
    (folder / "holidays.md").write_text(
        "Team Handbook\n=============\n\nWorking hours\n-------------\n\n"
        f"{FILLER}\n\nThe office opens at eight and closes at five.\n\n"
        "Holidays\n--------\n\n| Holiday | Days off | Paid |\n| --- | --- | --- |\n| New Year | 1 | yes |\n"
        "| Easter | 2 | yes |\n| Midsummer | 2 | yes |\n| Christmas | 3 | yes |\n\n"
        f"Days off in lieu\n----------------\n\nA day worked on a holiday gives a day off in lieu. {FILLER}\n",
        encoding="utf-8",
    )
    (folder / "jobs.md").write_text(
        f"# Batch Jobs\n\n## Scheduling\n\nJobs run at night in the order below. {FILLER}\n\n"
        "## Job limits\n\n| Job | Timeout | Retries |\n| --- | --- | --- |\n| Import | 30 min | 3 |\n"
        "| Export | 30 min | 3 |\n| Cleanup | 10 min | 1 |\n\n## Failures\n\nA job that fails every retry opens "
        f"a ticket for its owner. {FILLER}\n",
        encoding="utf-8",
    )
    _pdf_tiers(folder / "tiers.pdf")
    _pdf_access(folder / "access.pdf")


def _docx_roles(path: Path) -> None:
    import docx
    from docx.enum.style import WD_STYLE_TYPE

    document = docx.Document()
    house = document.styles.add_style("Policy Heading", WD_STYLE_TYPE.PARAGRAPH)
    house.base_style = document.styles["Heading 2"]
    document.add_heading("Reporting Roles", level=1)
    document.add_heading("Roles", level=2)
    document.add_paragraph(f"Every account has one role. {FILLER}")
    document.add_paragraph("Permissions", style="Policy Heading")
    _docx_table(document, [ROLES, ("Agent", "yes", "no", "no"), ("Supervisor", "yes", "yes", "no"),
                           ("Admin", "yes", "yes", "yes")])  # fmt: skip
    document.add_heading("Changing a role", level=2)
    document.add_paragraph(f"An Admin changes roles in Settings. {FILLER}")
    document.save(str(path))


def _docx_plans(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Subscription Plans", level=1)
    document.add_heading("Choosing a plan", level=2)
    document.add_paragraph(f"Plans differ in storage, seats and support. {FILLER}")
    document.add_heading("Plan limits", level=2)
    table = _docx_table(document, [PLANS, ("Starter", "10 GB", "", "Forum"), ("Team", "100 GB", "10", "Email"),
                                   ("Business", "1 TB", "50", "Phone")])  # fmt: skip
    table.cell(1, 1).merge(table.cell(1, 2))  # Starter's storage spans the seats column: no seats of its own
    table.cell(1, 1).text = "10 GB"
    document.add_heading("Upgrading", level=2)
    document.add_paragraph(f"An upgrade takes effect at once; a downgrade at the end of the month. {FILLER}")
    document.save(str(path))


def _docx_retention(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Record Retention", level=1)
    document.add_heading("Why records are kept", level=2)
    document.add_paragraph(f"The law sets how long records are kept. {FILLER}")
    document.add_heading("Records kept", level=2)
    _docx_table(document, [("Record", "Kept for", "Owner"), ("Invoice", "7 years", "Finance"),
                           ("Payslip", "7 years", "Finance"), ("Contract", "10 years", "Legal")])  # fmt: skip
    document.add_heading("Deleting records", level=2)
    document.add_paragraph(f"Records past their time are deleted in January. {FILLER}")
    document.save(str(path))


def _docx_table(document: Any, rows: list[tuple[str, ...]]) -> Any:
    table = document.add_table(rows=len(rows), cols=len(rows[0]))
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    return table


def _html_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _html(path: Path, title: str, sections: list[tuple[str, str, str]], chrome: bool = False) -> None:
    body = "".join(f'<h2 id="{anchor}">{heading}</h2>{html}' for anchor, heading, html in sections)
    page = f"<main><h1>{title}</h1>{body}</main>"
    if chrome:
        page = (
            '<header><a href="/">Help Center</a><nav><a href="/a">Tables</a> <a href="/b">Printing</a></nav></header>'
            '<div class="cookie-banner">We use cookies. <button>Accept</button></div>'
            f'{page}<div class="article-votes">Was this article helpful? <button>Yes</button><button>No</button>'
            "</div><footer>Copyright Example Inc.</footer>"
        )
    text = f"<html><head><title>{title} | Example Help Center</title></head><body>{page}</body></html>"
    path.write_text(text, encoding="utf-8")


def _pdf_pages(blocks: list[list[str]]) -> list[list[str]]:
    from tests.ingestion.simple_pdf import text

    return [[text(72, 720 - 18 * i, line) for i, line in enumerate(lines)] for lines in blocks]


def _pdf_tiers(path: Path) -> None:
    from tests.ingestion.simple_pdf import pdf, ruled_table, text

    page1 = _pdf_pages([["Storage Guide", "1 Overview", *_wrap(FILLER), "Data is copied to more than one region."]])[0]
    rows = [TIERS, ("Hot", "3", "3", "yes"), ("Cool", "2", "1", "yes"), ("Archive", "2", "2", "yes")]
    page2 = [text(72, 720, "2 Storage tiers"), text(72, 700, "Each tier keeps its copies as below."),
             *ruled_table(72, 680, rows, [120, 80, 80, 90])]  # fmt: skip
    outline = [("Overview", 0, 740), ("Storage tiers", 1, 740)]
    path.write_bytes(pdf([page1, page2], outline, "Storage Guide"))


def _pdf_access(path: Path) -> None:
    """Page 2: the Permissions heading (numbered on the page, not in the outline), its table, then the Links
    heading: a reader that misses numbered headings files the table under Links."""
    from tests.ingestion.simple_pdf import pdf, ruled_table, text

    rows = [("Role", "View", "Comment", "Edit"), ("Owner", "yes", "yes", "yes"), ("Editor", "yes", "yes", "no"),
            ("Guest", "yes", "no", "no")]  # fmt: skip
    page1 = [text(72, 720, "2.1 Sharing"), *(text(72, 700 - 18 * i, line) for i, line in enumerate(_wrap(FILLER)))]
    links = _wrap("A link gives the Guest role. " + FILLER)
    page2 = [text(72, 720, "2.2 Permissions"), text(72, 700, "Each person has one role on a shared document."),
             *ruled_table(72, 680, rows, [120, 80, 80, 80]), text(72, 560, "2.3 Links"),
             *(text(72, 540 - 18 * i, line) for i, line in enumerate(links))]  # fmt: skip
    outline = [("Sharing", 0, 740), ("Permissions", 1, 740), ("Links", 1, 570)]
    path.write_bytes(pdf([page1, page2], outline, "Sharing Documents"))


def _wrap(text: str, width: int = 80) -> list[str]:
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return [*lines, line] if line else lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top-k", type=int, default=5, help="chunks retrieved per question")
    parser.add_argument("--build", type=Path, help="write the documents into this folder and stop")
    args = parser.parse_args(argv)
    if args.build is not None:
        build(args.build)
        print(json.dumps({"built": sorted(p.name for p in args.build.iterdir())}))
        return
    print(json.dumps(run(args.top_k), ensure_ascii=False))


if __name__ == "__main__":
    main()
