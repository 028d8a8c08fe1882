"""robots.txt for a website source: fetched once per host and sync, read with ``urllib.robotparser``.

A missing robots.txt (any 4xx, as RFC 9309 says) allows everything; one that cannot be fetched (a 5xx, a
timeout, a refused connection) makes the whole site unavailable for this sync (:class:`SourceUnavailable`), so that
nothing is deleted on a day the site is down.

Example:
    >>> rules = RobotsRules.parse("User-agent: *\\nDisallow: /private/\\n", "ragidx-sync")
    >>> rules.allows("https://x.org/private/a.html"), rules.allows("https://x.org/docs/a.html")
    (False, True)
"""

from __future__ import annotations

import threading
import urllib.robotparser
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ingestion.sync.base import SourceUnavailable

if TYPE_CHECKING:
    import httpx

__all__ = ["RobotsCache", "RobotsRules", "origin_of"]

MAX_ROBOTS_BYTES = 512 * 1024
"""The most of a robots.txt read (RFC 9309 asks crawlers to read at least 500 KiB)."""


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class RobotsRules:
    """One host's robots.txt rules for one user agent."""

    parser: urllib.robotparser.RobotFileParser
    user_agent: str

    @classmethod
    def parse(cls, text: str, user_agent: str) -> RobotsRules:
        parser = urllib.robotparser.RobotFileParser()
        parser.parse(text.splitlines())
        return cls(parser, user_agent)

    @classmethod
    def allow_all(cls, user_agent: str) -> RobotsRules:
        return cls.parse("", user_agent)

    def allows(self, url: str) -> bool:
        """Whether the user agent may fetch ``url``."""
        return self.parser.can_fetch(self.user_agent, url)

    @property
    def crawl_delay(self) -> float:
        """The ``Crawl-delay`` asked of the user agent, in seconds (0 when none)."""
        delay = self.parser.crawl_delay(self.user_agent)
        try:
            return max(0.0, float(delay)) if delay is not None else 0.0
        except (TypeError, ValueError):
            return 0.0


class RobotsCache:
    """The robots.txt of every host a sync visits, each fetched once (thread-safe).

    Args:
        client: The HTTP client the sync fetches with (its User-Agent header is sent).
        user_agent: The name robots.txt rules are matched against.
    """

    def __init__(self, client: httpx.Client, user_agent: str) -> None:
        self._client = client
        self._user_agent = user_agent
        self._rules: dict[str, RobotsRules] = {}
        self._lock = threading.Lock()
        self._host_locks: dict[str, threading.Lock] = {}

    def rules(self, url: str) -> RobotsRules:
        """The rules of ``url``'s host, fetched on first use.

        Raises:
            SourceUnavailable: the host's robots.txt could not be fetched (5xx, timeout, refused).
        """
        origin = origin_of(url)
        with self._lock:
            if origin in self._rules:
                return self._rules[origin]
            host_lock = self._host_locks.setdefault(origin, threading.Lock())
        with host_lock:
            with self._lock:
                if origin in self._rules:
                    return self._rules[origin]
            rules = self._fetch(origin)
            with self._lock:
                self._rules[origin] = rules
            return rules

    def _fetch(self, origin: str) -> RobotsRules:
        import httpx

        robots_url = f"{origin}/robots.txt"
        try:
            response = self._client.get(robots_url, follow_redirects=True)
        except httpx.TimeoutException:
            raise SourceUnavailable(
                f"{robots_url} did not answer in time: the site may be down; nothing was changed, the next sync "
                "tries again"
            ) from None
        except httpx.HTTPError as exc:
            raise SourceUnavailable(
                f"{robots_url} could not be fetched ({type(exc).__name__}): check the site's address and that it "
                "is up; nothing was changed, the next sync tries again"
            ) from None
        if 400 <= response.status_code < 500:
            return RobotsRules.allow_all(self._user_agent)  # no robots.txt: everything is allowed
        if response.status_code != 200:
            raise SourceUnavailable(
                f"{robots_url} answered {response.status_code}: the site's rules for crawlers are unknown, so "
                "nothing was read or changed; the next sync tries again"
            )
        text = response.content[:MAX_ROBOTS_BYTES].decode("utf-8", errors="replace")
        return RobotsRules.parse(text, self._user_agent)
