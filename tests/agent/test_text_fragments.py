"""Text-fragment links: the directive's terms, which URLs get one, and a real Chromium that scrolls to the quoted
sentence and highlights it."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragidx.agent.text_fragments import renders_as_page, text_directive, with_text_fragment

CHROMIUM = Path("/usr/bin/chromium")
HIGHLIGHT = (255, 0, 255)  # the test page paints ::target-text in this colour, which nothing else on it uses


def test_a_short_quote_is_one_term_and_a_long_one_its_first_and_last_words() -> None:
    assert text_directive("Choose Format - Cells.") == "text=Choose%20Format%20%2D%20Cells."
    long = "The autovacuum daemon, if enabled, wakes up every minute and checks each database in turn for work."
    assert text_directive(long) == "text=The%20autovacuum%20daemon%2C%20if%20enabled%2C,in%20turn%20for%20work."


def test_a_table_row_is_matched_from_its_first_cell_to_its_last() -> None:
    # a term never spans two cells: the directive starts in the first cell and ends in the last
    assert text_directive("| Midsummer | 2 days | paid |") == "text=Midsummer,paid"
    assert (
        text_directive("Press **Ctrl+Enter** to run the `query`.")
        == "text=Press%20Ctrl%2BEnter%20to%20run%20the%20query."
    )
    # a lone "*" or "_" is the page's text, not markup
    assert text_directive("Set huge_pages to try.") == "text=Set%20huge_pages%20to%20try."
    assert text_directive("SELECT * FROM t;") == "text=SELECT%20%2A%20FROM%20t%3B"


def test_markdown_links_keep_their_text_and_an_empty_quote_gives_nothing() -> None:
    assert text_directive("See [the backup guide](https://x/backup.html) for details.") == (
        "text=See%20the%20backup%20guide%20for%20details."
    )
    assert text_directive("  | --- |  ") == ""
    assert with_text_fragment("https://x.org/a.html", "") == "https://x.org/a.html"


@pytest.mark.parametrize(
    ("url", "fmt", "page"),
    [
        ("https://help.example.org/7.4/en-US/text/swriter/guide/table_insert.html", None, True),
        ("https://www.postgresql.org/docs/15/runtime-config-resource", None, True),
        ("file:///kb/docs/billing.html#refunds", "html", True),
        ("file:///kb/docs/ops.pdf#page=2", "pdf", False),
        ("file:///kb/docs/handbook.md#holidays", "markdown", False),
        ("https://x.org/travel.docx", None, False),
        ("javascript:alert(1)", None, False),
        ("upload:notes.html", None, False),
    ],
)
def test_only_pages_a_browser_renders_as_html_get_a_text_fragment(url: str, fmt: str | None, page: bool) -> None:
    assert renders_as_page(url, fmt) is page
    linked = with_text_fragment(url, "Backups are kept 35 days.", fmt)
    assert (linked != url) is page


def test_an_existing_anchor_is_kept_and_an_old_directive_replaced() -> None:
    url = with_text_fragment("https://x.org/ops.html#retention:~:text=old", "Backups are kept 35 days.")
    assert url == "https://x.org/ops.html#retention:~:text=Backups%20are%20kept%2035%20days."


# --- a real browser -------------------------------------------------------------------------------------------
PAGE = (
    "<html><head><style>::target-text { background: rgb(255, 0, 255); color: rgb(0, 0, 0); }</style></head><body>"
    + "".join(f"<p>Paragraph {i} says nothing about the question.</p>" for i in range(150))
    + "<h2 id='retention'>Retention</h2><p>Backups are kept for <b>35 days</b> in the vault, then they are "
    "deleted for good by the nightly job.</p><table><tr><td>Midsummer</td><td>2 days</td><td>paid</td></tr></table>"
    + "".join(f"<p>Trailing paragraph {i}.</p>" for i in range(150))
    + "</body></html>"
)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "ops.html").write_text(PAGE, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/ops.html"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.is_file(), reason="needs /usr/bin/chromium: apt-get install -y chromium")
@pytest.mark.parametrize(
    "quote",
    [
        "Backups are kept for 35 days in the vault, then they are deleted for good by the nightly job.",
        "| Midsummer | 2 days | paid |",
    ],
)
def test_chromium_scrolls_to_the_quoted_sentence_and_highlights_it(site: str, quote: str, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    from PIL import Image

    with playwright.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"], headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 900, "height": 700})
            page.goto(with_text_fragment(site, quote))
            page.wait_for_function("window.scrollY > 0", timeout=10_000)
            target = page.locator(
                "p:has-text('Backups are kept')" if "Backups" in quote else "td:has-text('Midsummer')"
            )
            box = target.bounding_box()
            assert box is not None and 0 <= box["y"] < 700, box  # the quoted passage is on screen
            page.wait_for_timeout(300)  # the highlight is painted after the scroll
            page.screenshot(path=str(tmp_path / "shot.png"))
        finally:
            browser.close()
    shot = Image.open(tmp_path / "shot.png").convert("RGB")
    painted = sum(
        1 for y in range(0, shot.height, 2) for x in range(0, shot.width, 2) if shot.getpixel((x, y)) == HIGHLIGHT
    )
    assert painted > 100  # the browser highlighted the quoted text (::target-text)
