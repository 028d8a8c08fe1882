"""The gaps page script, registered by ``streamlit_app.py`` (layout in :mod:`ragidx.dashboard.gaps`)."""

from ragidx.dashboard import gaps, views

gaps.gaps_page(views.current_engine())
