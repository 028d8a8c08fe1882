"""``ragidx serve``'s view of the sources, for admins: ``GET /v1/admin/sources``.

Every configured source with its kind, location and schedule, whether a sync of it runs now, when the scheduler
syncs it next, and its last sync (time, status, counts, failures, pages per second). Like every admin route it
takes :func:`ragidx.questions.routes.require_admin`: only a ``serve.keys`` entry with ``role = "admin"`` (403
otherwise, and on a server without keys).

Example:
    >>> from fastapi import FastAPI
    >>> FastAPI().include_router(router)  # ragidx.server.app does this
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request

from ragidx.questions.routes import require_admin
from ragidx.stores.access import Principal

__all__ = ["router", "sources_status"]

router = APIRouter()


def sources_status(engine: Any) -> list[dict[str, Any]]:
    """The sources as ``ragidx sources --json`` lists them, with the scheduler's next sync where one runs."""
    from ingestion.sync.cli import sources_listing
    from ingestion.sync.schedule import scheduler_of

    rows = sources_listing(engine)
    scheduler = scheduler_of(engine)
    planned = scheduler.status() if scheduler is not None else {}
    for row in rows:
        row["next_sync"] = planned.get(row["name"], {}).get("next_sync")
        row["running"] = row["running"] or planned.get(row["name"], {}).get("syncing", False)
    return rows


@router.get("/v1/admin/sources")
async def admin_sources(
    request: Request,
    _admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any]:
    """The sources and their last syncs."""
    engine = request.app.state.engine
    return {"object": "list", "data": await asyncio.to_thread(sources_status, engine)}
