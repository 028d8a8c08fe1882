"""The dashboard's Sources page: every ``[[sources]]`` entry with its last sync (read-only).

What ``ragidx sources`` lists (:func:`ingestion.sync.cli.sources_listing`): kind, location, schedule, whether it
syncs now, and its last sync's time, status, counts, pages per second and failures. Syncing is ``ragidx sync`` or
``ragidx serve``'s schedule; the page has no button, as the dashboard has no sign-in.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

__all__ = ["source_rows", "sources_page"]

NO_SOURCES = (
    "No sources yet. Declare websites, folders or LlamaIndex readers as `[[sources]]` tables in `ragidx.toml`, then "
    "run `ragidx sync` (or give them a `schedule` for `ragidx serve`). See the guide: Sources."
)


def source_rows(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per source, from ``sources_listing``."""
    rows = []
    for source in listing:
        last = source.get("last_sync") or {}
        rows.append(
            {
                "source": source["name"],
                "kind": source["kind"],
                "where": source["location"],
                "schedule": source["schedule"] or "manual",
                "last sync (UTC)": "syncing now" if source["running"] else last.get("finished_at", "never"),
                "status": last.get("status", ""),
                **{k: last.get(k) for k in ("new", "changed", "unchanged", "deleted", "failed", "skipped")},
                "pages/s": last.get("pages_per_second"),
            }
        )
    return rows


def sources_page(engine: Any) -> None:
    """The sources and their last syncs, with each failed item and what to do about it."""
    from ingestion.sync.cli import sources_listing

    st.title("Sources")
    listing = sources_listing(engine)
    if not listing:
        st.info(NO_SOURCES)
        return
    st.dataframe(source_rows(listing), hide_index=True, width="stretch")
    for source in listing:
        last = source.get("last_sync") or {}
        if last.get("error"):
            st.error(f"{source['name']}: {last['error']}")
        failures = last.get("failures") or []
        if failures:
            with st.expander(f"{source['name']}: {last.get('failed', len(failures))} items failed at the last sync"):
                st.code("\n".join(f"{f['key']}: {f.get('reason', '')}" for f in failures), language=None)
