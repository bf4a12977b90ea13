"""Sentence embeddings for the router's second classifier: static token embeddings, mean-pooled.

The encoder is WordLlama's bundled model ``l2_supercat`` at 256 dimensions (package ``wordllama`` on PyPI, MIT
licence, https://github.com/dleemiller/WordLlama): a 32,000-token vocabulary (the Llama 2 tokenizer) whose token
embeddings were distilled from large language models' input embeddings.  A sentence's vector is the mean of its
tokens' vectors (no special tokens), divided by its l2 norm: what ``WordLlama.embed(texts, norm=True)`` returns
(``wordllama/inference.py``: ``avg_pool`` over the attention mask, then the norm).  The two files ship inside the
wheel, so nothing is downloaded: this module reads them from the installed package with ``tokenizers`` and a
memory map of the ``.safetensors`` file, and does not import ``wordllama`` itself (its package import takes about a
second; its loader also looks for the tokenizer under a directory name the wheel does not use and would then try
the network).

Memory: the token vectors (32,000 x 256 float16, 16 MB) are mapped from the package's file, not copied
(:func:`map_safetensor`): a process reads only the pages of the tokens its messages use, and processes on one machine
share them through the page cache; the values are the file's, so the vectors are those of
``safetensors.numpy.load_file`` bit for bit (``tests/nodes/test_router_head.py``).

Why: on 2,000 BANKING77 train queries held out from a router fitted on the rest (``bench/router_heads.py``), the
TF-IDF router alone routes 0.964 to the right agent; half its probabilities plus half those of a one-hidden-layer
network on these vectors route 0.9725 (a second fold of 3,000: see ``nodes.router_fit``).
"""

from __future__ import annotations

import importlib.util
import json
import struct
import threading
from pathlib import Path

import numpy as np

from graph.contracts.errors import ConfigError

__all__ = ["ENCODER_NAME", "ENCODER_DIM", "SentenceEncoder", "encoder_files", "load_encoder", "map_safetensor"]

#: Recorded in a router file that needs this encoder; a file naming another encoder is refused on load.
ENCODER_NAME = "wordllama-l2_supercat-256"
#: Vector length.
ENCODER_DIM = 256
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TENSOR = "embedding.weight"

_lock = threading.Lock()
_loaded: SentenceEncoder | None = None


def encoder_files() -> tuple[Path, Path]:
    """``(tokenizer.json, weights.safetensors)`` inside the installed ``wordllama`` package.

    Raises:
        ConfigError: ``wordllama`` is not installed, or one of its two files is missing.
    """
    spec = importlib.util.find_spec("wordllama")  # locates the package without running its __init__
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    if not roots:
        raise ConfigError("this router needs the sentence encoder of the package wordllama, which is not installed "
                          "(pip install wordllama, or re-install switchboard)")
    root = Path(roots[0])
    files = (root.joinpath(*_TOKENIZER), root.joinpath(*_WEIGHTS))
    for f in files:
        if not f.is_file():
            raise ConfigError(f"the sentence encoder file {f} is missing (re-install wordllama)")
    return files


#: safetensors dtype names -> numpy (https://github.com/huggingface/safetensors, "Format"); the ones a token-vector
#: file may hold.
_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "BF16": None}
#: Upper bound on a safetensors header (the format's own limit is 100 MB; ours holds one tensor).
_MAX_HEADER = 1 << 20


def map_safetensor(path: Path, name: str) -> np.ndarray:
    """The tensor ``name`` of the ``.safetensors`` file ``path`` as a read-only memory map (nothing copied).

    The format (https://github.com/huggingface/safetensors, "Format"): 8 bytes, the little-endian length ``N`` of a
    JSON header, the header ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, ...}``, then the data, each
    tensor row-major little-endian at ``8 + N + begin``.

    Raises:
        ValueError: not such a file, ``name`` missing, an unsupported dtype, or offsets that do not fit the shape or
            the file.
        OSError: the file cannot be read.
    """
    size = path.stat().st_size
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError("shorter than a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if not 2 <= n <= min(_MAX_HEADER, size - 8):
            raise ValueError(f"header length {n} out of range")
        header = json.loads(fh.read(n))
    spec = header.get(name) if isinstance(header, dict) else None
    if not isinstance(spec, dict):
        raise ValueError(f"no tensor {name!r}")
    dtype = _DTYPES.get(str(spec.get("dtype")))
    if dtype is None:
        raise ValueError(f"tensor {name!r} has dtype {spec.get('dtype')!r}")
    shape, (begin, end) = tuple(int(x) for x in spec["shape"]), (int(x) for x in spec["data_offsets"])
    itemsize = np.dtype(dtype).itemsize
    if begin < 0 or end - begin != int(np.prod(shape)) * itemsize or 8 + n + end > size:
        raise ValueError(f"tensor {name!r} offsets do not fit its shape {shape} or the file")
    return np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r", offset=8 + n + begin, shape=shape)


class SentenceEncoder:
    """Mean-pooled, l2-normalised token embeddings (see the module docstring).

    Args:
        embedding: ``(vocab, dim)`` token vectors (kept in their dtype, float16 for the bundled file: 16 MB, and
            as given: a memory map stays one; a sentence's rows are widened to float32 before the mean, as
            ``WordLlamaInference`` does for the whole matrix).
        tokenizer: a ``tokenizers.Tokenizer`` whose ids index ``embedding``.
    """

    def __init__(self, embedding: np.ndarray, tokenizer) -> None:  # tokenizers.Tokenizer
        self._embedding = embedding if embedding.flags.c_contiguous else np.ascontiguousarray(embedding)
        self._tokenizer = tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()

    @property
    def dim(self) -> int:
        """Vector length."""
        return int(self._embedding.shape[1])

    def encode(self, texts: list[str]) -> np.ndarray:
        """Vectors ``(len(texts), dim)`` float32 of unit l2 norm; a text without a token gets the zero vector."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        vocab = self._embedding.shape[0]
        for i, enc in enumerate(self._tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            ids = np.clip(np.asarray(enc.ids, dtype=np.int64), 0, vocab - 1)
            if ids.size:
                out[i] = self._embedding[ids].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out


def load_encoder() -> SentenceEncoder:
    """The process's one encoder, loaded on first use (figures: ``python bench/router_speed.py``): the tokenizer
    (about 20 MB of the process's memory) and the token vectors mapped from the package's file (16 MB of float16 on
    disk, read page by page as tokens are used).

    Raises:
        ConfigError: the package or its files are missing, or a file cannot be read.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            tok_path, weights_path = encoder_files()
            try:
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(tok_path))
                embedding = map_safetensor(weights_path, _TENSOR)
            except Exception as exc:  # noqa: BLE001 - a damaged file of any kind: one line naming it
                raise ConfigError(f"cannot read the sentence encoder ({tok_path.parent.parent}): "
                                  f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
            if embedding.ndim != 2 or embedding.shape[1] != ENCODER_DIM:
                raise ConfigError(f"the sentence encoder {weights_path} has shape {embedding.shape}, "
                                  f"expected (vocab, {ENCODER_DIM})")
            _loaded = SentenceEncoder(embedding, tokenizer)
        return _loaded
