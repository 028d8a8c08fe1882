"""The dashboard's Gaps page: what the knowledge base is missing, and editors' curated answers.

The gaps report of a period (:func:`ragidx.questions.gaps.engine_report`): one row per gap, then each gap with its
questions and nearest articles, a form that pins a curated answer to it, and the report as JSON, CSV or Markdown.
Below, the curated answers (:mod:`ragidx.questions.curated`) with whether each is served, and buttons to confirm
one whose cited article changed or to remove one.

The dashboard has no roles: like its other pages it is for whoever may reach it (loopback only by default; the
dashboard guide says how to put it behind a sign-in).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import streamlit as st

from ragidx.questions.gaps import GapReport

PERIODS = {"7 days": 7, "30 days": 30, "90 days": 90}


def gap_rows(report: GapReport) -> list[dict[str, Any]]:
    """One row per gap, for a table."""
    return [
        {
            "#": c.rank,
            "suggested article": c.title,
            "questions": c.size,
            "readers": c.readers,
            "trend": c.direction,
            "per " + report.bucket: " ".join(str(n) for _, n in c.trend),
            "nearest article": (c.articles[0].title or c.articles[0].kb_id) if c.articles else "",
        }
        for c in report.clusters
    ]


def gaps_page(engine: Any) -> None:
    """The gaps of a period, a curated answer per gap, the exports, and the curated answers."""
    from ragidx.questions.curated import curated_answers
    from ragidx.questions.gaps import engine_report

    st.title("Gaps")
    left, right = st.columns(2)
    days = PERIODS[left.selectbox("Period", list(PERIODS), index=1, key="gaps_period")]
    min_size = int(right.number_input("Fewest questions per gap", min_value=1, value=3, key="gaps_min_size"))
    report = engine_report(engine, since=datetime.now(UTC) - timedelta(days=days), min_size=min_size)
    st.caption(
        f"{report.questions} unanswered or down-voted questions; {report.clustered} of them in "
        f"{len(report.clusters)} gaps."
    )
    curated = curated_answers(engine)
    if report.clusters:
        st.dataframe(gap_rows(report), hide_index=True, width="stretch")
        for c in report.clusters:
            with st.expander(f"{c.rank}. {c.title} ({c.size} questions)"):
                st.markdown("**Asked as**")
                st.code("\n".join(c.questions), language=None)
                if c.articles:
                    st.markdown("**Nearest articles** (stale or incomplete?)")
                    st.code("\n".join(f"{a.kb_id}  {a.title}" for a in c.articles), language=None)
                with st.form(f"gap_pin_{c.rank}"):
                    text = st.text_area("Curated answer", key=f"gap_answer_{c.rank}")
                    cites = st.text_input("Cited articles (ids, comma-separated)", key=f"gap_cites_{c.rank}")
                    if st.form_submit_button("Pin to this gap"):
                        try:
                            ids = [k.strip() for k in cites.split(",") if k.strip()]
                            curated.add(c.questions, text, ids, gap=c.title)
                            st.success("Pinned: questions like these now get this answer.")
                        except ValueError as exc:
                            st.error(str(exc))
        st.download_button("Report as JSON", json.dumps(report.to_dict()), "gaps.json", "application/json")
        st.download_button("Report as CSV", report.to_csv(), "gaps.csv", "text/csv")
        st.download_button("Report as Markdown", report.to_markdown(), "gaps.md", "text/markdown")
    else:
        st.info("No gap was asked about often enough in this period.")
    _curated_list(curated)


def _curated_list(curated: Any) -> None:
    st.subheader("Curated answers")
    entries = curated.entries()
    if not entries:
        st.info("None yet: pin one to a gap above, or with `ragidx curated add`.")
        return
    for entry in entries:
        answer = entry.answer
        state = "served" if entry.state == "live" else f"not served: {', '.join(entry.stale)} {entry.state}"
        with st.expander(f"{answer.questions[0]} ({state})"):
            st.write(answer.text)
            st.caption("Cites: " + (", ".join(c.kb_id for c in answer.citations) or "nothing"))
            confirm, remove = st.columns(2)
            if entry.state != "live" and confirm.button("Confirm it still holds", key=f"curated_confirm_{answer.id}"):
                try:
                    curated.confirm(answer.id)
                    st.rerun()
                except ValueError as exc:
                    st.error(str(exc))
            if remove.button("Remove", key=f"curated_remove_{answer.id}"):
                curated.remove(answer.id)
                st.rerun()
