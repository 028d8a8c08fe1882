"""Article sources: JSONL files, documents and mixed folders; bad input becomes a clear, located error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ingestion.sources import FILE_STAMP, MAX_ARTICLE_CHARS, SourceError, read_document, read_source
from ragidx.article import SECTIONS, Article

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docs"


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def good(i: int, **extra: object) -> bytes:
    return json.dumps({"id": f"k{i}", "title": f"T{i}", "url": f"u{i}", "text": f"text {i}", **extra}).encode()


def test_jsonl_reads_articles_with_language_and_source(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "kb.jsonl", [good(1, lang="ru", source="help")])
    [a] = list(read_source(path))
    assert a == Article("k1", "T1", "u1", "text 1", language="ru", metadata={"source": "help"})


def test_a_jsonl_line_cannot_claim_to_be_a_file_read_from_disk(tmp_path: Path) -> None:
    # file_stamp is ingestion's own mark of a document it read (the dashboard serves such files): never from data
    line = good(
        1, url="file:///home/ann/private/report.pdf", file_stamp="1234:1700000000000000000", file_path="/etc/passwd"
    )
    nested = json.dumps({"id": "k2", "text": "t", "metadata": {"file_stamp": "1:2", "team": "hr"}}).encode()
    first, second = read_source(write_lines(tmp_path / "kb.jsonl", [line, nested]))
    assert isinstance(first, Article) and isinstance(second, Article)
    assert FILE_STAMP not in first.metadata and "file_path" not in first.metadata and second.metadata == {"team": "hr"}


def test_every_kind_of_bad_line_is_named_by_file_and_line_and_the_rest_is_read(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "kb.jsonl",
        [
            good(1),
            b'{"id": "broken", "text": ',  # malformed JSON
            json.dumps({"title": "no id", "text": "x"}).encode(),
            json.dumps({"id": "notext"}).encode(),
            json.dumps({"id": "empty", "text": "   \n"}).encode(),
            b'{"id": "latin1", "text": "caf\xe9"}',  # not UTF-8
            b"[1, 2]",
            json.dumps({"id": "huge", "text": "x" * (MAX_ARTICLE_CHARS + 1)}).encode(),
            good(9),
        ],
    )
    items = list(read_source(path))
    assert [a.kb_id for a in items if isinstance(a, Article)] == ["k1", "k9"]
    errors = [str(e) for e in items if isinstance(e, SourceError)]
    assert errors[0].startswith(f"{path}:2: invalid JSON")
    assert errors[1] == f"{path}:3: missing 'id'"
    assert errors[2] == f"{path}:4: article 'notext': missing 'text'"
    assert errors[3] == f"{path}:5: article 'empty': empty text, nothing to index"
    assert errors[4].startswith(f"{path}:6: not UTF-8") and "re-encode" in errors[4]
    assert errors[5] == f"{path}:7: expected a JSON object, got list"
    assert errors[6].startswith(f"{path}:8: article 'huge'") and "split it" in errors[6]


def test_one_megabyte_article_is_accepted(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "kb.jsonl", [json.dumps({"id": "big", "text": "word " * 210_000}).encode()])
    [a] = list(read_source(path))
    assert isinstance(a, Article) and len(a.content) > 1_000_000


def test_title_falls_back_to_the_first_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "kb.jsonl", [json.dumps({"id": 7, "text": "\n# Printing\nbody"}).encode()])
    [a] = list(read_source(path))
    assert (a.kb_id, a.title) == ("7", "Printing")


def test_folder_of_markdown_and_html(tmp_path: Path) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "tables.md").write_text("# Tables\n\nInsert a table with Ctrl+F12.\n")
    (tmp_path / "print.html").write_text(
        "<html><head><title>Printing</title><style>p{}</style></head>"
        "<body><h1>Print</h1><p>Choose File &gt; Print.</p><script>x()</script></body></html>"
    )
    (tmp_path / "empty.md").write_text("  \n")
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe broken")
    (tmp_path / "notes.csv").write_text("a,b")  # not a type ragidx reads: left out (and logged)
    items = list(read_source(tmp_path))
    articles = {a.kb_id: a for a in items if isinstance(a, Article)}
    assert set(articles) == {"guides/tables.md", "print.html"}
    assert articles["guides/tables.md"].metadata["folder"] == "guides"
    assert articles["guides/tables.md"].title == "Tables"
    assert articles["print.html"].title == "Printing"
    assert "Choose File > Print." in articles["print.html"].content
    assert "x()" not in articles["print.html"].content and "p{}" not in articles["print.html"].content
    errors = sorted(str(e) for e in items if isinstance(e, SourceError))
    assert errors[0].startswith(str(tmp_path / "bad.md")) and "not UTF-8" in errors[0]
    assert errors[1] == f"{tmp_path / 'empty.md'}: no text in it, nothing to index"


def test_unsupported_or_missing_path_raises_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        list(read_source(tmp_path / "nope.jsonl"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ValueError, match=r"give a \.jsonl file, a document \(\.docx, .*\.pdf.*\) or a folder"):
        list(read_source(tmp_path / "x.csv"))


def test_a_line_nested_1500_levels_deep_is_that_lines_error_and_the_rest_is_read() -> None:
    items = list(read_source(FIXTURES / "kb.jsonl"))
    assert [a.kb_id for a in items if isinstance(a, Article)] == ["kb-1", "kb-2", "kb-3"]
    [error] = [e for e in items if isinstance(e, SourceError)]
    assert str(error) == f"{FIXTURES / 'kb.jsonl'}:3: JSON nested too deeply to read: flatten this line's object"


def test_any_exception_reading_one_line_is_that_lines_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ingestion.sources as sources

    path = write_lines(tmp_path / "kb.jsonl", [good(1), good(2), good(3)])
    real = sources._article_from_record

    def crash_on_two(data: object, path: str, line_no: int) -> object:
        if line_no == 2:
            raise KeyError("boom")
        return real(data, path, line_no)

    monkeypatch.setattr(sources, "_article_from_record", crash_on_two)
    items = list(read_source(path))
    assert [a.kb_id for a in items if isinstance(a, Article)] == ["k1", "k3"]
    assert [str(e) for e in items if isinstance(e, SourceError)] == [
        f"{path}:2: could not read this line (KeyError: 'boom')"
    ]


def test_a_binary_file_named_jsonl_is_one_error_not_one_per_line() -> None:
    items = list(read_source(FIXTURES / "binary.jsonl"))
    assert len(items) == 1 and isinstance(items[0], SourceError)
    assert str(items[0]) == (
        f"{FIXTURES / 'binary.jsonl'}: binary content, not JSON lines: is it really a .jsonl file? Nothing read from it"
    )


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("encrypted.pdf", "encrypted PDF (it needs a password): save an unencrypted copy (qpdf --decrypt"),
        ("corrupt.docx", "not a readable Word .docx file (PackageNotFoundError: damaged, truncated"),
        ("empty.md", "empty file (0 bytes), nothing to index"),
    ],
)
def test_each_bad_document_is_one_error_naming_the_file_and_what_to_do(name: str, reason: str) -> None:
    item = read_document(FIXTURES / name, FIXTURES)
    assert isinstance(item, SourceError) and item.kb_id == name and item.line is None
    assert str(item).startswith(f"{FIXTURES / name}: {reason}")


def test_a_document_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "huge.txt"
    with big.open("wb") as fh:  # 200 MB, sparse: nothing is written or read
        fh.truncate(200 * 2**20)
    item = read_document(big, tmp_path, max_file_bytes=100 * 2**20)
    assert isinstance(item, SourceError)
    assert item.reason == (
        "200 MB is over the 100 MB limit for one document: split it, or raise max_file_mb (RAGIDX_MAX_FILE_MB)"
    )


def test_a_pdf_that_is_not_one_and_a_text_file_that_is_binary_are_named(tmp_path: Path) -> None:
    (tmp_path / "fake.pdf").write_text("hello")
    (tmp_path / "image.md").write_bytes((FIXTURES / "scanned.pdf").read_bytes())
    fake, image = read_document(tmp_path / "fake.pdf", tmp_path), read_document(tmp_path / "image.md", tmp_path)
    assert isinstance(fake, SourceError) and "not a PDF (its content starts b'hello')" in fake.reason
    assert isinstance(image, SourceError) and image.reason == "binary content, not text: is it really a .md file?"


def test_a_file_that_disappears_while_the_folder_is_read_is_its_error_and_the_rest_is_read(tmp_path: Path) -> None:
    for name in ("a.md", "b.md", "c.md"):
        (tmp_path / name).write_text(f"# {name}\n\nText of {name}.\n")
    items = read_source(tmp_path)
    first = next(items)
    (tmp_path / "b.md").unlink()  # gone after the folder was listed
    rest = list(items)
    assert isinstance(first, Article) and first.kb_id == "a.md"
    assert isinstance(rest[0], SourceError) and rest[0].kb_id == "b.md"
    assert rest[0].reason == "disappeared while ingesting: run again (with --prune to drop it from the index)"
    assert isinstance(rest[1], Article) and rest[1].kb_id == "c.md"


def test_mixed_folder_of_real_documents_gives_one_article_per_file_and_every_error(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "docs", ignore=shutil.ignore_patterns("*.py"))
    items = list(read_source(tmp_path / "docs"))
    articles = {a.kb_id: a for a in items if isinstance(a, Article)}
    errors = sorted(Path(e.path).name for e in items if isinstance(e, SourceError))
    assert sorted(articles) == [
        "guide.docx", "guide.html", "guide.pdf", "kb-1", "kb-2", "kb-3", "notes.md", "readme.txt", "scanned.pdf"
    ]  # fmt: skip
    assert errors == ["binary.jsonl", "corrupt.docx", "empty.md", "encrypted.pdf", "kb.jsonl"]
    assert articles["scanned.pdf"].metadata["ocr"] is True and "Ctrl+F12" in articles["scanned.pdf"].content
    pdf = articles["guide.pdf"]
    assert pdf.title == "Calc and Writer guide" and pdf.url.endswith("/docs/guide.pdf")
    assert pdf.metadata["format"] == "pdf" and pdf.metadata["folder"] == ""
    pages = {s["section"]: s["page"] for s in pdf.metadata[SECTIONS]}
    assert pages["19xx/20xx Years"] == 1 and pages["Naming Cells"] == 2 and pages["Shortcut keys"] == 4  # pypdf agrees
    for kb_id in ("guide.pdf", "guide.docx", "guide.html"):  # the same table, as rows of cells
        assert "| Ctrl+F12 | Insert table |" in articles[kb_id].content, kb_id
        assert "The default is 1930 to 2029." in articles[kb_id].content, kb_id
    anchors = {s["section"]: s.get("anchor") for s in articles["guide.html"].metadata[SECTIONS]}
    assert anchors["Naming Cells"] == "naming-cells"


def test_documents_link_to_where_they_are_published_with_base_url(tmp_path: Path) -> None:
    (tmp_path / "calc").mkdir()
    (tmp_path / "calc" / "dates and times.md").write_text("# Dates\n\nThe default is 1930 to 2029.\n")
    [a] = list(read_source(tmp_path, base_url="https://docs.example.org/help/"))
    assert (a.kb_id, a.url) == ("calc/dates and times.md", "https://docs.example.org/help/calc/dates%20and%20times.md")
    [local] = list(read_source(tmp_path))
    assert local.url == (tmp_path / "calc" / "dates and times.md").resolve().as_uri()


def test_a_document_whose_file_is_unchanged_is_not_read_again(tmp_path: Path) -> None:
    from ingestion.sources import FILE_STAMP

    page = tmp_path / "a.md"
    page.write_text("# A\n\nFirst text.\n")
    first = read_document(page, tmp_path)
    assert isinstance(first, Article) and FILE_STAMP in first.metadata
    stored = {"a.md": first.with_metadata(seen_before=True)}
    again = read_document(page, tmp_path, known=stored.get)
    assert isinstance(again, Article) and again.metadata["seen_before"] is True  # handed on as stored, not read
    page.write_text("# A\n\nSecond text, longer.\n")  # another size: read again
    second = read_document(page, tmp_path, known=stored.get)
    assert isinstance(second, Article) and "Second text" in second.content
    elsewhere = read_document(page, tmp_path, known={"a.md": second}.get, base_url="https://x/")
    assert isinstance(elsewhere, Article) and elsewhere is not second and elsewhere.url == "https://x/a.md"


def test_jsonl_metadata_object_and_extra_keys_are_the_articles_metadata(tmp_path: Path) -> None:
    line = good(1, product="writer", metadata={"version": 7.4, "product": "calc"}, allowed=["group:hr"])
    path = write_lines(tmp_path / "kb.jsonl", [line, good(2, metadata="not an object")])
    a, bad = list(read_source(path))
    assert isinstance(a, Article)
    assert a.metadata == {"version": 7.4, "product": "writer", "allowed": ["group:hr"]}  # top level wins
    assert isinstance(bad, SourceError) and bad.line == 2 and "'metadata' must be a JSON object" in bad.reason


def test_language_sample_reads_every_jsonl_file_of_a_folder_again_and_leaves_documents_out(tmp_path: Path) -> None:
    from ingestion.sources import language_sample
    from ragidx.providers.embedding_choice import choose_embed_model, sample_languages

    # make demo's folder: 424 English pages in the file read first, then 97 Russian ones.
    demo = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb"
    sample = language_sample(demo)
    assert sample is not None
    languages = sample_languages(sample)
    assert languages["ru"] >= 13 and choose_embed_model(languages, multilingual=True) == "e5-multilingual"

    (tmp_path / "a.md").write_text("# Tables\n\nInsert a table.\n", encoding="utf-8")
    assert language_sample(tmp_path) is None  # documents only: read twice would cost a second ingest
    assert language_sample(tmp_path / "a.md") is None
    write_lines(tmp_path / "b.jsonl", [good(1), good(2)])
    (tmp_path / ".hidden").mkdir()
    write_lines(tmp_path / ".hidden" / "c.jsonl", [good(3)])  # hidden: read_folder skips it, so does the sample
    again = language_sample(tmp_path)
    assert again is not None and [a.kb_id for a in again if isinstance(a, Article)] == ["k1", "k2"]
    file_again = language_sample(tmp_path / "b.jsonl")
    assert file_again is not None and len(list(file_again)) == 2


def test_a_link_to_a_file_outside_the_folder_is_reported_not_read_and_a_link_inside_is_read(tmp_path: Path) -> None:
    kb, outside = tmp_path / "kb", tmp_path / "outside"
    kb.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("The payroll of every employee.\n")
    (kb / "notes.md").write_text("# Notes\n\nPrinting labels.\n")
    (kb / "secret.txt").symlink_to(Path("..") / "outside" / "secret.txt")
    (kb / "alias.md").symlink_to("notes.md")  # inside the folder: read like the file itself
    items = list(read_source(kb))
    articles = {a.kb_id: a for a in items if isinstance(a, Article)}
    assert set(articles) == {"alias.md", "notes.md"}
    [refused] = [e for e in items if isinstance(e, SourceError)]
    assert refused.refused and refused.kb_id is None and refused.path == str(kb / "secret.txt")
    assert "a link to a file outside the folder ingested: not read" in refused.reason
    assert "payroll" not in str(refused)


def test_a_documents_stamp_holds_its_content_digest_and_only_matches_those_bytes(tmp_path: Path) -> None:
    import hashlib
    import os

    from ingestion.sources import stamp_matches

    page = tmp_path / "a.md"
    page.write_text("# A\n\nFirst text.\n")
    article = read_document(page, tmp_path)
    assert isinstance(article, Article)
    stat = page.stat()
    stamp = article.metadata[FILE_STAMP]
    assert stamp == f"{stat.st_size}:{stat.st_mtime_ns}:{hashlib.sha256(page.read_bytes()).hexdigest()}"
    assert stamp_matches(stamp, page, stat)
    page.write_text("# A\n\nOther text.\n")  # the same size, and the time put back: only the digest tells
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert page.stat().st_size == stat.st_size and not stamp_matches(stamp, page, page.stat())
    assert not stamp_matches(f"{stat.st_size}:{stat.st_mtime_ns}", page, page.stat())  # a stamp without a digest


def test_a_file_the_store_knows_keeps_its_id_whichever_folder_is_read(tmp_path: Path) -> None:
    from ingestion.sources import FILE_PATH

    (tmp_path / "billing").mkdir()
    refunds = tmp_path / "billing" / "refunds.md"
    refunds.write_text("# Refunds\n\nRefunds take five days.\n")
    [alone] = list(read_source(refunds))
    assert isinstance(alone, Article) and alone.kb_id == "refunds.md"
    assert alone.metadata[FILE_PATH] == str(refunds.resolve())
    known = {str(refunds.resolve()): "refunds.md"}
    [in_folder] = list(read_source(tmp_path, ids=lambda p: known.get(str(p))))
    assert isinstance(in_folder, Article) and in_folder.kb_id == "refunds.md"
    known = {str(refunds.resolve()): "billing/refunds.md"}
    [again] = list(read_source(refunds, ids=lambda p: known.get(str(p))))
    assert isinstance(again, Article) and again.kb_id == "billing/refunds.md"
    assert again.url == refunds.resolve().as_uri()
