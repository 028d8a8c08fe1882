"""``ragidx mcp``'s settings (``[mcp]`` in ``ragidx.toml``, ``RAGIDX_MCP__*``): a small model of its own, so the
settings module never imports the MCP SDK.

Example:
    >>> McpSettings(user="ann", groups=["hr"]).principal().principals
    ('user:ann', 'group:hr')
    >>> McpSettings().serve
    False
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

if TYPE_CHECKING:
    from ragidx.stores.access import Principal

__all__ = ["McpSettings"]


class McpSettings(BaseModel):
    """The Model Context Protocol server: who reads over stdio, and whether ``ragidx serve`` answers MCP too.

    Over HTTP every request reads as its API key's reader (``serve.keys``, as ``ragidx serve``); ``user`` and
    ``groups`` are the reader of the stdio server only, which has no keys: whoever starts the process (Claude
    Desktop, Cursor) reads as them.
    """

    model_config = ConfigDict(extra="forbid")

    user: str | None = Field(
        default=None, description="`ragidx mcp` over stdio reads as this user (user:NAME); none: the public reader."
    )
    groups: list[str] = Field(default_factory=list, description="... and as a member of these groups (group:NAME).")
    serve: bool = Field(
        default=False,
        description="`ragidx serve` also answers MCP (streamable HTTP) at /mcp, with the same keys and readers.",
    )
    page_size: int = Field(
        default=50, ge=1, le=1000, description="Articles per page when an MCP client lists the articles."
    )

    @field_validator("user")
    @classmethod
    def _named(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("mcp.user must be a non-empty name, or left out for the public reader")
        return value

    @field_validator("groups")
    @classmethod
    def _group_names(cls, value: list[str]) -> list[str]:
        if any(not g.strip() for g in value):
            raise ValueError("mcp.groups must be non-empty names")
        return list(dict.fromkeys(value))

    def principal(self) -> Principal:
        """The stdio server's reader."""
        from ragidx.stores.access import Principal  # not at import: the settings module stays light

        return Principal.of(self.user, self.groups)
