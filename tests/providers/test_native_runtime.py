"""The native ggml build: staged, checked and swapped into llama-cpp-python's lib folder, and put back."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from ragidx.providers import native_runtime as nr
from ragidx.providers.local_llm import assemble_gguf

GGML_NAMES = [f"{lib}.so{suffix}" for lib in nr.GGML_LIBS for suffix in ("", ".0", ".0.25.3")]


def fake_package(root: Path, content: bytes = b"portable") -> Path:
    """A llama_cpp package as the wheel lays it out: copies (not links) of every library name."""
    package = root / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "0.3.36"\n')
    for name in GGML_NAMES:
        (package / "lib" / name).write_bytes(content + name.encode())
    (package / "lib" / "libllama.so.0").write_bytes(b"llama")
    return package


def fake_build(root: Path, content: bytes = b"native") -> Path:
    built = root / "bin"
    built.mkdir(parents=True)
    for lib in nr.GGML_LIBS:  # as CMake lays it out: one file and two links
        real = built / f"{lib}.so.0.25.3"
        real.write_bytes(content + lib.encode())
        (built / f"{lib}.so.0").symlink_to(real.name)
        (built / f"{lib}.so").symlink_to(f"{lib}.so.0")
    return built


def test_ggml_files_are_every_name_of_the_three_libraries_only(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    (package / "lib" / "libggml-cpu.so.0.ragidx-tmp").write_bytes(b"half-written")
    assert [p.name for p in nr.ggml_files(package / "lib")] == sorted(GGML_NAMES)


def test_an_installed_package_is_portable_until_a_native_build_is_installed(tmp_path: Path) -> None:
    package = fake_package(tmp_path / "site")
    runtime = nr.installed_runtime(package)
    assert (runtime.version, runtime.build) == ("0.3.36", "portable")

    staged = nr.stage_package(package, fake_build(tmp_path / "build"), tmp_path / "stage")
    assert (staged / "lib" / "libggml-cpu.so.0").read_bytes() == b"nativelibggml-cpu"
    assert (package / "lib" / "libggml-cpu.so.0").read_bytes() == b"portablelibggml-cpu.so.0"  # untouched

    runtime = nr.install_native(package, staged / "lib", {"cpu": "test"})
    assert runtime.build == "native" and runtime.detail["cpu"] == "test"
    assert (package / "lib" / "libggml-cpu.so").read_bytes() == b"nativelibggml-cpu"
    assert (package / "lib" / "libllama.so.0").read_bytes() == b"llama"
    assert not list((package / "lib").glob("*.ragidx-tmp"))

    assert nr.restore_portable(package)
    assert nr.installed_runtime(package).build == "portable"
    assert (package / "lib" / "libggml-cpu.so.0").read_bytes() == b"portablelibggml-cpu.so.0"
    assert not (package / "lib" / nr.MARKER).exists()


def test_a_reinstalled_portable_library_is_seen_and_backed_up_again(tmp_path: Path) -> None:
    package = fake_package(tmp_path / "site")
    staged = nr.stage_package(package, fake_build(tmp_path / "build"), tmp_path / "stage")
    nr.install_native(package, staged / "lib", {})
    for name in GGML_NAMES:  # pip install --force-reinstall writes the wheel's files over ours
        (package / "lib" / name).write_bytes(b"wheel 2" + name.encode())
    assert nr.installed_runtime(package).build == "portable"
    nr.install_native(package, staged / "lib", {})
    nr.restore_portable(package)
    assert (package / "lib" / "libggml.so").read_bytes() == b"wheel 2libggml.so"


def test_a_build_of_another_release_is_refused_before_anything_changes(tmp_path: Path) -> None:
    package = fake_package(tmp_path / "site")
    built = tmp_path / "bin"
    built.mkdir()
    (built / "libggml-cpu.so.0.26.0").write_bytes(b"other")
    with pytest.raises(nr.NativeRuntimeError, match="made no libggml"):
        nr.stage_package(package, built, tmp_path / "stage")
    assert nr.installed_runtime(package).build == "portable"


def test_restoring_with_nothing_kept_says_so(tmp_path: Path) -> None:
    assert not nr.restore_portable(fake_package(tmp_path))


def test_the_source_is_the_vendored_llama_cpp_without_models_and_docs(tmp_path: Path) -> None:
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    top = "llama_cpp_python-0.3.36/vendor/llama.cpp"
    with tarfile.open(sdist, "w:gz") as tar:
        for name in ("CMakeLists.txt", "ggml/CMakeLists.txt", "src/llama.cpp", "models/ggml-vocab.gguf", "docs/a.md"):
            data = name.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    source = nr.fetch_source("0.3.36", tmp_path / "work", sdist)
    assert (source / "ggml" / "CMakeLists.txt").read_text() == "ggml/CMakeLists.txt"
    assert (source / "src" / "llama.cpp").exists()
    assert not (source / "models").exists() and not (source / "docs").exists()
    with pytest.raises(nr.NativeRuntimeError, match="holds no"):
        nr.fetch_source("0.3.35", tmp_path / "work2", sdist)


def test_the_native_build_keeps_the_repacked_layout_for_the_check_to_choose() -> None:
    assert "-DGGML_NATIVE=ON" in nr.CMAKE_ARGS and "-DGGML_CPU_REPACK=ON" in nr.CMAKE_ARGS
    assert "-DCMAKE_INSTALL_RPATH=$ORIGIN" in nr.CMAKE_ARGS  # the libraries find each other once moved


def check(plain: tuple[float, float], repacked: tuple[float, float]) -> nr.RuntimeCheck:
    layouts = {
        name: {"prefill_tps": read, "decode_tps": write}
        for name, (read, write) in (("plain", plain), ("repacked", repacked))
    }
    return nr.RuntimeCheck(max(plain[0], repacked[0]), "Paris", "llama_cpp", layouts)


def test_the_faster_reader_reads_and_a_clearly_faster_writer_writes() -> None:
    # the 2-core AVX-512 EPYC: the file's layout reads faster, the repacked one writes faster
    assert check((139.2, 22.0), (89.8, 25.7)).chosen_layouts() == ("plain", "repacked")
    # a writer less than 10 % faster is not worth a second copy of the model
    assert check((139.2, 22.0), (89.8, 23.5)).chosen_layouts() == ("plain", "plain")
    # an AVX2 CPU where the repacked layout is faster at both: one model
    assert check((61.0, 13.0), (70.0, 14.9)).chosen_layouts() == ("repacked", "repacked")
    assert nr.RuntimeCheck(100.0, "Paris", "llama_cpp").chosen_layouts() is None  # nothing measured


def test_measured_layouts_come_from_a_matching_native_marker_only(tmp_path: Path) -> None:
    package = fake_package(tmp_path / "site")
    assert nr.measured_layouts(package) is None  # portable: nothing measured
    built = fake_build(tmp_path / "build")
    nr.install_native(package, built, {"read_layout": "plain", "write_layout": "repacked"})
    assert nr.measured_layouts(package) == ("plain", "repacked")
    nr.install_native(package, built, {"read_layout": "plain", "write_layout": "sideways"})  # damaged
    assert nr.measured_layouts(package) is None
    nr.install_native(package, built, {})  # installed before layouts were measured
    assert nr.measured_layouts(package) is None
    (package / "lib" / "libggml-cpu.so.0").write_bytes(b"reinstalled")  # pip put the portable files back
    nr.install_native(package, built, {"read_layout": "plain", "write_layout": "repacked"})
    for name in GGML_NAMES:
        (package / "lib" / name).write_bytes(b"portable again" + name.encode())
    assert nr.measured_layouts(package) is None  # the marker no longer matches the files


@pytest.mark.slow
def test_the_check_loads_the_model_from_the_staged_copy_and_times_its_reading(tmp_path: Path) -> None:
    installed = nr.installed_runtime()
    model = assemble_gguf("qwen2.5-0.5b")
    here = nr.check_runtime(model, threads=2)
    assert here.prefill_tps > 1 and here.text.strip()
    assert set(here.layouts) == {"plain", "repacked"}  # each layout timed at reading and at writing
    assert all(v["prefill_tps"] > 1 and v["decode_tps"] > 1 for v in here.layouts.values())
    assert here.prefill_tps == max(v["prefill_tps"] for v in here.layouts.values())
    assert Path(here.module).parent == installed.lib_dir.parent
    # a staged copy made of the installed libraries themselves: the child imports the copy, not the original
    nr.stage_package(installed.lib_dir.parent, installed.lib_dir, tmp_path)
    staged = nr.check_runtime(model, threads=2, stage_root=tmp_path)
    assert staged.module.startswith(str(tmp_path)) and staged.text.strip()


@pytest.mark.slow
def test_runtime_status_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    from ragidx.cli import main

    assert main(["runtime"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["llama_cpp"] and row["build"] in ("portable", "native")
