from __future__ import annotations

import re

import pytest

from ragidx.tools.cap import RetrievalCap


def test_cap_limits_top_k() -> None:
    cap = RetrievalCap()
    assert cap.get() is None and cap.limit(7) == 7
    cap.set(2)
    assert cap.limit(7) == 2 and cap.limit(1) == 1
    cap.set(None)
    assert cap.limit(7) == 7


def test_cap_rejects_zero() -> None:
    with pytest.raises(ValueError, match=re.escape("a retrieval cap must be >= 1 or None, got 0")):
        RetrievalCap().set(0)
