"""The sources page script, registered by ``streamlit_app.py`` (layout in :mod:`ragidx.dashboard.sources`)."""

from ragidx.dashboard import sources, views

sources.sources_page(views.current_engine())
