"""``[questions]``: the question log's settings (``Settings.questions``).

Example:
    >>> QuestionLogSettings().enabled, QuestionLogSettings().retention_days
    (True, 90)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from ragidx.questions.redaction import compile_patterns

HASH_KEY_VARIABLE = "RAGIDX_QUESTIONS__HASH_KEY"
"""The environment variable that holds the key readers are hashed with (``questions.hash_key``)."""


class QuestionLogSettings(BaseModel):
    """What the question log keeps, for how long, and how it names readers (docs: the question log).

    Example:
        >>> QuestionLogSettings(redact_patterns=[r"CUST-\\d{6}"]).redact_patterns
        ['CUST-\\\\d{6}']
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="Log every question asked through `ragidx serve`, the dashboard, `ragidx ask`, the MCP ask tool "
        "(and Engine.ask(log=True)) "
        "in the article store's database, with its outcome, the articles shown and the reader's feedback. Off: "
        "nothing is logged, and feedback is refused.",
    )
    retention_days: int | None = Field(
        default=90,
        ge=1,
        description="Days a logged question and its feedback are kept; older ones are deleted as new ones are "
        "written, and never listed. None: kept until deleted by hand.",
    )
    hash_readers: bool = Field(
        default=False,
        description="Store each reader's user and groups as a keyed hash ('h:...', HMAC-SHA256 with hash_key) "
        "instead of their names: the log still tells one reader from another, and a reader can still rate their "
        "own answers, but it names nobody.",
    )
    hash_key: SecretStr | None = Field(
        default=None,
        description=f"The key readers are hashed with (hash_readers); set it in {HASH_KEY_VARIABLE}, not in a "
        "file, and keep it: another key gives every reader another hash.",
    )
    redact_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions of the team's own personal data (customer numbers, ...): each match "
        "becomes [redacted] before a question, conversation or comment is stored, on top of the built-in "
        "e-mail, phone, card, long-number and key rules.",
    )

    @field_validator("redact_patterns")
    @classmethod
    def _patterns_compile(cls, value: list[str]) -> list[str]:
        compile_patterns(value)
        return value

    @model_validator(mode="after")
    def _key_for_hashing(self) -> QuestionLogSettings:
        if self.hash_readers and (self.hash_key is None or not self.hash_key.get_secret_value().strip()):
            raise ValueError(
                f"questions.hash_readers needs a key: set {HASH_KEY_VARIABLE} to a long random secret (and keep it)"
            )
        return self
