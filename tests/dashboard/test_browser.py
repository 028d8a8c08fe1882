"""End to end in a real browser: ``streamlit run`` on loopback, driven by headless Chromium.

The engine is the real one (LanceDB, article store, MiniLM embeddings, offline reranker, agent,
context budget) over a few Writer articles; only the chat model is scripted
(``tests.dashboard.fakes``), because the packaged Qwen model needs minutes per answer on a 2-core
CI machine. The dashboard runs with the committed ``.streamlit/config.toml`` (no address flag): it must listen
on loopback only. The test sees the empty chat's example titles, picks a 4K window on the Tuning page, asks a
question on the Chat page, waits for a cited answer whose engineering view is collapsed, opens it, rates the
answer, and saves screenshots of each step under ``artifacts/`` (``dashboard_*.png``).

Needs Debian's ``chromium`` (``apt-get install -y chromium``) and ``pip install playwright``; it
never downloads a browser (no ``playwright install``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ragidx.config import Settings
from ragidx.dashboard.engines import FACTORY_ENV
from tests.dashboard.conftest import ROOT

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.is_file(), reason="needs /usr/bin/chromium: apt-get update && apt-get install -y chromium"
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> set[str]:
    """The local addresses a socket listens on at ``port`` (from ``/proc/net/tcp`` and ``tcp6``, hex as there)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as fh:
            for row in fh.read().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.rpartition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"streamlit did not become healthy at {url} in {timeout:.0f}s")


@contextmanager
def _dashboard(tmp_path: Path, data_dir: Path) -> Iterator[str]:
    """``streamlit run streamlit_app.py`` on a free loopback port over ``data_dir``; its URL."""
    port = _free_port()
    env = {
        **os.environ,
        FACTORY_ENV: "tests.dashboard.fakes:make_minilm_engine",
        "RAGIDX_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.pop("RAGIDX_CONFIG", None)
    # No --server.address: the committed .streamlit/config.toml (beside the script) keeps it on loopback.
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "streamlit_app.py"),
        "--server.port", str(port), "--server.fileWatcherType", "none",
    ]  # fmt: skip
    log = (tmp_path / "streamlit.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        assert _listening(port) == {"0100007F"}, _listening(port)  # 127.0.0.1 only, never every interface
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print((tmp_path / "streamlit.log").read_text(errors="replace")[-3000:])


@contextmanager
def _chromium(tmp_path: Path, playwright: Any) -> Iterator[Any]:
    """A headless Debian Chromium (never a downloaded browser) with a tall window."""
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 2400},  # tall: the whole answer fits without scrolling
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def app_url(tmp_path: Path, writer_kb_file: str) -> Iterator[str]:
    """The dashboard served on a free loopback port over 26 real Writer articles embedded with MiniLM."""
    from tests.dashboard.fakes import make_minilm_engine

    data_dir = tmp_path / "data"
    with make_minilm_engine(Settings(data_dir=data_dir)) as engine:
        assert engine.ingest(writer_kb_file).new == 26
    with _dashboard(tmp_path, data_dir) as url:
        yield url


def test_ask_in_chromium_and_see_a_cited_answer(app_url: str, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no browser download)")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard_chat.png"
    with _chromium(tmp_path, playwright) as browser:
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(app_url)
            page.get_by_text("Knowledge base: 26 articles", exact=False).wait_for()

            # An empty chat offers titles from the knowledge base.
            page.get_by_text("Try asking about:").wait_for()
            examples = page.locator('[data-testid="stButton"]').filter(has_not_text="New conversation")
            examples.nth(3).wait_for()
            assert examples.count() == 4
            page.wait_for_timeout(500)
            page.screenshot(path=str(ARTIFACTS / "dashboard_empty_chat.png"), full_page=True)

            # Try a 4K window live on the Tuning page, with ten articles per search.
            page.get_by_role("link", name="Tuning").click()
            page.get_by_role("heading", name="Tuning").wait_for()
            page.locator('[data-testid="stSelectbox"]').filter(has_text="Context window").click()
            page.get_by_role("option", name="4K (4096 tokens)").click()
            page.wait_for_timeout(1500)  # the rerun with the new settings
            top_k = page.locator('[data-testid="stNumberInput"]').filter(has_text="top_k").locator("input")
            top_k.fill("10")
            top_k.press("Enter")
            page.get_by_text("settings changed on the Tuning page", exact=False).wait_for()
            page.screenshot(path=str(ARTIFACTS / "dashboard_tuning.png"), full_page=True)

            page.get_by_role("link", name="Chat").click()
            box = page.get_by_placeholder("Ask a question about the knowledge base")
            box.fill("How do I create and format a table of contents?")
            box.press("Enter")

            answer = page.locator('[data-testid="stChatMessage"]').nth(1)
            answer.get_by_text("Sources", exact=True).wait_for()
            link = answer.get_by_role("link", name="Creating a Table of Contents").first
            href = link.get_attribute("href", timeout=5_000) or ""
            assert href.split("#")[0].endswith("indices_toc.html") and "#:~:text=" in href  # opens at the passage
            how = answer.locator('[data-testid="stExpander"]').filter(has_text="How this answer was made")
            where = answer.locator('[data-testid="stExpander"]').filter(has_text="Where the sources say it")
            assert where.count() == 1  # the cited sentences, highlighted in their articles, one click away
            said = answer.locator("li").filter(has_text="The model was shown")
            assert not said.is_visible()  # collapsed
            for raw in ("log-odds", "under_trigger", "rerank_score", "Path:"):
                assert raw not in answer.inner_text(), raw
            answer.locator('[data-testid="stFeedback"]').wait_for()  # the run is over: the thumbs are drawn
            page.wait_for_timeout(500)
            page.screenshot(path=str(shot), full_page=True)

            # One click opens how the answer was made, in plain words.
            how.get_by_text("How this answer was made").click()
            said.wait_for()
            page.wait_for_timeout(1000)  # the expander's opening animation
            text = how.inner_text()
            assert "4,096 tokens its window holds" in text
            # At 4K the budget acts: it caps later searches, dedups and, if still needed, compresses.
            assert "nothing had to be shortened" not in text and any(
                step in text for step in ("repeated across articles", "shortened", "left out", "cut off")
            ), text
            page.screenshot(path=str(ARTIFACTS / "dashboard_how_plain.png"), full_page=True)

            # The exact figures are one tab further.
            how.get_by_role("tab", name="Exact figures").click()
            how.locator('[data-testid="stMetric"]').filter(has_text="Compressor").wait_for()
            how.locator('[data-testid="stVegaLiteChart"]').nth(1).wait_for()  # gauge and tokens chart
            page.wait_for_timeout(2000)  # let the charts finish drawing
            figures = how.inner_text()
            assert "4,096" in figures and "extractive" in figures and "Budget steps, call" in figures
            page.screenshot(path=str(ARTIFACTS / "dashboard_how_figures.png"), full_page=True)

            # A thumbs down is recorded.
            answer.locator('[data-testid="stFeedback"] button').nth(1).click()  # up, down
            page.get_by_text("marked as wrong", exact=False).wait_for()

            # Uploads are off unless configured: the Ingest page says how to add files instead.
            page.get_by_role("link", name="Ingest").click()
            page.get_by_text("ragidx ingest FILE_OR_FOLDER").wait_for()
            assert not page.locator('[data-testid="stFileUploader"]').count()
            page.screenshot(path=str(ARTIFACTS / "dashboard_ingest_off.png"), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "dashboard_chat_failure.png"), full_page=True)
            raise
    assert shot.stat().st_size > 10_000
    from tests.dashboard.test_app import logged

    (record,), votes = logged(tmp_path / "data")
    assert record.question == "How do I create and format a table of contents?"
    assert [f.vote for f in votes[record.id]] == ["down"]


@pytest.fixture
def pdf_app_url(tmp_path: Path) -> Iterator[str]:
    """The dashboard over a real PDF (``tests/fixtures/docs/guide.pdf``: three LibreOffice help articles written as
    a 4-page PDF by ``soffice``), ingested from a folder as ``manuals/Calc guide.pdf`` and embedded with MiniLM."""
    from tests.dashboard.fakes import make_minilm_engine

    folder = tmp_path / "kb" / "manuals"
    folder.mkdir(parents=True)
    (folder / "Calc guide.pdf").write_bytes((ROOT / "tests" / "fixtures" / "docs" / "guide.pdf").read_bytes())
    data_dir = tmp_path / "data"
    with make_minilm_engine(Settings(data_dir=data_dir)) as engine:
        assert engine.ingest(tmp_path / "kb").new == 1
    with _dashboard(tmp_path, data_dir) as url:
        yield url


def test_a_cited_pdf_opens_in_chromium_at_the_page_that_holds_the_value(pdf_app_url: str, tmp_path: Path) -> None:
    """Ask for a value on page 2 of the PDF, click the answer's citation: the browser opens the dashboard's copy
    of the PDF at ``#page=2``, and page 2 of the file it got holds the value.

    Headless Chromium opens the PDF in its viewer but draws no page of it (``dashboard_pdf_opened.png`` is the
    viewer's empty frame), so the check is the URL the click opened and the text of that page of the bytes the
    dashboard served (pdfplumber)."""
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no browser download)")
    import pdfplumber

    ARTIFACTS.mkdir(exist_ok=True)
    with _chromium(tmp_path, playwright) as browser:
        page = browser.pages[0] if browser.pages else browser.new_page()
        page.set_default_timeout(120_000)
        try:
            page.goto(pdf_app_url)
            page.get_by_text("Knowledge base: 1 article,", exact=False).wait_for()
            box = page.get_by_placeholder("Ask a question about the knowledge base")
            box.fill("What is the result of SUM('Column One')?")
            box.press("Enter")
            answer = page.locator('[data-testid="stChatMessage"]').nth(1)
            answer.get_by_text("Sources", exact=True).wait_for()
            assert "p. 2" in answer.inner_text()  # the source line says the page
            link = answer.get_by_role("link", name="Calc and Writer guide").first
            assert link.get_attribute("href") == "documents/manuals/Calc%20guide.pdf#page=2"
            page.screenshot(path=str(ARTIFACTS / "dashboard_pdf_citation.png"), full_page=True)
            with browser.expect_page() as opened:  # the citation opens in a new tab
                link.click()
            tab = opened.value
            tab.wait_for_load_state()
            opened_url = tab.url
            tab.screenshot(path=str(ARTIFACTS / "dashboard_pdf_opened.png"))
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "dashboard_pdf_citation_failure.png"), full_page=True)
            raise
        assert opened_url == f"{pdf_app_url}/documents/manuals/Calc%20guide.pdf#page=2", opened_url
        served = browser.request.get(opened_url.split("#", 1)[0])
        assert served.status == 200 and served.headers["content-type"] == "application/pdf"
        pdf = tmp_path / "served.pdf"
        pdf.write_bytes(served.body())
    with pdfplumber.open(pdf) as document:
        pages = [p.extract_text() or "" for p in document.pages]
    assert "SUM('Column One'), is 600" in " ".join(pages[1].split())  # page 2 (#page=2) holds the value
    assert not any("is 600" in " ".join(p.split()) for i, p in enumerate(pages) if i != 1)
