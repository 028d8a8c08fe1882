"""The bundled MiniLM, offline: torch int8/fp32 and the ONNX Runtime backend."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragidx.providers.embeddings import LocalEmbedding, resolve_model_path
from ragidx.providers.onnx_embedding import OnnxSentenceEncoder, ensure_onnx_model

KB = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb" / "libreoffice_en_sample.jsonl"


@pytest.fixture(scope="session")
def minilm() -> LocalEmbedding:
    return LocalEmbedding(backend="torch", num_threads=2)


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache folder holding the int8 export of the bundled MiniLM (exported once per session)."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    ensure_onnx_model(resolve_model_path("minilm"), cache, quantize=True)
    return cache


@pytest.fixture(scope="session")
def onnx_minilm(onnx_cache: Path) -> LocalEmbedding:
    return LocalEmbedding(backend="onnx", cache_dir=str(onnx_cache), num_threads=2)


@pytest.fixture(scope="session")
def kb_chunks() -> list[str]:
    """~1,000-character pieces of the real LibreOffice help sample."""
    pieces: list[str] = []
    for line in KB.read_text().splitlines():
        text = json.loads(line)["text"]
        pieces += [text[i : i + 1000] for i in range(0, len(text), 1000) if len(text[i : i + 1000]) > 200]
    return pieces[::4][:128]  # spread over the file; 128 keeps the fp32 reference under ~20 CPU-s


def cos(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_constructor_loads_nothing() -> None:
    for backend in ("onnx", "torch"):
        emb = LocalEmbedding(backend=backend, cache_dir="/nonexistent/never-created")
        assert emb._model is None
    assert not Path("/nonexistent/never-created").exists()


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(ValueError, match="onnx"):
        LocalEmbedding(backend="tensorrt")


def test_unknown_model_name_offline_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="pass a folder with a sentence-transformers model"):
        resolve_model_path("sentence-transformers/not-here")


# --- the ONNX cache, with a fake exporter (fast) -------------------------------------------------


def _fake_model_dir(tmp_path: Path, weights: bytes = b"weights-v1") -> Path:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "bert"}')
    (folder / "model.safetensors").write_bytes(weights)
    return folder


class CountingExporter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model_dir: Path, out: Path, quantize: bool) -> None:
        self.calls += 1
        out.write_bytes(b"onnx:" + (model_dir / "model.safetensors").read_bytes() + bytes([quantize]))


def test_export_is_cached_and_reused(tmp_path: Path) -> None:
    folder, cache, exporter = _fake_model_dir(tmp_path), tmp_path / "cache", CountingExporter()
    first = ensure_onnx_model(folder, cache, exporter=exporter)
    second = ensure_onnx_model(folder, cache, exporter=exporter)
    assert first == second and exporter.calls == 1
    assert sorted(p.name for p in cache.iterdir()) == [first.name, first.name + ".sha256"]  # no temp files left


def test_changed_weights_or_int8_flag_export_a_new_file(tmp_path: Path) -> None:
    folder, cache, exporter = _fake_model_dir(tmp_path), tmp_path / "cache", CountingExporter()
    int8 = ensure_onnx_model(folder, cache, exporter=exporter)
    fp32 = ensure_onnx_model(folder, cache, quantize=False, exporter=exporter)
    _fake_model_dir(tmp_path, weights=b"weights-v2")
    changed = ensure_onnx_model(folder, cache, exporter=exporter)
    assert len({int8, fp32, changed}) == 3 and exporter.calls == 3
    assert changed.read_bytes() == b"onnx:weights-v2\x01"


def test_corrupt_cached_file_is_exported_again(tmp_path: Path) -> None:
    folder, cache, exporter = _fake_model_dir(tmp_path), tmp_path / "cache", CountingExporter()
    path = ensure_onnx_model(folder, cache, exporter=exporter)
    good = path.read_bytes()
    path.write_bytes(good[:-3] + b"xyz")  # same size, different bytes
    assert ensure_onnx_model(folder, cache, exporter=exporter) == path
    assert exporter.calls == 2 and path.read_bytes() == good


def test_missing_digest_is_exported_again(tmp_path: Path) -> None:
    folder, cache, exporter = _fake_model_dir(tmp_path), tmp_path / "cache", CountingExporter()
    path = ensure_onnx_model(folder, cache, exporter=exporter)
    path.with_name(path.name + ".sha256").unlink()
    ensure_onnx_model(folder, cache, exporter=exporter)
    assert exporter.calls == 2


def test_failed_export_says_what_to_do_and_leaves_no_file(tmp_path: Path) -> None:
    def broken(model_dir: Path, out: Path, quantize: bool) -> None:
        out.write_bytes(b"half")
        raise OSError("disk full")

    folder, cache = _fake_model_dir(tmp_path), tmp_path / "cache"
    with pytest.raises(RuntimeError, match=r"disk full.*use backend='torch'"):
        ensure_onnx_model(folder, cache, exporter=broken)
    assert list(cache.iterdir()) == []


def test_folder_without_weights_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no weights"):
        ensure_onnx_model(tmp_path, tmp_path / "cache", exporter=CountingExporter())


def test_encoder_validates_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        OnnxSentenceEncoder(tmp_path, batch_size=0)
    with pytest.raises(TypeError, match="wrap a single text in a list"):
        OnnxSentenceEncoder(tmp_path).encode("one text")


# --- real model (slow) ---------------------------------------------------------------------------


@pytest.mark.slow
def test_minilm_embeds_offline_and_ranks_related_text_higher(minilm: LocalEmbedding) -> None:
    q = minilm.get_query_embedding("How do I insert a table in a text document?")
    docs = minilm.get_text_embedding_batch(
        ["To insert a table, choose Table - Insert Table.", "Export the slide show as a PDF file."]
    )
    assert len(q) == 384 and abs(np.linalg.norm(q) - 1.0) < 1e-3
    assert cos(q, docs[0]) > cos(q, docs[1]) + 0.2


@pytest.mark.slow
def test_int8_stays_close_to_fp32(minilm: LocalEmbedding) -> None:
    texts = [
        "Conditional formatting highlights cells that meet a condition.",
        "Use the Navigator to jump between headings.",
        "Printing a spreadsheet on one page: Format - Page Style - Sheet - Scale.",
    ]
    fp32 = LocalEmbedding(backend="torch", quantize=False, num_threads=2).get_text_embedding_batch(texts)
    int8 = minilm.get_text_embedding_batch(texts)
    assert min(cos(a, b) for a, b in zip(fp32, int8, strict=True)) > 0.95


@pytest.mark.slow
def test_onnx_tokenizer_sizes_chunks_like_the_model(onnx_minilm: LocalEmbedding) -> None:
    text = "Choose Format - Cells. " * 200  # longer than the model's window: no truncation, no warning
    ids = onnx_minilm.tokenizer.encode(text, add_special_tokens=False, verbose=False)
    assert len(ids) > 256 and ids[:2] == onnx_minilm.tokenizer.encode("Choose Format", add_special_tokens=False)


@pytest.mark.slow
def test_onnx_int8_matches_sentence_transformers_fp32(onnx_minilm: LocalEmbedding, kb_chunks: list[str]) -> None:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(resolve_model_path("minilm"), device="cpu")
    st.max_seq_length = 256
    queries = [
        "How do I insert a table in a text document?",
        "highlight cells that meet a condition",
        "use column labels as names in formulas",
        "print a spreadsheet on one page",
    ]
    ref = st.encode(kb_chunks + queries, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    got = np.asarray(onnx_minilm.get_text_embedding_batch(kb_chunks + queries))
    cosines = np.sum(ref * got, axis=1)
    assert cosines.mean() >= 0.98 and cosines.min() >= 0.95, (cosines.mean(), cosines.min())
    n = len(kb_chunks)
    assert list(np.argmax(got[n:] @ got[:n].T, axis=1)) == list(np.argmax(ref[n:] @ ref[:n].T, axis=1))


@pytest.mark.slow
def test_onnx_keeps_input_order_with_mixed_lengths(onnx_minilm: LocalEmbedding, kb_chunks: list[str]) -> None:
    texts = ["a", kb_chunks[0], "Insert a table.", kb_chunks[1][:300], "", kb_chunks[2] * 2, "PDF"]
    together = np.asarray(onnx_minilm.get_text_embedding_batch(texts))  # sorted by length inside
    one_by_one = np.asarray([onnx_minilm.get_text_embedding(t) for t in texts])
    sims = together @ one_by_one.T
    # int8 activations are quantized per batch, so a row is close to, not equal to, its solo embedding
    assert list(np.argmax(sims, axis=1)) == list(range(len(texts)))
    assert np.diag(sims).min() > 0.95


def test_onnx_encoding_tokenizes_like_the_hugging_face_tokenizer(tmp_path: Path, kb_chunks: list[str]) -> None:
    folder = resolve_model_path("minilm")
    direct = OnnxSentenceEncoder(folder, num_threads=1)  # reads tokenizer.json, no transformers
    direct._load_fast()
    copied = tmp_path / "no-tokenizer-json"  # the fallback: the Hugging Face tokenizer's backend
    shutil.copytree(folder, copied, ignore=shutil.ignore_patterns("tokenizer.json", "*.safetensors", "*.bin"))
    via_hf = OnnxSentenceEncoder(copied, num_threads=1)
    via_hf._load_fast()
    assert direct._tokenizer is None and via_hf._tokenizer is not None
    texts = ["Insert a table.", "Café naïve résumé – “quotes” 中文 ёлка", "", kb_chunks[0] * 3, "PDF/A-2b"]
    for text in texts:
        ids = direct._fast.encode(text).ids
        assert ids == via_hf._fast.encode(text).ids
        assert ids == via_hf.tokenizer(text, truncation=True, max_length=256)["input_ids"]
    assert len(direct._fast.encode(kb_chunks[0] * 3).ids) == 256  # truncated at the model's limit
    assert direct._pad_id == via_hf._pad_id == via_hf.tokenizer.pad_token_id


@pytest.mark.slow
def test_onnx_reuses_the_cached_export(onnx_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ragidx.providers.onnx_embedding as onnx_embedding

    def no_export(*args: object) -> None:
        raise AssertionError("exported again although the cache is valid")

    monkeypatch.setattr(onnx_embedding, "export_onnx", no_export)
    before = {p.name: p.stat().st_mtime_ns for p in onnx_cache.iterdir()}
    emb = LocalEmbedding(backend="onnx", cache_dir=str(onnx_cache), num_threads=1)
    assert len(emb.get_text_embedding("reused")) == 384
    assert {p.name: p.stat().st_mtime_ns for p in onnx_cache.iterdir()} == before


@pytest.mark.slow
def test_onnx_corrupt_real_export_is_replaced(onnx_cache: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    shutil.copytree(onnx_cache, cache)
    (model,) = cache.glob("*.onnx")
    good = model.read_bytes()
    model.write_bytes(good[: len(good) // 2])  # truncated, as by a crash while copying
    calls: list[Path] = []

    def copy_good(model_dir: Path, out: Path, quantize: bool) -> None:  # stands in for the 30 s export
        calls.append(out)
        out.write_bytes(good)

    path = ensure_onnx_model(resolve_model_path("minilm"), cache, exporter=copy_good)
    assert path == model and len(calls) == 1 and path.read_bytes() == good
    enc = OnnxSentenceEncoder(resolve_model_path("minilm"), cache_dir=cache, num_threads=1)
    assert enc.encode(["still works"]).shape == (1, 384)


def test_onnxruntimes_quantization_advice_is_not_shown(caplog: pytest.LogCaptureFixture) -> None:
    """onnxruntime logs it on the root logger at every int8 export; other root warnings still pass."""
    import logging

    from ragidx.providers.onnx_embedding import PREPROCESS_ADVICE, without_root_warning

    with caplog.at_level(logging.WARNING), without_root_warning(PREPROCESS_ADVICE):
        logging.warning("Please consider to run pre-processing before quantization. Refer to example: ...")
        logging.warning("something else")
    logging.warning("Please consider to run pre-processing before quantization. (after: shown again)")
    assert [r.getMessage() for r in caplog.records] == [
        "something else",
        "Please consider to run pre-processing before quantization. (after: shown again)",
    ]
