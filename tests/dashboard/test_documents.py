"""The dashboard's document route: an ingested file is served to whoever may read its article, and nothing else.

Real ingestion (the readers, LanceDB, the SQLite article store; hash embeddings) of the committed fixtures, and
the route through Starlette's test client.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from ragidx.config import Settings
from ragidx.dashboard.documents import DocumentUnavailable, document_link, document_routes, resolve_document
from ragidx.stores.access import Principal
from tests.dashboard.fakes import make_engine

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "docs"


@pytest.fixture
def kb(tmp_path: Path) -> Any:
    """An engine over a folder of real documents (one of them restricted to group hr), plus a JSONL whose urls
    point at files it never read."""
    folder = tmp_path / "kb"
    (folder / "manuals").mkdir(parents=True)
    for name, target in (
        ("guide.pdf", "manuals/Calc guide.pdf"),
        ("guide.html", "guide.html"),
        ("guide.pdf", "secret.pdf"),
    ):
        (folder / target).write_bytes((FIXTURES / name).read_bytes())
    outside = tmp_path / "stolen.pdf"
    outside.write_bytes((FIXTURES / "guide.pdf").read_bytes())
    stat = outside.stat()
    lines = [
        # a url is data: a JSONL line may point anywhere, even with a file_stamp of the right size and time
        {"id": "passwd", "title": "x", "text": "x", "url": "file:///etc/passwd"},
        {
            "id": "stolen.pdf",
            "title": "HR",
            "text": "payroll",
            "url": outside.as_uri(),
            "metadata": {"file_stamp": f"{stat.st_size}:{stat.st_mtime_ns}"},
        },
        {"id": "web", "title": "Web", "text": "published", "url": "https://docs.example/web.html"},
    ]
    extra = tmp_path / "extra.jsonl"
    extra.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    engine = make_engine(Settings(data_dir=tmp_path / "data"))
    assert engine.ingest(folder).new == 3
    assert engine.ingest(extra).new == 3
    # documents carry no ACL of their own yet: restrict the ingested one in the store, as a re-ingest with one would
    stored = engine.article_store.get(["secret.pdf"])["secret.pdf"]
    engine.article_store.save_pending([stored.with_metadata(allowed=["group:hr"])])
    yield engine, folder, folder / "secret.pdf"
    engine.close()


def test_document_link_keeps_the_place_and_quotes_the_id() -> None:
    assert document_link("a b/guide.pdf", "file:///kb/a%20b/guide.pdf#page=3") == "documents/a%20b/guide.pdf#page=3"
    assert document_link("guide.html", "file:///kb/guide.html#naming-cells") == "documents/guide.html#naming-cells"
    quoted = "file:///kb/guide.html#naming-cells:~:text=Name%20a%20cell%2C%20then,press%20Enter."
    assert document_link("guide.html", quoted) == "documents/guide.html" + quoted[len("file:///kb/guide.html") :]
    assert document_link("x(1).md", "file:///kb/x(1).md") == "documents/x%281%29.md"
    assert document_link("lo-42", "https://help.example/lo-42") is None
    assert document_link("lo-42", "") is None


def test_an_ingested_file_is_served_as_its_type(kb: Any) -> None:
    engine, folder, _ = kb
    pdf = resolve_document(engine.article_store, "manuals/Calc guide.pdf")
    assert pdf.path == (folder / "manuals" / "Calc guide.pdf").resolve()
    assert (pdf.media_type, pdf.disposition) == ("application/pdf", "inline")
    html = resolve_document(engine.article_store, "guide.html")
    assert html.media_type.startswith("text/html") and html.headers["Content-Security-Policy"] == "sandbox"


@pytest.mark.parametrize(
    ("kb_id", "status"),
    [
        ("nothing.pdf", 404),  # no such article
        ("secret.pdf", 404),  # restricted: the public is told it does not exist
        ("passwd", 404),  # its url names a file ingestion never read
        ("stolen.pdf", 404),  # a JSONL line cannot claim ingestion's file stamp
        ("web", 404),  # published elsewhere: its own link
    ],
)
def test_what_is_not_served(kb: Any, kb_id: str, status: int) -> None:
    engine, _, _ = kb
    with pytest.raises(DocumentUnavailable) as err:
        resolve_document(engine.article_store, kb_id)
    assert err.value.status == status


def test_a_restricted_file_is_served_to_its_readers_only(kb: Any) -> None:
    engine, _, secret = kb
    assert resolve_document(engine.article_store, "secret.pdf", Principal.of("ann", ["hr"])).path == secret
    with pytest.raises(DocumentUnavailable):
        resolve_document(engine.article_store, "secret.pdf", Principal.of("bob", ["sales"]))


def test_a_changed_or_deleted_file_says_to_ingest_again(kb: Any) -> None:
    engine, folder, _ = kb
    pdf = folder / "manuals" / "Calc guide.pdf"
    os.utime(pdf, ns=(pdf.stat().st_atime_ns, pdf.stat().st_mtime_ns + 10**9))
    with pytest.raises(DocumentUnavailable, match="changed after it was ingested") as err:
        resolve_document(engine.article_store, "manuals/Calc guide.pdf")
    assert err.value.status == 409
    pdf.unlink()
    with pytest.raises(DocumentUnavailable, match="moved or deleted") as err:
        resolve_document(engine.article_store, "manuals/Calc guide.pdf")
    assert err.value.status == 410


def test_the_route_sends_the_file_and_refuses_the_rest(kb: Any) -> None:
    engine, folder, _ = kb
    client = TestClient(Starlette(routes=document_routes(lambda: engine, "/ragidx/")))
    ok = client.get("/ragidx/documents/manuals/Calc%20guide.pdf")
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/pdf"
    assert ok.content == (folder / "manuals" / "Calc guide.pdf").read_bytes()
    assert ok.headers["content-disposition"].startswith("inline")
    assert ok.headers["x-content-type-options"] == "nosniff"
    refused = client.get("/ragidx/documents/secret.pdf")
    assert refused.status_code == 404 and "payroll" not in refused.text and "secret.pdf" in refused.text
    assert client.get("/ragidx/documents/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get("/documents/manuals/Calc%20guide.pdf").status_code == 404  # outside the base path


def test_a_file_whose_bytes_changed_under_the_same_size_and_time_or_that_became_a_link_is_refused(
    kb: Any, tmp_path: Path
) -> None:
    engine, folder, _ = kb
    page = folder / "guide.html"
    stat, data = page.stat(), page.read_bytes()
    page.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))  # other bytes, the same size ...
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and the modification time put back
    with pytest.raises(DocumentUnavailable, match="changed after it was ingested") as err:
        resolve_document(engine.article_store, "guide.html")
    assert err.value.status == 409
    elsewhere = tmp_path / "elsewhere.html"  # the ingested bytes and time, but at another place, linked in
    elsewhere.write_bytes(data)
    os.utime(elsewhere, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    page.unlink()
    page.symlink_to(elsewhere)
    with pytest.raises(DocumentUnavailable, match="changed after it was ingested"):
        resolve_document(engine.article_store, "guide.html")
