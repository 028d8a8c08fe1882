"""``ragidx serve``'s admin routes for gaps and curated answers (every one takes ``require_admin``).

- ``GET /v1/admin/gaps?since=30d&until=&min_size=3&format=json|csv|markdown``: the gaps report of the server's
  question log (its tenant's), ``{"clusters": [{"size", "questions", "articles", ...}]}`` by default; its nearest
  articles are searched as the admin key's reader.
- ``GET /v1/admin/curated``: the curated answers, each with ``state`` (``live``, ``changed``, ``gone``).
- ``POST /v1/admin/curated``: ``{"questions": [...] | "gap": RANK, "since"?, "answer", "citations": [kb_id, ...],
  "editor"?}`` pins an answer (to a gap: its representative questions).
- ``POST /v1/admin/curated/{id}/confirm``: serve it again after a cited article changed.
- ``DELETE /v1/admin/curated/{id}``.

Example:
    >>> from fastapi import FastAPI
    >>> FastAPI().include_router(router)  # ragidx.server.app does this
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragidx.questions.curated import curated_answers
from ragidx.questions.gaps import DEFAULT_MIN_SIZE, GapReport, engine_report, parse_since
from ragidx.questions.routes import require_admin
from ragidx.stores.access import Principal

__all__ = ["router"]

router = APIRouter()


def _period(since: str | None, until: str | None) -> tuple[datetime | None, datetime | None]:
    now = datetime.now(UTC)
    try:
        return (
            parse_since(since, now=now) if since else None,
            parse_since(until, now=now) if until else None,
        )
    except ValueError as exc:
        raise HTTPException(400, str(exc).replace("--since", "since")) from None


async def _report(request: Request, admin: Principal, since: str | None, until: str | None, min_size: int) -> GapReport:
    if min_size < 1:
        raise HTTPException(400, "min_size must be at least 1")
    start, end = _period(since, until)
    engine = request.app.state.engine
    return await asyncio.to_thread(
        engine_report, engine, since=start, until=end, min_size=min_size, user=admin.user, groups=admin.groups
    )


@router.get("/v1/admin/gaps", response_model=None)
async def admin_gaps(
    request: Request,
    since: str | None = "30d",
    until: str | None = None,
    min_size: int = DEFAULT_MIN_SIZE,
    format: Literal["json", "csv", "markdown"] = "json",
    admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any] | PlainTextResponse:
    """The gaps report of the period (JSON, CSV or Markdown)."""
    report = await _report(request, admin, since, until, min_size)
    if format == "csv":
        return PlainTextResponse(report.to_csv(), media_type="text/csv; charset=utf-8")
    if format == "markdown":
        return PlainTextResponse(report.to_markdown(), media_type="text/markdown; charset=utf-8")
    return report.to_dict()


class _PinBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    questions: list[str] = Field(default_factory=list, max_length=100)
    gap: int | None = None
    since: str = "30d"
    answer: str = Field(min_length=1, max_length=20_000)
    citations: list[str] = Field(default_factory=list, max_length=50)
    editor: str = ""


@router.get("/v1/admin/curated")
async def admin_curated(request: Request, _admin: Principal = Depends(require_admin)) -> dict[str, Any]:  # noqa: B008
    """Every curated answer with whether it is served."""
    curated = curated_answers(request.app.state.engine)
    entries = await asyncio.to_thread(curated.entries)
    return {"object": "list", "data": [e.to_dict() for e in entries]}


@router.post("/v1/admin/curated")
async def admin_pin(request: Request, admin: Principal = Depends(require_admin)) -> dict[str, Any]:  # noqa: B008
    """Pin an answer to questions or to a gap."""
    try:
        body = _PinBody.model_validate(await request.json())
    except (ValueError, ValidationError) as exc:
        problems = exc.errors(include_input=False) if isinstance(exc, ValidationError) else []
        fields = ", ".join(".".join(map(str, p["loc"])) + f": {p['msg']}" for p in problems)
        raise HTTPException(
            400, f'the request body is not a curated answer ({fields or "not JSON"}): send {{"questions": [...], '
            '"answer": "...", "citations": [kb_id, ...]}',
        ) from None  # fmt: skip
    questions, gap = list(body.questions), ""
    if body.gap is not None:
        report = await _report(request, admin, body.since, None, DEFAULT_MIN_SIZE)
        found = next((c for c in report.clusters if c.rank == body.gap), None)
        if found is None:
            raise HTTPException(404, f"there is no gap {body.gap} since {body.since}: GET /v1/admin/gaps lists them")
        questions += list(found.questions)
        gap = found.title
    curated = curated_answers(request.app.state.engine)
    try:
        pinned = await asyncio.to_thread(
            curated.add, questions, body.answer, body.citations, editor=body.editor, gap=gap
        )
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    return pinned.to_dict()


@router.post("/v1/admin/curated/{answer_id}/confirm")
async def admin_confirm(
    request: Request,
    answer_id: str,
    _admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any]:
    """Record the cited articles as they are now, so the answer is served again."""
    curated = curated_answers(request.app.state.engine)
    try:
        confirmed = await asyncio.to_thread(curated.confirm, answer_id)
    except KeyError:
        raise HTTPException(404, f"no curated answer {answer_id!r}: GET /v1/admin/curated lists them") from None
    except ValueError as exc:
        raise HTTPException(409, str(exc)) from None
    return confirmed.to_dict()


@router.delete("/v1/admin/curated/{answer_id}")
async def admin_remove(
    request: Request,
    answer_id: str,
    _admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any]:
    """Remove a curated answer."""
    curated = curated_answers(request.app.state.engine)
    if not await asyncio.to_thread(curated.remove, answer_id):
        raise HTTPException(404, f"no curated answer {answer_id!r}: GET /v1/admin/curated lists them")
    return {"object": "curated_answer", "id": answer_id, "deleted": True}
