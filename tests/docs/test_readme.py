"""The README's command-line examples work on the bundled sample: every ``--filter FIELD=VALUE`` they show names
a field and value that the sample's articles carry (``ragidx search`` refuses a field no article carries)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "ragidx/data/kb/libreoffice_en_sample.jsonl"


def test_every_filter_the_readme_shows_matches_articles_of_the_bundled_sample() -> None:
    filters = re.findall(r"--filter (\w+)=(\w+)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert filters, "the README shows a metadata filter"
    rows = [json.loads(line) for line in SAMPLE.read_text(encoding="utf-8").splitlines()]
    for field, value in filters:
        matching = [r for r in rows if str(r.get(field)) == value]
        assert matching, f"README: --filter {field}={value} matches no article of {SAMPLE.name}"
        assert len(matching) < len(rows)  # a filter that narrows


def test_every_sample_article_names_its_product() -> None:
    for name in ("libreoffice_en_sample.jsonl", "libreoffice_ru_sample.jsonl"):
        rows = [json.loads(line) for line in (SAMPLE.parent / name).read_text(encoding="utf-8").splitlines()]
        # the product is the help's module, read off the page's path
        modules = {"writer": "swriter", "calc": "scalc", "impress": "simpress", "draw": "sdraw", "shared": "shared"}
        assert all(f"/text/{modules[r['product']]}/" in r["url"] for r in rows)
