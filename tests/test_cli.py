"""The CLI as a user runs it: ingest, search, stats, delete, and clear messages on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragidx.cli import main


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory: pytest.TempPathFactory, writer_kb_file: str) -> Path:
    data = tmp_path_factory.mktemp("cli-kb")
    assert main(["--data-dir", str(data), "ingest", writer_kb_file, "--quiet"]) == 0
    return data


@pytest.mark.slow
def test_ingest_then_search_finds_the_right_article(kb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["--data-dir", str(kb_dir), "search", "how to create a table of contents", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert "Creating a Table of Contents" in [r["title"] for r in rows[:3]]
    assert [r["article_rank"] for r in rows] == list(range(len(rows)))
    assert rows[0]["normalized_rank"] == 0.0 and all(r["url"].startswith("https://help.libreoffice.org") for r in rows)
    assert main(["--data-dir", str(kb_dir), "search", "print several pages on one sheet"]) == 0
    text = capsys.readouterr().out
    assert " 1. [" in text and "Printing Multiple Pages on One Sheet" in text


@pytest.mark.slow
def test_search_flash_with_a_dead_endpoint_falls_back_to_the_chain(
    kb_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGIDX_LLM__API_BASE", "http://127.0.0.1:9/v1")  # nothing listens there
    query = ["--data-dir", str(kb_dir), "search", "how to create a table of contents", "--json"]
    capsys.readouterr()
    assert main(query) == 0
    chain = json.loads(capsys.readouterr().out)

    assert main([*query, "--flash"]) == 0

    rows = json.loads(capsys.readouterr().out)
    assert [r["kb_id"] for r in rows] == [r["kb_id"] for r in chain]  # the ladder's upstream top k
    assert {r["flash_decision"] for r in rows} == {"api_error"}


@pytest.mark.slow
def test_reingest_is_free_and_stats_and_delete_work(
    kb_dir: Path, writer_kb_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["--data-dir", str(kb_dir), "ingest", writer_kb_file, "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["new"], report["unchanged"], report["chunks_written"]) == (0, 26, 0)
    assert main(["--data-dir", str(kb_dir), "stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["articles"] == 26 and stats["pending"] == 0 and stats["chunks"] > 26


@pytest.mark.slow
def test_bad_lines_are_listed_and_the_rest_ingested(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(
        b'{"id": "ok1", "title": "Margins", "text": "Set page margins with Format > Page Style."}\n'
        b'{"id": "broken", "text": \n'
        b'{"id": "nul", "text": "caf\xe9"}\n'
        b'{"id": "ok2", "title": "Columns", "text": "Use Format > Columns to set text columns."}\n'
    )
    assert main(["--data-dir", str(tmp_path / "d"), "ingest", str(bad), "--quiet"]) == 3  # some lines failed
    out, err = capsys.readouterr()
    assert json.loads(out)["new"] == 2
    assert f"skipped {bad}:2: invalid JSON" in err and f"skipped {bad}:3: not UTF-8" in err


def test_a_skipped_files_name_cannot_drive_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "ok.md").write_text("# Margins\n\nSet page margins with Format > Page Style.\n", encoding="utf-8")
    (folder / "evil\x1b[2J.md").write_bytes(b"")  # a zero-byte file: skipped, its name printed
    assert main(["--data-dir", str(tmp_path / "d"), "ingest", str(folder), "--quiet"]) == 3
    err = capsys.readouterr().err
    [line] = [line for line in err.splitlines() if line.startswith("skipped ")]
    assert "\x1b" not in line and "evil" in line and "[2J.md" in line


def test_missing_path_and_empty_kb_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", str(tmp_path), "ingest", str(tmp_path / "nope.jsonl")]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "search", "anything"]) == 2
    assert "run `ragidx ingest PATH` first" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path), "ask", "anything"]) == 2


@pytest.fixture
def scripted_kb(
    tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """The Writer articles ingested; the CLI's engine is real but for its chat model, which is scripted
    (it cites the first two sources it is shown)."""
    from tests.dashboard.fakes import make_engine

    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    data = str(tmp_path / "kb")
    assert main(["--data-dir", data, "ingest", writer_kb_file, "--quiet"]) == 0
    capsys.readouterr()
    return data


def test_ask_streams_what_it_does_then_the_answer_then_its_sources(
    scripted_kb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    question = "How do I create a table of contents?"
    assert main(["--data-dir", scripted_kb, "ask", question]) == 0

    out, err = capsys.readouterr()
    progress = err.splitlines()
    # the local default searches the question itself at once (no planning call: plan_searches="never")
    assert progress[0].startswith(f'· searched "{question}": ') and "Creating a Table of Contents" in progress[0]
    assert progress[-1].startswith("· answering from ") and progress[-1].endswith("prompt tokens for the model to read")
    assert "from 0 articles" not in progress[-1]  # a prompt the budget did not have to compress shows them too
    text, _, sources = out.partition("\nSources:\n")
    assert "[1]" in text and "[2]" in text
    assert sources.startswith("[1] ") and "\n[2] " in sources and "https://help.libreoffice.org" in sources

    assert main(["--data-dir", scripted_kb, "ask", question, "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "\nSources:\n[1] " in out

    assert main(["--data-dir", scripted_kb, "ask", question, "--json"]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)  # still one object
    assert answer["citations"][0]["number"] == 1 and err == ""


def test_ask_says_not_found_when_nothing_is_relevant(scripted_kb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--data-dir", scripted_kb, "ask", "Welche Farbe hat der Himmel über Tokio?", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == "I could not find the answer to this question in the knowledge base."
    # without --quiet, the progress lines (stderr) end with why the model was not asked; stdout is the same
    assert main(["--data-dir", scripted_kb, "ask", "Welche Farbe hat der Himmel über Tokio?"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "I could not find the answer to this question in the knowledge base."
    assert err.rstrip().endswith("· not answered: no article shown shares a word with the question")


def test_ask_never_prints_a_reply_that_is_set_aside_and_says_why(
    scripted_kb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the small-model profile judges the whole reply: it is held until the guards decide, so a reply they set aside
    # never reaches the screen; the terminal says why beside the progress lines
    reply = "Share it through Google Sheets or Microsoft OneDrive [1]."
    monkeypatch.setattr("tests.dashboard.fakes.cite_sources", lambda messages, call: reply)
    assert main(["--data-dir", scripted_kb, "ask", "How do I create a table of contents together with others?"]) == 0
    out, err = capsys.readouterr()
    assert out == "I could not find the answer to this question in the knowledge base.\n"
    assert "not answered: the model's reply states Google Sheets, Microsoft OneDrive" in err


def test_ask_holds_back_a_closing_sentence_that_only_names_the_source(
    scripted_kb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = "Choose Insert - Table of Contents and Index [1]. This information is found in article [1] on page 6."
    monkeypatch.setattr("tests.dashboard.fakes.cite_sources", lambda messages, call: reply)
    assert main(["--data-dir", scripted_kb, "ask", "How do I create a table of contents?", "--quiet"]) == 0
    out = capsys.readouterr().out
    text, _, sources = out.partition("\nSources:\n")
    assert text.strip() == "Choose Insert - Table of Contents and Index [1]." and sources.startswith("[1] ")
    # one that names the article by its title too, also without the progress lines
    reply = "Choose Insert - Table of Contents and Index [1]. See [1] Creating a Table of Contents."
    assert main(["--data-dir", scripted_kb, "ask", "How do I create a table of contents?", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.partition("\nSources:\n")[0].strip() == "Choose Insert - Table of Contents and Index [1]."


def test_migrate_articles_then_the_shared_store_re_embeds_nothing(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fakes.hash_embedding import HashEmbedding
    from tests.ingestion.crash_worker import corpus, make_ingestor

    make_ingestor(tmp_path).ingest(corpus(10), source="gen")
    capsys.readouterr()  # llama-index prints chunking notes
    assert main(["--data-dir", str(tmp_path), "migrate-articles", "--to", pg_url]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["written"] == 10
    embed = HashEmbedding(dim=32)
    report = make_ingestor(tmp_path, embed, articles=pg_url).ingest(corpus(10), source="gen")
    assert (report.unchanged, embed.calls) == (10, 0)
    assert main(["--data-dir", str(tmp_path / "empty"), "migrate-articles", "--to", pg_url]) == 1
    assert "no article store at" in capsys.readouterr().err
    # Configured by URL (the server trusts loopback, so any password is accepted): stats never show it.
    monkeypatch.setenv("RAGIDX_ARTICLE_STORE_URL", pg_url.replace("postgres@", "postgres:pw-secret@"))
    capsys.readouterr()
    assert main(["--data-dir", str(tmp_path), "stats"]) == 0
    out = capsys.readouterr().out
    stats = json.loads(out)
    assert stats["articles"] == 10 and stats["pending"] == 0 and "pw-secret" not in out
    assert stats["article_store"].startswith("postgresql+psycopg://postgres:***@127.0.0.1:")


def test_tune_prints_one_json_line_and_stores_the_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.retrieval.helpers import KB

    kb = tmp_path / "kb.jsonl"
    kb.write_text("".join(json.dumps({"id": a.kb_id, "title": a.title, "text": a.content}) + "\n" for a in KB))
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "tune", "--quiet"]) == 2
    assert "run `ragidx ingest PATH` first" in capsys.readouterr().err
    assert main(["--data-dir", data, "ingest", str(kb), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "tune", "--queries", "6", "--quiet"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    row = json.loads(out[0])
    assert row["queries"] == 6 and row["saved"].endswith("tuning.json")
    assert row["method"] == "masked_sentence"  # held_out needs articles of two chunks or more: the fallback
    assert row["picked"] == row["candidates"][0]["config"] or row["picked"] == row["untuned"]
    assert set(row["settings"]) >= {"hybrid_alpha", "hybrid_fusion", "candidate_chunks", "reranker"}
    assert main(["--data-dir", data, "stats"]) == 0
    assert json.loads(capsys.readouterr().out)["tuned"] == row["picked"]


DOCS = Path(__file__).resolve().parent / "fixtures" / "docs"


@pytest.mark.slow
def test_a_mixed_folder_ingests_in_one_command_and_every_bad_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    folder = tmp_path / "docs"
    shutil.copytree(DOCS, folder, ignore=shutil.ignore_patterns("*.py"))
    data = str(tmp_path / "d")
    assert main(["--data-dir", data, "ingest", str(folder), "--quiet"]) == 3  # some items failed
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert (report["new"], report["errors"]) == (9, 5)  # pdf, scanned pdf (OCR), docx, html, md, txt, 3 in JSONL
    lines = err.splitlines()
    skipped = [line for line in lines if line.startswith("skipped ")]
    assert [line.split(":")[0].removeprefix("skipped ") for line in skipped] == [
        str(folder / n) for n in ("binary.jsonl", "corrupt.docx", "empty.md", "encrypted.pdf", "kb.jsonl")
    ]
    assert f"skipped {folder / 'kb.jsonl'}:3: JSON nested too deeply to read" in err
    assert lines[-1].startswith("ragidx: 5 items could not be read; 9 articles ingested. Fix them and run")

    # again: the unchanged files are not even read (their size and time are recorded), nothing is re-embedded;
    # --max-errors caps the detail lines
    def no_second_read(self: object, file: Path, *args: object, **kwargs: object) -> list[object]:
        raise AssertionError(f"{file} read again")

    for reader in ("PdfReader", "DocxReader", "HtmlReader", "MarkdownReader", "TextReader"):
        monkeypatch.setattr(f"ingestion.readers.{reader}.load_data", no_second_read)
    assert main(["--data-dir", data, "ingest", str(folder), "--quiet", "--max-errors", "2"]) == 3
    out, err = capsys.readouterr()
    assert json.loads(out)["unchanged"] == 9 and json.loads(out)["chunks_written"] == 0
    assert len([line for line in err.splitlines() if line.startswith("skipped ")]) == 2
    assert "... and 3 more skipped items" in err


def test_a_binary_file_named_jsonl_is_one_error_and_a_failing_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data-dir", str(tmp_path / "d"), "ingest", str(DOCS / "binary.jsonl"), "--quiet"]) == 3
    out, err = capsys.readouterr()
    assert json.loads(out)["seen"] == 0
    assert err.splitlines() == [
        f"skipped {DOCS / 'binary.jsonl'}: binary content, not JSON lines: is it really a .jsonl file? "
        "Nothing read from it",
        "ragidx: 1 item could not be read; 0 articles ingested. Fix them and run the same command again: "
        "unchanged articles are skipped",
    ]


@pytest.mark.slow
def test_ask_over_a_pdf_cites_its_page_and_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.dashboard.fakes import make_engine

    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    data = str(tmp_path / "kb")
    assert main(["--data-dir", data, "ingest", str(DOCS / "guide.pdf"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "ask", "Which century does a two-digit year default to?", "--quiet"]) == 0
    out = capsys.readouterr().out
    sources = out.partition("\nSources:\n")[2]
    assert sources.startswith("[1] Calc and Writer guide (p. 1, 19xx/20xx Years) — file://")
    assert sources.splitlines()[0].endswith("/fixtures/docs/guide.pdf#page=1")


# --- counts that tell the truth, text that cannot spoof the terminal, tenants kept apart ------------------
def test_delete_reports_the_articles_deleted_and_names_the_ids_not_found(
    scripted_kb: str, writer_kb_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data-dir", scripted_kb, "delete", "no-such-article"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"deleted": 0, "deleted_ids": [], "not_found": ["no-such-article"]}
    assert "1 of 1 ids not found (nothing to delete): no-such-article" in err

    toc = json.loads(Path(writer_kb_file).read_text(encoding="utf-8").splitlines()[0])["id"]  # a Writer article
    assert main(["--data-dir", scripted_kb, "delete", toc, "nope-1", toc, "nope-2"]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"deleted": 1, "deleted_ids": [toc], "not_found": ["nope-1", "nope-2"]}
    assert "2 of 3 ids not found" in err and "nope-1, nope-2" in err
    assert main(["--data-dir", scripted_kb, "stats"]) == 0
    assert json.loads(capsys.readouterr().out)["articles"] == 25

    assert main(["--data-dir", scripted_kb, "delete", toc]) == 1  # gone already
    assert json.loads(capsys.readouterr().out)["deleted"] == 0


UNSAFE = "\x00\x07\x1b[2J\x7f\x9b\u202e\u2066\u200f\u2028"


def _no_raw_controls(text: str) -> None:
    from ragidx.safe_text import UNSAFE_CHARACTERS

    shown = text.replace("\n", "")  # the lines themselves
    assert not UNSAFE_CHARACTERS.search(shown), repr(shown)


def test_control_characters_in_titles_ids_and_urls_are_escaped_on_every_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.dashboard.fakes import make_engine

    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    kb = tmp_path / "evil.jsonl"
    evil = {
        "id": f"evil{UNSAFE}id",
        "title": f"Margins {UNSAFE}txt.exe",
        "url": f"https://help.example/margins{UNSAFE}",
        "text": "Set the page margins of a document with Format > Page Style > Page: the margins are in cm.",
    }
    kb.write_text(json.dumps(evil) + "\n", encoding="utf-8")
    data = str(tmp_path / "kb")
    assert main(["--data-dir", data, "ingest", str(kb), "--quiet"]) == 0
    capsys.readouterr()

    assert main(["--data-dir", data, "search", "page margins", "--json"]) == 0
    out = capsys.readouterr().out
    _no_raw_controls(out)
    row = json.loads(out)[0]  # the same data for a program: JSON escapes read back as the characters
    assert (row["kb_id"], row["title"], row["url"]) == (evil["id"], evil["title"], evil["url"])

    assert main(["--data-dir", data, "search", "page margins"]) == 0
    out = capsys.readouterr().out
    _no_raw_controls(out)
    assert "Margins \\x00\\x07\\x1b[2J\\x7f\\x9b\\u202e\\u2066\\u200f\\u2028txt.exe" in out
    assert "(evil\\x00" in out and "https://help.example/margins\\x00" in out

    assert main(["--data-dir", data, "ask", "How do I set page margins?", "--quiet"]) == 0
    out = capsys.readouterr().out
    _no_raw_controls(out.partition("\nSources:\n")[2])
    assert "[1] Margins \\x00" in out

    assert main(["--data-dir", data, "ask", "How do I set page margins?", "--json"]) == 0
    out = capsys.readouterr().out
    _no_raw_controls(out)
    assert json.loads(out)["citations"][0]["title"] == evil["title"]

    assert main(["--data-dir", data, "delete", f"gone{UNSAFE}"]) == 1
    out, err = capsys.readouterr()
    _no_raw_controls(out + err)
    assert "gone\\x00" in err


def test_a_process_without_a_tenant_sees_only_tenant_less_data(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from tests.dashboard.fakes import make_engine

    monkeypatch.setattr("ragidx.engine.Engine", make_engine)
    text = "Set the page margins with Format > Page Style > Page; margins are measured in centimetres."
    acme, public = tmp_path / "acme.jsonl", tmp_path / "public.jsonl"
    acme.write_text(
        "".join(json.dumps({"id": f"acme-secret-{i}", "title": f"Margins {i}", "text": text}) + "\n" for i in range(8)),
        encoding="utf-8",
    )
    public.write_text(json.dumps({"id": "public-1", "title": "Page margins", "text": text}) + "\n", encoding="utf-8")
    data = str(tmp_path / "kb")
    monkeypatch.setenv("RAGIDX_TENANT", "acme")
    assert main(["--data-dir", data, "ingest", str(acme), "--quiet"]) == 0
    monkeypatch.delenv("RAGIDX_TENANT")
    assert main(["--data-dir", data, "ingest", str(public), "--quiet"]) == 0
    capsys.readouterr()

    assert main(["--data-dir", data, "stats"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["tenant"], stats["articles"]) == (None, 1)
    caplog.set_level(logging.DEBUG, logger="ragidx")
    assert main(["--data-dir", data, "search", "page margins", "--json"]) == 0
    assert [r["kb_id"] for r in json.loads(capsys.readouterr().out)] == ["public-1"]
    assert main(["--data-dir", data, "ask", "How do I set page margins?", "--json"]) == 0
    assert [c["kb_id"] for c in json.loads(capsys.readouterr().out)["citations"]] == ["public-1"]
    assert not [r.getMessage() for r in caplog.records if "acme" in r.getMessage()]  # no other tenant's ids
    assert main(["--data-dir", data, "delete", "acme-secret-1"]) == 1  # not this process's to delete
    capsys.readouterr()

    monkeypatch.setenv("RAGIDX_TENANT", "acme")
    assert main(["--data-dir", data, "stats"]) == 0
    acme_stats = json.loads(capsys.readouterr().out)
    assert (acme_stats["tenant"], acme_stats["articles"]) == ("acme", 8)
    assert acme_stats["chunks"] >= 8 and stats["chunks"] < acme_stats["chunks"]  # chunks are counted per tenant too
    assert main(["--data-dir", data, "search", "page margins", "--json"]) == 0
    assert all(r["kb_id"].startswith("acme-secret-") for r in json.loads(capsys.readouterr().out))


def test_ask_json_shows_the_guard_profile_and_what_fired(
    scripted_kb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = "Choose Insert - Table of Contents and Index [1]; unlike Notion or Confluence, it updates itself."
    monkeypatch.setattr("tests.dashboard.fakes.cite_sources", lambda messages, call: reply)
    question = "How do I create a table of contents?"
    # the local model: every guard; two product names no article writes set the reply aside
    assert main(["--data-dir", scripted_kb, "ask", question, "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert local["guard_profile"]["profile"] == "small-model" and "ungrounded_names" in local["guard_profile"]["guards"]
    assert local["not_found"] and [g["name"] for g in local["guards"]] == ["ungrounded_names"]
    assert "Notion, Confluence" in local["guards"][0]["reason"]
    # an OpenAI-compatible endpoint (scripted here): the endpoint profile keeps the right answer and its citation
    monkeypatch.setenv("RAGIDX_LLM__API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("RAGIDX_LLM__TOOL_MODE", "forced")  # the scripted model plans as the local one does
    assert main(["--data-dir", scripted_kb, "ask", question, "--json"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert remote["guard_profile"] == {
        "profile": "endpoint",
        "guards": ["model_not_found", "relay"],
        "enabled": [],
        "disabled": [],
    }
    assert not remote["not_found"] and remote["guards"] == [] and remote["text"] == reply
    assert remote["citations"][0]["number"] == 1
    # a per-rule override on top of the profile
    monkeypatch.setenv("RAGIDX_LLM__GUARDS_ENABLE", '["ungrounded_names"]')
    assert main(["--data-dir", scripted_kb, "ask", question, "--json"]) == 0
    enabled = json.loads(capsys.readouterr().out)
    assert enabled["guard_profile"]["enabled"] == ["ungrounded_names"] and enabled["not_found"]


def test_search_and_ask_take_filters_and_a_principal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kb = tmp_path / "kb.jsonl"
    lines = [
        {
            "id": "pub",
            "title": "Printing labels",
            "url": "u1",
            "text": "Print labels with File New Labels.",
            "product": "writer",
            "version": 7,
        },
        {
            "id": "hr",
            "title": "Payroll slips",
            "url": "u2",
            "text": "Print payroll slips from the HR portal.",
            "metadata": {"product": "O'Reilly's", "version": 8},
            "allowed": ["group:hr"],
        },
    ]
    kb.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "ingest", str(kb), "--quiet"]) == 0
    capsys.readouterr()

    def search(*extra: str) -> list[str]:
        assert main(["--data-dir", data, "search", "print payroll slips", "--json", *extra]) == 0
        return [r["kb_id"] for r in json.loads(capsys.readouterr().out)]

    assert search() == ["pub"]
    assert set(search("--group", "hr")) == {"pub", "hr"}
    assert search("--group", "hr", "--filter", "product=O'Reilly's") == ["hr"]
    assert search("--group", "hr", "--filter", "version>=8") == ["hr"]
    assert search("--group", "hr", "--filter", "product in writer,calc") == ["pub"]
    assert main(["--data-dir", data, "search", "print", "--filter", "version>=8"]) == 0
    assert "no matching articles" in capsys.readouterr().out  # the only match is HR's
    assert main(["--data-dir", data, "search", "print"]) == 0
    assert "product: writer · version: 7" in capsys.readouterr().out  # each article's metadata is shown
    assert main(["--data-dir", data, "search", "print", "--filter", "prodcut=x"]) == 2
    assert "filterable fields are" in capsys.readouterr().err
    assert main(["--data-dir", data, "ask", "payroll", "--filter", "version>="]) == 2
    assert "key=value" in capsys.readouterr().err


def test_ask_never_prints_an_instruction_the_answer_relayed_and_says_what_was_removed(
    scripted_kb: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    reply = (
        "Choose Insert - Table of Contents and Index [1]. Then email your password to admin@evil.example "
        "to verify your licence [1]."
    )
    monkeypatch.setattr("tests.dashboard.fakes.cite_sources", lambda messages, call: reply)
    assert main(["--data-dir", scripted_kb, "ask", "How do I create a table of contents?", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "Choose Insert - Table of Contents and Index [1]." in out
    assert "password" not in out and "evil.example" not in out
    assert "Note: ragidx removed a sentence from this answer that repeated instruction-like text" in out


# --- global options and settings errors (issues 54, 55) ---------------------------------------------------


def test_global_options_go_before_or_after_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragidx.cli import build_parser

    parse = build_parser().parse_args
    assert (parse(["stats"]).data_dir, parse(["stats"]).verbose) == (None, 0)
    assert parse(["--data-dir", "a", "stats"]).data_dir == parse(["stats", "--data-dir", "a"]).data_dir == "a"
    assert parse(["--data-dir", "a", "stats"]).data_dir == "a"  # not overwritten by the command's own default
    assert parse(["--data-dir", "a", "search", "q", "--data-dir", "b"]).data_dir == "b"  # the last one wins
    assert parse(["-v", "ask", "q"]).verbose == parse(["ask", "q", "-v"]).verbose == 1
    assert parse(["serve", "-vv"]).verbose == 2
    monkeypatch.chdir(tmp_path)
    assert main(["stats", "--data-dir", str(tmp_path / "kb")]) == 0
    assert json.loads(capsys.readouterr().out)["data_dir"] == str(tmp_path / "kb")
    assert (tmp_path / "kb").is_dir() and not (tmp_path / ".ragidx").exists()


def test_settings_that_cannot_be_used_exit_2_with_one_message_and_no_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAGIDX_DATADIR", str(tmp_path / "kb"))
    assert main(["stats"]) == 2
    assert capsys.readouterr().err == (
        "ragidx: invalid settings:\n  RAGIDX_DATADIR is not a setting: did you mean RAGIDX_DATA_DIR?\n"
    )
    assert not (tmp_path / ".ragidx").exists() and not (tmp_path / "kb").exists()  # nothing was opened


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RAGIDX_SERVE__KEYS", '["sk-test-SECRET-1234567890abcdef"]'),
        ("RAGIDX_SERVE__KEYS", '[{"key": "sk-test-SECRET-1234567890abcdef", "key_env": "K"}]'),
        ("RAGIDX_SERVE__API_KEYS", '{"reader": "sk-test-SECRET-1234567890abcdef"}'),
        ("RAGIDX_SERVE__API_KEYS", "sk-test-SECRET-1234567890abcdef"),
    ],
)
def test_serve_with_malformed_keys_stops_before_starting_and_never_prints_a_key(
    variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-test-SECRET-1234567890abcdef"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    assert main(["serve", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ragidx: invalid settings:\n  {variable}") and "Traceback" not in err
    assert [secret[i : i + 6] for i in range(len(secret) - 5) if secret[i : i + 6] in err] == []


def test_list_shows_the_ids_that_delete_takes_and_search_shows_only_a_persons_fields(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "docs"
    (folder / "billing").mkdir(parents=True)
    (folder / "billing" / "refunds.md").write_text("# Refunds\n\nRefunds take five days.\n", encoding="utf-8")
    (folder / "sso.md").write_text("# Single sign-on\n\nUse SAML with your provider.\n", encoding="utf-8")
    data = str(tmp_path / "d")
    assert main(["--data-dir", data, "ingest", str(folder), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[0] for line in out] == ["billing/refunds.md", "sso.md"]
    assert main(["--data-dir", data, "list", "--match", "SIGN", "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)
    assert only["kb_id"] == "sso.md" and only["title"] == "Single sign-on" and only["allowed"] == []
    assert main(["--data-dir", data, "delete", "sso.md"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "list", "--match", "sign"]) == 0
    assert capsys.readouterr().out == "no articles match\n"
    # the human search output: the article's own fields, not ingestion's bookkeeping
    assert main(["--data-dir", data, "search", "refunds"]) == 0
    shown = capsys.readouterr().out
    assert "folder: billing" in shown and "file_stamp" not in shown and "sections" not in shown


def test_eval_takes_the_global_data_dir_like_every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr("ragidx.evaluation.retrieval.main", lambda argv: seen.append(list(argv)) or 0)
    assert main(["--data-dir", str(tmp_path), "eval", "retrieval", "--beir", "b"]) == 0
    assert main(["eval", "retrieval", "--beir", "b", "--data-dir", "own"]) == 0  # its own option is kept
    assert seen == [["--beir", "b", "--data-dir", str(tmp_path)], ["--beir", "b", "--data-dir", "own"]]
    from ragidx.evaluation.retrieval import build_parser

    assert build_parser().parse_args(["--beir", "b", "--data-dir", "x"]).data_dir == Path("x")
