"""``ragidx serve`` on the command line: it refuses to listen beyond loopback without an API key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.cli import build_parser, cmd_serve, main


def test_serve_parses_its_address(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--data-dir", str(tmp_path), "serve", "--host", "::1", "--port", "8123"])
    assert args.func is cmd_serve and (args.host, args.port) == ("::1", 8123)


def test_serve_beyond_loopback_without_a_key_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGIDX_SERVE__API_KEYS", raising=False)
    monkeypatch.delenv("RAGIDX_SERVE__KEYS", raising=False)
    assert main(["--data-dir", str(tmp_path), "serve", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert "not loopback and no API key" in err and "RAGIDX_SERVE__API_KEYS" in err
    assert not (tmp_path / "lancedb").exists()  # no engine was built


def test_serve_with_a_key_variable_that_is_not_set_stops_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAGIDX_SERVE__API_KEYS", raising=False)
    monkeypatch.delenv("TEST_KEY_ANN", raising=False)
    monkeypatch.setenv("RAGIDX_SERVE__KEYS", '[{"key_env": "TEST_KEY_ANN", "user": "ann"}]')
    assert main(["--data-dir", str(tmp_path), "serve", "--host", "0.0.0.0"]) == 1  # keys: any address may be named
    err = capsys.readouterr().err
    assert "the variable TEST_KEY_ANN is empty or not set" in err
    assert not (tmp_path / "lancedb").exists()  # no engine was built
