"""``ragidx serve``'s routes for feedback and the question log, and the admin role every admin route checks.

- ``POST /v1/feedback``: ``{"id", "vote": "up"|"down", "comment"?, "wrong_article"?}``, read as the key's reader:
  ``id`` is the chat completion's id. A reader rates only their own answers; any other id is a 404 that says
  nothing of whether someone else asked it. ``wrong_article`` must be an article the answer was drawn from.
- ``GET /v1/admin/questions?since=&until=&outcome=&limit=``: the logged questions, newest first, each with its
  feedback (``outcome`` repeated or comma-separated; times in ISO 8601).
- ``GET /v1/admin/feedback?since=&until=&limit=``: the feedback, newest first, each with its question.

Admin routes take :func:`require_admin`: only a ``serve.keys`` entry with ``role = "admin"`` passes (403 for
every other key, and on a server without keys). The log they read is the server's engine's, of its tenant only.

Example:
    >>> from fastapi import FastAPI
    >>> FastAPI().include_router(router)  # ragidx.server.app does this
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragidx.questions.log import OUTCOMES, QuestionLog, QuestionNotFound
from ragidx.questions.recorder import QuestionLogOff, recorder_for
from ragidx.questions.records import FeedbackRecord, Outcome, QuestionRecord
from ragidx.stores.access import Principal

__all__ = ["feedback_json", "question_json", "require_admin", "router"]

router = APIRouter()

MAX_LIMIT = 1000
"""Most rows one admin listing returns."""
_KEY_ENTRY = re.compile(r"keys\[(\d+)\]")


def require_admin(request: Request) -> Principal:
    """FastAPI dependency: the request's reader, if its key is a ``serve.keys`` entry with ``role = "admin"``.

    Raises:
        HTTPException: 403 for any other key (a reader's, ``api_keys``) and on a server without keys.
    """
    from ragidx.server.app import _KEY, _reader  # the app imports this module

    reader = _reader(request)
    keys = request.app.state.engine.settings.serve.keys
    entry = _KEY_ENTRY.fullmatch(str(request.scope.get("state", {}).get(_KEY) or ""))
    if entry is None or int(entry[1]) >= len(keys) or keys[int(entry[1])].role != "admin":
        raise HTTPException(403, 'this route is for admin keys: use a serve.keys entry with role = "admin"')
    return reader


class _FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=200)
    vote: Literal["up", "down"]
    comment: str | None = Field(default=None, max_length=4000)
    wrong_article: str | None = Field(default=None, min_length=1, max_length=1000)


@router.post("/v1/feedback", response_model=None)
async def feedback(request: Request) -> dict[str, Any] | JSONResponse:
    """Record the key's reader's vote on one of their answers."""
    from ragidx.server.app import _reader
    from ragidx.server.openai_format import error_body

    def refused(status: int, message: str, *, kind: str, param: str | None = None) -> JSONResponse:
        return JSONResponse(error_body(message, kind=kind, param=param), status_code=status)

    engine = request.app.state.engine
    try:
        body = _FeedbackBody.model_validate(await _json(request, engine.settings.serve.max_request_bytes))
    except _BadBody as exc:
        return refused(400, str(exc), kind="invalid_request_error")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return refused(400, f"{where}: {first['msg']}", kind="invalid_request_error", param=where)
    recorder = recorder_for(engine)
    try:
        await asyncio.to_thread(
            recorder.feedback, body.id, body.vote, reader=_reader(request), comment=body.comment,
            wrong_article=body.wrong_article,
        )  # fmt: skip
    except QuestionLogOff:
        return refused(404, "this server keeps no question log, so it records no feedback", kind="not_found_error")
    except QuestionNotFound:
        return refused(
            404, "no answer with this id to rate: give the id of a chat completion this key received",
            kind="not_found_error", param="id",
        )  # fmt: skip
    except ValueError as exc:
        return refused(400, str(exc), kind="invalid_request_error", param="wrong_article")
    return {"object": "feedback", "id": body.id, "vote": body.vote}


@router.get("/v1/admin/questions")
async def admin_questions(
    request: Request,
    since: str | None = None,
    until: str | None = None,
    outcome: Annotated[list[str] | None, Query()] = None,
    limit: int = 100,
    _admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any]:
    """The logged questions (newest first), each with its feedback."""
    log = _log(request)
    outcomes, most = _outcomes(outcome), _limit(limit)
    window = _time("since", since), _time("until", until)

    def read() -> list[dict[str, Any]]:
        records = log.records(since=window[0], until=window[1], outcomes=outcomes, limit=most)
        votes = log.feedback_for([r.id for r in records])
        return [question_json(r, votes.get(r.id, [])) for r in records]

    return {"object": "list", "data": await asyncio.to_thread(read)}


@router.get("/v1/admin/feedback")
async def admin_feedback(
    request: Request,
    since: str | None = None,
    until: str | None = None,
    limit: int = 100,
    _admin: Principal = Depends(require_admin),  # noqa: B008
) -> dict[str, Any]:
    """The feedback (newest first), each with the question it rates."""
    log, most = _log(request), _limit(limit)
    window = _time("since", since), _time("until", until)

    def read() -> list[dict[str, Any]]:
        votes = log.feedback_records(since=window[0], until=window[1], limit=most)
        asked = log.get([f.question_id for f in votes])
        return [
            {**feedback_json(f), "question": question_json(asked[f.question_id]) if f.question_id in asked else None}
            for f in votes
        ]

    return {"object": "list", "data": await asyncio.to_thread(read)}


def question_json(rec: QuestionRecord, feedback: list[FeedbackRecord] | None = None) -> dict[str, Any]:
    """A logged question as the admin routes show it (times in ISO 8601; with ``feedback`` when given)."""
    out: dict[str, Any] = {
        "id": rec.id,
        "time": rec.time.isoformat(),
        "reader": rec.reader,
        "groups": list(rec.groups),
        "question": rec.question,
        "conversation": [{"role": role, "content": text} for role, text in rec.conversation],
        "outcome": rec.outcome,
        "reason": rec.reason,
        "check_score": rec.check_score,
        "articles": [{"kb_id": a.kb_id, "rank": a.rank, "cited": a.cited} for a in rec.articles],
        "timings": dict(rec.timings),
        "model": rec.model,
        "guard_profile": rec.guard_profile,
        "surface": rec.surface,
    }
    if feedback is not None:
        out["feedback"] = [feedback_json(f) for f in feedback]
    return out


def feedback_json(fb: FeedbackRecord) -> dict[str, Any]:
    """A reader's vote as the admin routes show it."""
    return {
        "question_id": fb.question_id,
        "time": fb.time.isoformat(),
        "reader": fb.reader,
        "vote": fb.vote,
        "comment": fb.comment,
        "wrong_article": fb.wrong_article,
    }


class _BadBody(ValueError):
    pass


async def _json(request: Request, limit: int) -> Any:
    body = bytearray()
    async for part in request.stream():
        body.extend(part)
        if len(body) > limit:
            raise _BadBody(f"the request body is larger than {limit} bytes (serve.max_request_bytes)")
    try:
        return json.loads(body)
    except ValueError:
        raise _BadBody('the request body is not valid JSON: send {"id": ..., "vote": "up" or "down"}') from None


def _log(request: Request) -> QuestionLog:
    log = recorder_for(request.app.state.engine).log
    if log is None:
        raise HTTPException(404, "this server keeps no question log (questions.enabled is false)")
    return log


def _time(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise HTTPException(400, f"{name}: {value!r} is not an ISO 8601 time; give e.g. 2026-11-01T00:00Z") from None


def _outcomes(values: list[str] | None) -> list[Outcome] | None:
    if not values:
        return None
    wanted = [v.strip() for value in values for v in value.split(",") if v.strip()]
    unknown = [v for v in wanted if v not in OUTCOMES]
    if unknown:
        raise HTTPException(400, f"outcome {unknown[0]!r}: use {', '.join(OUTCOMES)}")
    return [cast(Outcome, v) for v in wanted]


def _limit(limit: int) -> int:
    if not 1 <= limit <= MAX_LIMIT:
        raise HTTPException(400, f"limit must be from 1 to {MAX_LIMIT}")
    return limit
