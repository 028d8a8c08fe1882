"""Tracing's settings (``[tracing]`` in ``ragidx.toml``, ``RAGIDX_TRACING__*``): whether ragidx traces, and what a
trace may hold. Where traces go is OpenTelemetry's own business: the standard ``OTEL_*`` variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ``OTEL_TRACES_EXPORTER``, ``OTEL_SDK_DISABLED`` ...).

Example:
    >>> TracingSettings().enabled
    False
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = ["TracingSettings"]


class TracingSettings(BaseModel):
    """OpenTelemetry traces of questions, searches, ingest and sync runs (:mod:`ragidx.telemetry`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Trace every question (a span per turn, its searches, budget, model calls, checks), ingest and "
        "sync run, exported over OTLP as the OTEL_* variables say (OTEL_EXPORTER_OTLP_ENDPOINT ...). Off: "
        "OpenTelemetry's SDK is not even imported. OTEL_SDK_DISABLED=true turns it off too.",
    )
    record_questions: bool = Field(
        default=False,
        description="Put the question's text on its span (ragidx.question) and the search queries on theirs. Off: "
        "questions may hold what must not reach a tracing backend.",
    )
    reader_key: SecretStr | None = Field(
        default=None,
        description="The key of the reader's hash on spans (ragidx.reader.hash, HMAC-SHA256): the same reader "
        "hashes alike under one key, so a trace can be matched to a reader by who holds it. None: a random key "
        "per process (hashes match within one run only).",
    )
