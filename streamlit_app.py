"""ragidx dashboard: ``streamlit run streamlit_app.py``.

Navigation only. The configured settings, with the Tuning page's choices for this browser session, choose the
engine (built once, cached); the pages live in ``ragidx/dashboard/pages/`` and their logic in ``ragidx.dashboard``.

It listens on loopback only (``.streamlit/config.toml``); the dashboard guide says how to expose it deliberately,
behind a sign-in.

This file has two roles. ``streamlit run`` imports it to find ``app`` (an ``st.App``): Streamlit served with one
route more, ``documents/<kb_id>``, which serves the ingested files a citation links to, at their page
(:mod:`ragidx.dashboard.documents`). Every browser session then runs it as the page script (``__main__``).
"""

import streamlit as st

from ragidx.dashboard import views

if __name__ == "__main__":  # a session's run of the page script
    st.set_page_config(page_title="ragidx", page_icon=":material/menu_book:", layout="wide")
    page = st.navigation(
        [
            st.Page("ragidx/dashboard/pages/chat.py", title="Chat", icon=":material/chat:", default=True),
            st.Page("ragidx/dashboard/pages/tuning.py", title="Tuning", icon=":material/tune:"),
            st.Page("ragidx/dashboard/pages/ingest.py", title="Ingest", icon=":material/upload_file:"),
            st.Page("ragidx/dashboard/pages/sources.py", title="Sources", icon=":material/sync:"),
            st.Page("ragidx/dashboard/pages/evaluation.py", title="Evaluation", icon=":material/monitoring:"),
            st.Page("ragidx/dashboard/pages/gaps.py", title="Gaps", icon=":material/help_center:"),
        ]
    )
    views.select_engine()
    page.run()
else:  # imported by `streamlit run`: the app it serves
    from ragidx.dashboard.documents import document_routes

    app = st.App(__file__, routes=document_routes(views.shared_engine, st.get_option("server.baseUrlPath")))
