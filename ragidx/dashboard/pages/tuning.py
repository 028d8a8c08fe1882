"""The tuning page script, registered by ``streamlit_app.py`` (layout in :mod:`ragidx.dashboard.views`)."""

from ragidx.dashboard import views

views.tuning_page(views.current_engine())
