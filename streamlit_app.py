"""ragidx dashboard: ``streamlit run streamlit_app.py``.

Navigation only. The sidebar's settings choose the engine (built once, cached); the pages live in
``ragidx/dashboard/pages/`` and their logic in ``ragidx.dashboard``.
"""

import streamlit as st

from ragidx.dashboard import views

st.set_page_config(page_title="ragidx", page_icon=":material/menu_book:", layout="wide")
page = st.navigation(
    [
        st.Page("ragidx/dashboard/pages/chat.py", title="Chat", icon=":material/chat:", default=True),
        st.Page("ragidx/dashboard/pages/ingest.py", title="Ingest", icon=":material/upload_file:"),
        st.Page("ragidx/dashboard/pages/evaluation.py", title="Evaluation", icon=":material/monitoring:"),
    ]
)
views.sidebar()
page.run()
