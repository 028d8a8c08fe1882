"""A real ``ragidx serve`` process on a free loopback port, for tests and benchmarks that run several engines."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def ragidx_serve(env: dict[str, str], data_dir: Path) -> Iterator[str]:
    """``ragidx serve`` over ``data_dir`` with ``env``; yields its address once it listens.

    Its stderr is read to the end in a thread after the start, so a long run's log never fills the pipe and stalls
    the server.

    Raises:
        RuntimeError: the server ended before it listened (the message holds the end of its log).
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "ragidx.cli", "--data-dir", str(data_dir), "serve", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:
            seen.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                threading.Thread(target=lambda: [None for _ in process.stderr or ()], daemon=True).start()  # drain
                yield found[1]
                break
        else:
            raise RuntimeError("ragidx serve did not start: " + "".join(seen)[-3000:])
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
