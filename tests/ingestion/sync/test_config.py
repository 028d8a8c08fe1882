"""Sources in the settings: ``[[sources]]`` in ragidx.toml and ``RAGIDX_SOURCES`` (JSON), each checked with an error
that names the source and says what to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingestion.sync.config import SourceConfig, schedule_interval_s
from ragidx.config import Settings, SettingsError


def test_sources_from_the_toml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "ragidx.toml"
    config.write_text(
        '[[sources]]\nname = "help"\nkind = "website"\nsitemap = "https://help.example/sitemap.xml"\n'
        'include = ["https://help.example/docs/"]\nallowed = [" group: support "]\nschedule = "0 3 * * *"\n'
        'metadata = { product = "writer", version = "7.6" }\n'
        "[sources.website]\nconcurrency = 2\ndelay_s = 0.5\n"
        '[[sources]]\nname = "handbook"\nkind = "folder"\npath = "/srv/handbook"\nschedule = "6h"\n'
    )
    monkeypatch.setenv("RAGIDX_CONFIG", str(config))
    help_site, handbook = Settings().sources
    assert (help_site.website.concurrency, help_site.website.delay_s, help_site.allowed) == (2, 0.5, ["group:support"])
    assert help_site.metadata == {"product": "writer", "version": "7.6"} and help_site.schedule == "0 3 * * *"
    assert handbook.path == Path("/srv/handbook") and schedule_interval_s(str(handbook.schedule)) == 6 * 3600


def test_sources_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGIDX_SOURCES", '[{"name": "wiki", "kind": "llamaindex", "reader": "a.b.Reader"}]')
    assert [s.name for s in Settings().sources] == ["wiki"]
    monkeypatch.setenv("RAGIDX_SOURCES", '[{"name": "docs", "kind": "folder"}]')
    with pytest.raises(SettingsError, match=r"RAGIDX_SOURCES: sources\[0\]: source 'docs' \(folder\) needs path"):
        Settings()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "blog", "url": "https://x"}, "Input should be 'website', 'folder' or 'llamaindex'"),
        ({"kind": "website"}, "source 'a' (website) needs url or sitemap"),
        ({"kind": "llamaindex"}, "source 'a' (llamaindex) needs reader"),
        ({"kind": "llamaindex", "reader": "Reader"}, "reader must be a class path"),
        ({"kind": "folder", "path": "/x", "url": "https://x"}, "url is for website sources; remove it"),
        ({"kind": "folder", "path": "/x", "reader_args": {"a": 1}}, "reader_args is for llamaindex sources"),
        ({"kind": "website", "url": "ftp://x"}, "url must be an http:// or https:// URL"),
        ({"kind": "folder", "path": "/x", "schedule": "daily"}, "neither an interval ('30m', '6h', '1d') nor a cron"),
        ({"kind": "folder", "path": "/x", "schedule": "10s"}, "at most once a minute"),
        ({"kind": "folder", "path": "/x", "allowed": ["team:x"]}, "'user:NAME' or 'group:NAME'"),
        ({"kind": "folder", "path": "/x", "metadata": {"Allowed": ["group:x"]}}, "looks like a misspelling"),
        ({"kind": "folder", "path": "/x", "metadata": {"allowed": ["group:x"]}}, "as its 'allowed' field"),
        ({"kind": "folder", "path": "/x", "name": "my docs"}, "source name 'my docs'"),
    ],
)
def test_a_bad_source_is_refused_with_what_to_write(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        SourceConfig(**{"name": "a", **fields})  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_two_sources_may_not_share_a_name() -> None:
    same = {"name": "docs", "kind": "folder", "path": "/x"}
    with pytest.raises(SettingsError, match="two sources are named 'docs'"):
        Settings(sources=[same, same])
