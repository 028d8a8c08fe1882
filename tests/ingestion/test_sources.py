"""Article sources: JSONL and Markdown/HTML folders; bad input becomes a clear, located error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingestion.sources import MAX_ARTICLE_CHARS, SourceError, html_to_text, read_source
from ragidx.article import Article


def write_lines(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def good(i: int, **extra: object) -> bytes:
    return json.dumps({"id": f"k{i}", "title": f"T{i}", "url": f"u{i}", "text": f"text {i}", **extra}).encode()


def test_jsonl_reads_articles_with_language_and_source(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "kb.jsonl", [good(1, lang="ru", source="help")])
    [a] = list(read_source(path))
    assert a == Article("k1", "T1", "u1", "text 1", language="ru", metadata={"source": "help"})


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
    (tmp_path / "notes.txt").write_text("ignored")
    items = list(read_source(tmp_path))
    articles = {a.kb_id: a for a in items if isinstance(a, Article)}
    assert set(articles) == {"guides/tables.md", "print.html"}
    assert articles["guides/tables.md"].title == "Tables"
    assert articles["print.html"].title == "Printing"
    assert "Choose File > Print." in articles["print.html"].content
    assert "x()" not in articles["print.html"].content and "p{}" not in articles["print.html"].content
    errors = sorted(str(e) for e in items if isinstance(e, SourceError))
    assert errors[0].startswith(str(tmp_path / "bad.md")) and "not UTF-8" in errors[0]
    assert errors[1] == f"{tmp_path / 'empty.md'}: empty document, nothing to index"


def test_unsupported_or_missing_path_raises_with_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        list(read_source(tmp_path / "nope.jsonl"))
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ValueError, match=r"give a \.jsonl file, a \.md/\.html file, or a folder"):
        list(read_source(tmp_path / "x.csv"))


def test_html_to_text_keeps_blocks_apart() -> None:
    title, text = html_to_text("<title>T</title><p>one</p><p>two</p>")
    assert (title, text) == ("T", "one\n\ntwo")


def test_jsonl_metadata_object_and_extra_keys_are_the_articles_metadata(tmp_path: Path) -> None:
    line = good(1, product="writer", metadata={"version": 7.4, "product": "calc"}, allowed=["group:hr"])
    path = write_lines(tmp_path / "kb.jsonl", [line, good(2, metadata="not an object")])
    a, bad = list(read_source(path))
    assert isinstance(a, Article)
    assert a.metadata == {"version": 7.4, "product": "writer", "allowed": ["group:hr"]}  # top level wins
    assert isinstance(bad, SourceError) and bad.line == 2 and "'metadata' must be a JSON object" in bad.reason
