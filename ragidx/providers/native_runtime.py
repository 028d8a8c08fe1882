"""llama.cpp's CPU backend built for this machine, swapped into the installed llama-cpp-python.

The llama-cpp-python wheel ragidx installs is portable (AVX2). On a CPU with AVX-512 the same release
built with ``-march=native`` reads prompts about twice as fast, and reading the prompt is most of an
answer's wait (measured with llama-bench, 2 threads, Qwen2.5-1.5B Q4_K_M: a 2-core AMD EPYC with AVX-512
VNNI 75 -> 154 prompt tokens/s; an Intel Xeon with AMX 59 -> 134). Only ggml's three libraries depend on
the CPU and they build in under a minute, so instead of rebuilding the whole package (20-45 minutes):

1. :func:`fetch_source` downloads the sdist of the *installed* release (pip, from PyPI or ``--sdist``),
2. :func:`build_native` builds ``ggml``, ``ggml-base`` and ``ggml-cpu`` with :data:`CMAKE_ARGS`,
3. :func:`check_runtime` loads the model in a child process with the new libraries (a staged copy of the
   package) and with the installed ones, and times the same prompt,
4. :func:`install_native` puts them in place only when they answered and read faster, keeping the
   portable files beside them for :func:`restore_portable`.

The check also times both weight layouts, the GGUF's own (``plain``) and llama.cpp's runtime repacking
(``repacked``, its "extra buffer types", which include Intel's AMX copies), at reading a prompt and at writing,
and records the faster one for each job in the marker (:func:`measured_layouts`): no layout is best at both. On
the 2-core AVX-512 EPYC the plain layout reads about 1.4 times as fast (AMD: 154 against 101 tokens/s) and the
repacked one writes faster (36 against 26), so the local server reads with one and writes with the other
(:mod:`ragidx.providers.split_decode`). The build keeps ``GGML_CPU_REPACK`` on for that.

``ragidx runtime native`` (and ``make install``) runs all four steps; ``ragidx runtime portable`` undoes
them; ``ragidx runtime`` says which build is in use. A native build runs only on CPUs like the one it was
built on: do not copy such a virtual environment to another machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from ragidx.providers.machine import cpu_name
from ragidx.providers.split_decode import LAYOUTS, Layout

CMAKE_ARGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",  # find each other in llama_cpp/lib, like the wheel's (not in the build folder)
    "-DGGML_NATIVE=ON",
    "-DGGML_CPU_REPACK=ON",  # a layout the check may pick for writing (see the module docstring)
    "-DLLAMA_BUILD_COMMON=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_MTMD=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
"""How the native libraries are configured."""

GGML_LIBS: tuple[str, ...] = ("libggml", "libggml-base", "libggml-cpu")
TARGETS: tuple[str, ...] = ("ggml", "ggml-base", "ggml-cpu")
MARKER = "ragidx_runtime.json"
BACKUP_DIR = "portable-ggml"
MIN_SPEEDUP = 1.1
"""The native libraries are installed only when they read the check's prompt at least this much faster."""

# Parts of the llama.cpp source tree the CPU libraries' build does not read (most of the 76 MB sdist).
_SKIP_PARTS = ("models", "docs", "media", "examples", "tools", "tests", "benches", "app", "skills", "pocs")


class NativeRuntimeError(RuntimeError):
    """The native build could not be made, checked or installed; the installed libraries are unchanged."""


@dataclass(frozen=True)
class Runtime:
    """The llama-cpp-python in use: its release, where its libraries are, and which ggml build they are."""

    version: str
    lib_dir: Path
    build: str  # "portable" (as installed by pip) or "native" (installed by install_native)
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"llama_cpp": self.version, "lib_dir": str(self.lib_dir), "build": self.build, **self.detail}


MIN_WRITE_SPEEDUP = 1.1
"""A second layout writes the answers only when it writes at least this much faster than the reading one (it costs
a second copy of the model in memory)."""


@dataclass(frozen=True)
class RuntimeCheck:
    """One child process's load of the model: prompt tokens read per second (in the faster layout), a short
    greedy answer, and each weight layout's reading and writing speed (``{"plain": {"prefill_tps": …,
    "decode_tps": …}, "repacked": {…}}``)."""

    prefill_tps: float
    text: str
    module: str
    layouts: dict[str, dict[str, float]] = field(default_factory=dict)

    def chosen_layouts(self) -> tuple[str, str] | None:
        """The layouts to read and to write with: the faster reader, and the faster writer when it writes at least
        :data:`MIN_WRITE_SPEEDUP` times as fast as the reader does (else the reader writes too). None when the
        check measured fewer than two layouts."""
        if len(self.layouts) < 2:
            return None
        read = max(self.layouts, key=lambda k: self.layouts[k]["prefill_tps"])
        write = max(self.layouts, key=lambda k: self.layouts[k]["decode_tps"])
        if self.layouts[write]["decode_tps"] < MIN_WRITE_SPEEDUP * self.layouts[read]["decode_tps"]:
            write = read
        return read, write


_GGML_FILE = re.compile(r"^(?:" + "|".join(re.escape(n) for n in GGML_LIBS) + r")\.so(?:\.\d+)*$")


def ggml_files(lib_dir: Path) -> list[Path]:
    """The installed ggml library files (every name: ``libggml-cpu.so``, ``.so.0``, ``.so.0.25.3``)."""
    return sorted(p for p in lib_dir.iterdir() if _GGML_FILE.match(p.name) and p.is_file())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _cpu_lib(lib_dir: Path) -> Path | None:
    candidates = [p for p in ggml_files(lib_dir) if p.name.startswith("libggml-cpu.so")]
    return candidates[0] if candidates else None


def installed_runtime(package_dir: Path | None = None) -> Runtime:
    """The llama-cpp-python in use (or in ``package_dir``); ``native`` only while the marker matches the files
    (a later ``pip install --force-reinstall`` puts the portable ones back and this says so)."""
    if package_dir is None:  # found without importing it: a broken library must not stop its own repair
        spec = importlib.util.find_spec("llama_cpp")
        if spec is None or spec.origin is None:
            raise NativeRuntimeError("llama-cpp-python is not installed: pip install 'ragidx[local-llm]'")
        package_dir = Path(spec.origin).parent
    version = _read_version(package_dir)
    lib_dir = package_dir / "lib"
    marker = _read_marker(lib_dir)
    cpu = _cpu_lib(lib_dir)
    if marker and cpu is not None and marker.get("libggml_cpu_sha256") == _digest(cpu):
        return Runtime(version, lib_dir, "native", {k: v for k, v in marker.items() if k != "libggml_cpu_sha256"})
    return Runtime(version, lib_dir, "portable")


def runtime_id() -> str:
    """The llama.cpp in use, release and ggml build, for keying measured speeds (a native build reads faster);
    read from the files, without loading the library."""
    try:
        runtime = installed_runtime()
    except NativeRuntimeError:
        return "llama_cpp ?"
    cpu = _cpu_lib(runtime.lib_dir)
    size = cpu.stat().st_size if cpu is not None else 0
    return f"llama_cpp {runtime.version}|{runtime.build}:{size}"


def measured_layouts(package_dir: Path | None = None) -> tuple[Layout, Layout] | None:
    """The weight layouts the installed native build measured fastest at reading and at writing here
    (:class:`RuntimeCheck`), or None: a portable build, or a native one installed before layouts were measured."""
    try:
        detail = installed_runtime(package_dir).detail
    except NativeRuntimeError:
        return None
    read, write = detail.get("read_layout"), detail.get("write_layout")
    if read in LAYOUTS and write in LAYOUTS:
        return cast("Layout", read), cast("Layout", write)
    return None


def _read_version(package_dir: Path) -> str:
    for line in (package_dir / "__init__.py").read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise NativeRuntimeError(f"no __version__ in {package_dir / '__init__.py'}")


def _read_marker(lib_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((lib_dir / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def fetch_source(version: str, work_dir: Path, sdist: Path | None = None) -> Path:
    """The llama.cpp source tree of llama-cpp-python ``version`` (its sdist's ``vendor/llama.cpp``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    if sdist is None:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
        cmd += [f"llama-cpp-python=={version}", "-d", str(work_dir)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(work_dir.glob(f"llama_cpp_python-{version}.tar.gz"))
        if done.returncode != 0 or not found:
            raise NativeRuntimeError(
                f"could not download the source of llama-cpp-python {version} ({done.stderr.strip()[-300:]}); "
                "give it with --sdist FILE"
            )
        sdist = found[0]
    top = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(top) and m.name[len(top) :].split("/")[0] not in _SKIP_PARTS
        ]
        if not members:
            raise NativeRuntimeError(f"{sdist} holds no {top} (not a llama-cpp-python {version} sdist?)")
        tar.extractall(work_dir, members=members, filter="data")
    return work_dir / top


def build_native(source: Path, build_dir: Path, *, jobs: int | None = None) -> Path:
    """Configure and build the three ggml libraries; returns the folder that holds them."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise NativeRuntimeError("cmake is not installed (apt install cmake, or pip install cmake ninja)")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    steps = [
        [cmake, "-S", str(source), "-B", str(build_dir), *generator, *CMAKE_ARGS],
        [cmake, "--build", str(build_dir), "--target", *TARGETS, "--parallel", str(jobs or os.cpu_count() or 2)],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise NativeRuntimeError(f"`{' '.join(step[:4])} ...` failed:\n{(done.stdout + done.stderr)[-1500:]}")
    built = sorted(build_dir.rglob("libggml-cpu.so*"))
    if not built:
        raise NativeRuntimeError(f"the build finished but made no libggml-cpu.so under {build_dir}")
    return built[0].parent


def stage_package(package_dir: Path, built_dir: Path, stage_root: Path) -> Path:
    """A copy of the ``llama_cpp`` package under ``stage_root`` with the built ggml libraries in its ``lib``;
    fails when the build does not provide every installed ggml file name (another release)."""
    staged = stage_root / "llama_cpp"
    shutil.copytree(package_dir, staged, ignore=shutil.ignore_patterns("__pycache__", BACKUP_DIR, MARKER))
    for installed in ggml_files(staged / "lib"):
        new = built_dir / installed.name
        if not new.exists():
            raise NativeRuntimeError(
                f"the build made no {installed.name}: its ggml is not the installed one's (llama-cpp-python "
                "and the sdist differ?)"
            )
        shutil.copyfile(new.resolve(), installed)
    return staged


_CHECK = r"""
import json, sys, time
import llama_cpp
from llama_cpp import Llama
from ragidx.providers.split_decode import LAYOUTS, layout
model, threads = sys.argv[1], int(sys.argv[2])
text = "The server reads its configuration file at start and again when it receives a reload signal. " * 40
layouts = {}
for name in LAYOUTS:
    with layout(name):
        llm = Llama(model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, verbose=False)
    tokens = llm.tokenize(text.encode())[:480]
    prefill = decode = 0.0
    for _ in range(2):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        prefill = max(prefill, len(tokens) / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(48):
            llm.eval([llm.sample(temp=0.0)])
        decode = max(decode, 48 / (time.perf_counter() - t0))
    layouts[name] = {"prefill_tps": round(prefill, 1), "decode_tps": round(decode, 1)}
    if name == LAYOUTS[-1]:
        llm.reset()
        out = llm.create_completion("Q: What is the capital of France?\nA:", max_tokens=8, temperature=0.0)
    del llm
best = max(v["prefill_tps"] for v in layouts.values())
print(json.dumps({"prefill_tps": best, "text": out["choices"][0]["text"], "module": llama_cpp.__file__,
                  "layouts": layouts}))
"""


def check_runtime(model: Path, *, threads: int, stage_root: Path | None = None, timeout_s: float = 600) -> RuntimeCheck:
    """Load ``model`` in a child process (with the staged package first on the path, if given) in each weight
    layout, time a 480-token prompt and 48 tokens written after it, twice, and write a short greedy answer. A
    crash (an instruction this CPU lacks) or an empty answer raises :class:`NativeRuntimeError`."""
    env = dict(os.environ)
    if stage_root is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stage_root), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-c", _CHECK, str(model), str(threads)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise NativeRuntimeError(f"the check did not finish in {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise NativeRuntimeError(f"the check failed (exit {done.returncode}): {done.stderr.strip()[-800:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    check = RuntimeCheck(float(row["prefill_tps"]), str(row["text"]), str(row["module"]), row.get("layouts", {}))
    if stage_root is not None and not check.module.startswith(str(stage_root)):
        raise NativeRuntimeError(f"the check loaded {check.module}, not the staged package")
    if not check.text.strip():
        raise NativeRuntimeError("the model wrote nothing with these libraries")
    return check


def install_native(package_dir: Path, built_dir: Path, report: dict[str, Any]) -> Runtime:
    """Put the ggml libraries of ``built_dir`` (the checked, staged copy) into ``package_dir/lib``, keeping
    the portable ones in ``portable-ggml/`` the first time, and write the marker with ``report``."""
    lib_dir = package_dir / "lib"
    backup = lib_dir / BACKUP_DIR
    if installed_runtime(package_dir).build == "portable":  # also after a reinstall: back up what pip put there
        backup.mkdir(exist_ok=True)
        for path in ggml_files(lib_dir):
            shutil.copy2(path, backup / path.name)
    for path in ggml_files(lib_dir):
        _replace(path, (built_dir / path.name).resolve())
    cpu = _cpu_lib(lib_dir)
    assert cpu is not None  # ggml_files found it above
    marker = {**report, "libggml_cpu_sha256": _digest(cpu)}
    (lib_dir / MARKER).write_text(json.dumps(marker, indent=1, sort_keys=True))
    return installed_runtime(package_dir)


def _replace(target: Path, source: Path) -> None:
    """``target`` becomes a copy of ``source`` in one rename: a loaded library never sees a half-written file."""
    tmp = target.with_name(target.name + ".ragidx-tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def restore_portable(package_dir: Path) -> bool:
    """Put the kept portable ggml libraries back; False when there is nothing to restore."""
    lib_dir = package_dir / "lib"
    backup = lib_dir / BACKUP_DIR
    saved = sorted(backup.glob("*.so*")) if backup.is_dir() else []
    if not saved:
        (lib_dir / MARKER).unlink(missing_ok=True)
        return False
    for path in saved:
        _replace(lib_dir / path.name, path)
    (lib_dir / MARKER).unlink(missing_ok=True)
    return True


@dataclass
class NativeReport:
    """What ``ragidx runtime native`` did, as one JSON line."""

    installed: bool
    reason: str
    portable_prefill_tps: float | None = None
    native_prefill_tps: float | None = None
    seconds: float = 0.0
    runtime: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_native(
    model: Path,
    *,
    threads: int,
    work_dir: Path | None = None,
    sdist: Path | None = None,
    force: bool = False,
    jobs: int | None = None,
) -> NativeReport:
    """Fetch, build, check and (when faster) install the native ggml libraries; see the module docstring."""
    t0 = time.perf_counter()
    runtime = installed_runtime()
    package_dir = runtime.lib_dir.parent
    with tempfile.TemporaryDirectory(prefix="ragidx-native-", dir=work_dir) as tmp:
        root = Path(tmp)
        source = fetch_source(runtime.version, root / "src", sdist)
        built = build_native(source, root / "build", jobs=jobs)
        if runtime.build == "native":  # compare with the portable build, not with an earlier native one
            restore_portable(package_dir)
            runtime = installed_runtime()
        staged_root = root / "stage"
        staged = stage_package(package_dir, built, staged_root)
        shutil.rmtree(root / "build")  # the check must not find anything there: it sees what would be installed
        portable = check_runtime(model, threads=threads)
        native = check_runtime(model, threads=threads, stage_root=staged_root)
        faster = native.prefill_tps >= MIN_SPEEDUP * portable.prefill_tps
        report = NativeReport(
            installed=faster or force,
            reason="faster" if faster else ("--force" if force else "not faster than the portable build: kept it"),
            portable_prefill_tps=round(portable.prefill_tps, 1),
            native_prefill_tps=round(native.prefill_tps, 1),
        )
        if report.installed:
            detail: dict[str, Any] = {
                "cmake_args": list(CMAKE_ARGS),
                "layouts": native.layouts,
                "cpu": cpu_name(),
                "portable_prefill_tps": report.portable_prefill_tps,
                "native_prefill_tps": report.native_prefill_tps,
                "check_threads": threads,
            }
            if (chosen := native.chosen_layouts()) is not None:
                detail["read_layout"], detail["write_layout"] = chosen
            runtime = install_native(package_dir, staged / "lib", detail)
    report.seconds = round(time.perf_counter() - t0, 1)
    report.runtime = runtime.as_dict()
    return report
