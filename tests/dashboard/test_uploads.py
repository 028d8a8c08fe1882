from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragidx.config import Settings
from ragidx.dashboard.uploads import UPLOADS_OFF, check_upload, ingest_upload
from tests.dashboard.fakes import make_engine, make_minilm_engine

UPLOADS = {"dashboard": {"uploads": True}}


def test_check_upload_accepts_known_types_and_refuses_the_rest() -> None:
    assert check_upload("kb.JSONL", b"{}") is None and check_upload("a.md", b"# A") is None
    assert check_upload("a.html", b"<p>x</p>") is None
    assert check_upload("README", b"x").startswith("README: unsupported file type (no extension)")
    assert check_upload("a.jsonl", b" \n\n").startswith("a.jsonl is empty")


def test_ingest_upload_reports_progress_and_numbers(tmp_path: Path) -> None:
    lines = [json.dumps({"id": f"k{i}", "title": f"T{i}", "text": f"Article {i} about tables."}) for i in range(5)]
    seen: list[tuple[int, int | None]] = []
    with make_engine(Settings(data_dir=tmp_path, **UPLOADS)) as engine:
        result = ingest_upload(
            engine,
            "../../etc/kb.jsonl",
            "\n".join(lines).encode(),
            on_progress=lambda d, t: seen.append((d, t)),
            batch_articles=2,
        )
        assert engine.stats()["articles"] == 5
        again = ingest_upload(engine, "kb.jsonl", "\n".join(lines).encode())
    assert result.ok and result.report["new"] == 5 and result.report["source"] == "upload:kb.jsonl"
    assert seen == [(i, 5) for i in range(1, 6)]
    assert again.report["unchanged"] == 5
    assert not (tmp_path.parent / "etc").exists()


def test_an_upload_without_one_readable_article_is_an_error(tmp_path: Path) -> None:
    with make_engine(Settings(data_dir=tmp_path, **UPLOADS)) as engine:
        result = ingest_upload(engine, "bad.jsonl", b'{"id": "x"}\n\xff\xfe\n')
    assert not result.ok and result.error is not None
    assert result.error.startswith("bad.jsonl: no article could be read (bad.jsonl:1:")
    assert "bad.jsonl:2: not UTF-8" in result.error and "/tmp" not in result.error


def test_an_uploaded_document_is_kept_where_a_citation_can_open_it(tmp_path: Path) -> None:
    from ragidx.dashboard.documents import resolve_document

    pdf = (Path(__file__).resolve().parents[1] / "fixtures" / "docs" / "guide.pdf").read_bytes()
    with make_engine(Settings(data_dir=tmp_path / "data", **UPLOADS)) as engine:
        assert ingest_upload(engine, "Calc guide.pdf", pdf).ok
        kept = tmp_path / "data" / "uploads" / "Calc_guide.pdf"
        assert kept.read_bytes() == pdf
        assert resolve_document(engine.article_store, "Calc_guide.pdf").path == kept.resolve()
        # a broken upload under the same name is refused and leaves the file the index was built from
        broken = ingest_upload(engine, "Calc guide.pdf", b"%PDF-1.4 broken")
        assert not broken.ok and kept.read_bytes() == pdf
        assert resolve_document(engine.article_store, "Calc_guide.pdf").path == kept.resolve()
        assert not ingest_upload(engine, "other.pdf", b"%PDF-1.4 broken").ok
    assert sorted(p.name for p in kept.parent.iterdir()) == ["Calc_guide.pdf"]


def test_an_uploaded_document_is_read_once_when_its_language_picks_the_embedding_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``embed_model="auto"`` and an empty index the upload's languages pick the model: for a document they
    come from the articles being ingested, not from reading the file a second time (a PDF read twice costs what
    ingesting it does)."""
    from ingestion.readers import PdfReader

    reads: list[Path] = []
    load_data = PdfReader.load_data

    def counted(self: PdfReader, file: Path, *args: Any, **kwargs: Any) -> Any:
        reads.append(Path(file))
        return load_data(self, file, *args, **kwargs)

    monkeypatch.setattr(PdfReader, "load_data", counted)
    pdf = (Path(__file__).resolve().parents[1] / "fixtures" / "docs" / "guide.pdf").read_bytes()
    with make_minilm_engine(Settings(data_dir=tmp_path, embed_model="auto", **UPLOADS)) as engine:
        result = ingest_upload(engine, "guide.pdf", pdf)
        assert result.ok and result.report["new"] == 1 and engine.embed_model_name == "minilm"
    assert len(reads) == 1, reads


def test_uploads_are_refused_unless_the_settings_allow_them(tmp_path: Path) -> None:
    line = json.dumps({"id": "k1", "title": "T", "text": "Article about tables."}).encode()
    with make_engine(Settings(data_dir=tmp_path)) as engine:
        result = ingest_upload(engine, "kb.jsonl", line)
        assert not result.ok and result.error == UPLOADS_OFF and engine.stats()["articles"] == 0
    assert "RAGIDX_DASHBOARD__UPLOADS=true" in UPLOADS_OFF and "ragidx ingest FILE" in UPLOADS_OFF


def test_an_upload_replaces_only_its_own_public_articles(tmp_path: Path) -> None:
    """Re-uploading a file updates its articles; a line naming an article of another source, or an article the public
    may not read (even one uploaded under this name before), is skipped and the stored article kept as it was."""
    from ragidx.article import Article
    from ragidx.stores.access import Principal

    def jsonl(*articles: dict[str, Any]) -> bytes:
        return "".join(json.dumps(a) + "\n" for a in articles).encode()

    secret = {"id": "hr-2", "title": "Reviews", "text": "Review notes.", "allowed": ["group:hr"]}
    with make_engine(Settings(data_dir=tmp_path, **UPLOADS)) as engine:
        engine.ingest([Article("hr-1", "Salaries", "", "Bands are secret.", metadata={"allowed": ["group:hr"]})])
        assert ingest_upload(engine, "kb.jsonl", jsonl({"id": "k1", "text": "Tables, first."}, secret)).ok
        again = ingest_upload(
            engine,
            "kb.jsonl",
            jsonl(
                {"id": "k1", "text": "Tables, second."},  # its own public article: updated
                {"id": "hr-2", "text": "Review notes for all."},  # its own, but restricted: kept
                {"id": "hr-1", "text": "Bands for all."},  # another source's: kept
            ),
        )
        other = ingest_upload(engine, "other.jsonl", jsonl({"id": "k1", "text": "Tables, hijacked."}))
        stored = engine.article_store.get(["k1", "hr-1", "hr-2"])
        public = engine.article_store.get(["hr-1", "hr-2"], principal=Principal())
    assert again.report["changed"] == 1 and len(again.skipped) == 2
    assert all("is already in the knowledge base from another source, or is not public" in e for e in again.skipped)
    assert again.skipped[0].startswith("kb.jsonl: article 'hr-2'") and "Review notes" not in again.skipped[0]
    assert other.report["new"] == other.report["changed"] == 0
    assert other.skipped == [
        "other.jsonl: article 'k1' is already in the knowledge base from another source, or is not public: an upload "
        "does not replace it. Give this article another id, or update the original where it was ingested from"
    ]
    assert stored["k1"].content == "Tables, second."
    assert stored["hr-1"].content == "Bands are secret." and stored["hr-2"].content == "Review notes."
    assert not public  # both still restricted
