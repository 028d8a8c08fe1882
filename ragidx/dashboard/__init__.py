"""The Streamlit dashboard's logic: engines from settings, answer shaping, charts, uploads, evaluation.

``streamlit_app.py`` only lays out pages; everything it shows is computed here, and everything here
except :mod:`ragidx.dashboard.views` is plain Python that tests call without Streamlit.
"""
