"""The committed ``.streamlit/config.toml``: the dashboard listens on loopback only, headless, without telemetry."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.dashboard.conftest import ROOT

READ_OPTIONS = """
from streamlit import config
config.get_config_options(force_reparse=True)
for name in ("server.address", "server.headless", "browser.gatherUsageStats"):
    print(name, config.get_option(name), config.get_where_defined(name))
"""


def test_the_dashboard_listens_on_loopback_unless_told_otherwise() -> None:
    """Streamlit reads the file from the working directory (``streamlit run streamlit_app.py`` in the checkout);
    without it Streamlit listens on every interface."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    out = subprocess.run(
        [sys.executable, "-c", READ_OPTIONS], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    options = {line.split(" ", 2)[0]: line.split(" ", 2)[1:] for line in out.splitlines()}
    config_file = str(ROOT / ".streamlit" / "config.toml")
    assert options["server.address"] == ["127.0.0.1", config_file]
    assert options["server.headless"] == ["True", config_file]
    assert options["browser.gatherUsageStats"] == ["False", config_file]
