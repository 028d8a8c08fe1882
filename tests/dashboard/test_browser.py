"""End to end in a real browser: ``streamlit run`` on loopback, driven by headless Chromium.

The engine is the real one (LanceDB, article store, MiniLM embeddings, offline reranker, agent,
context budget) over a few Writer articles; only the chat model is scripted
(``tests.dashboard.fakes``), because the packaged Qwen model needs minutes per answer on a 2-core
CI machine. The test picks a 4K window in the sidebar, asks a question, waits for a cited answer
and saves a screenshot to ``artifacts/dashboard_chat.png``.

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
from pathlib import Path

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


@pytest.fixture
def app_url(tmp_path: Path, writer_kb_file: str) -> Iterator[str]:
    """The dashboard served on a free loopback port over 26 real Writer articles embedded with MiniLM."""
    from tests.dashboard.fakes import make_minilm_engine

    data_dir = tmp_path / "data"
    with make_minilm_engine(Settings(data_dir=data_dir)) as engine:
        assert engine.ingest(writer_kb_file).new == 26
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
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "streamlit_app.py"),
        "--server.headless", "true", "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
    ]  # fmt: skip
    log = (tmp_path / "streamlit.log").open("wb")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        print((tmp_path / "streamlit.log").read_text(errors="replace")[-3000:])


def test_ask_in_chromium_and_see_a_cited_answer(app_url: str, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api", reason="pip install playwright (no browser download)")
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard_chat.png"
    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1400, "height": 2400},  # tall: the whole answer fits without scrolling
        )
        try:
            page = browser.pages[0] if browser.pages else browser.new_page()
            page.set_default_timeout(120_000)
            page.goto(app_url)
            page.get_by_text("Knowledge base: 26 articles", exact=False).wait_for()

            # Try a 4K window live from the sidebar, with ten articles per search.
            page.locator('[data-testid="stSelectbox"]').filter(has_text="Context window").click()
            page.get_by_role("option", name="4K (4096 tokens)").click()
            page.wait_for_timeout(1500)  # the rerun with the new settings
            top_k = page.locator('[data-testid="stNumberInput"]').filter(has_text="top_k").locator("input")
            top_k.fill("10")
            top_k.press("Enter")
            page.wait_for_timeout(1500)

            box = page.get_by_placeholder("Ask a question about the knowledge base")
            box.fill("How do I create and format a table of contents?")
            box.press("Enter")

            answer = page.locator('[data-testid="stChatMessage"]').nth(1)
            answer.get_by_text("Sources").wait_for()
            link = answer.get_by_role("link", name="Creating a Table of Contents").first
            assert link.get_attribute("href", timeout=5_000).endswith("indices_toc.html")
            answer.locator('[data-testid="stMetric"]').filter(has_text="Compressor").wait_for()
            answer.locator('[data-testid="stVegaLiteChart"]').nth(1).wait_for()  # gauge and tokens chart
            page.wait_for_timeout(2000)  # let the charts finish drawing
            text = answer.inner_text()
            assert "[1]" in text and "Creating a Table of Contents" in text
            assert "4,096" in text and "extractive" in text
            path = answer.locator('[data-testid="stMarkdownContainer"]').filter(has_text="Path:").inner_text()
            # At 4K the budget acts: it caps later searches, dedups and, if still needed, compresses.
            assert "under_trigger" not in path and any(
                step in path for step in ("deduplicated", "compressed", "dropped", "truncated")
            ), path
            page.screenshot(path=str(shot), full_page=True)
        except Exception:
            page.screenshot(path=str(ARTIFACTS / "dashboard_chat_failure.png"), full_page=True)
            raise
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
