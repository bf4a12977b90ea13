"""Sentence embeddings for the router's second classifier: static token embeddings, mean-pooled.

The encoder is WordLlama's bundled model ``l2_supercat`` at 256 dimensions (package ``wordllama`` on PyPI, MIT
licence, https://github.com/dleemiller/WordLlama): a 32,000-token vocabulary (the Llama 2 tokenizer) whose token
embeddings were distilled from large language models' input embeddings.  A sentence's vector is the mean of its
tokens' vectors (no special tokens), divided by its l2 norm: what ``WordLlama.embed(texts, norm=True)`` returns
(``wordllama/inference.py``: ``avg_pool`` over the attention mask, then the norm).  The two files ship inside the
wheel, so nothing is downloaded: this module reads them from the installed package with ``tokenizers`` and
``safetensors`` and does not import ``wordllama`` itself (its package import takes about a second; its loader also
looks for the tokenizer under a directory name the wheel does not use and would then try the network).

Why: on 2,000 BANKING77 train queries held out from a router fitted on the rest (``bench/router_heads.py``), the
TF-IDF router alone routes 0.964 to the right agent; half its probabilities plus half those of a one-hidden-layer
network on these vectors route 0.9725 (a second fold of 3,000: see ``nodes.router_fit``).
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path

import numpy as np

from graph.errors import ConfigError

__all__ = ["ENCODER_NAME", "ENCODER_DIM", "SentenceEncoder", "encoder_files", "load_encoder"]

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


class SentenceEncoder:
    """Mean-pooled, l2-normalised token embeddings (see the module docstring).

    Args:
        embedding: ``(vocab, dim)`` token vectors (kept in their dtype, float16 for the bundled file: 16 MB; a
            sentence's rows are widened to float32 before the mean, as ``WordLlamaInference`` does for the whole
            matrix).
        tokenizer: a ``tokenizers.Tokenizer`` whose ids index ``embedding``.
    """

    def __init__(self, embedding: np.ndarray, tokenizer) -> None:  # tokenizers.Tokenizer
        self._embedding = np.ascontiguousarray(embedding)
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
    """The process's one encoder, loaded on first use (figures: ``python bench/router_speed.py``; 16 MB of float16).

    Raises:
        ConfigError: the package or its files are missing, or a file cannot be read.
    """
    global _loaded
    with _lock:
        if _loaded is None:
            tok_path, weights_path = encoder_files()
            try:
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer

                tokenizer = Tokenizer.from_file(str(tok_path))
                embedding = load_file(str(weights_path))[_TENSOR]
            except Exception as exc:  # noqa: BLE001 - a damaged file of any kind: one line naming it
                raise ConfigError(f"cannot read the sentence encoder ({tok_path.parent.parent}): "
                                  f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
            if embedding.ndim != 2 or embedding.shape[1] != ENCODER_DIM:
                raise ConfigError(f"the sentence encoder {weights_path} has shape {embedding.shape}, "
                                  f"expected (vocab, {ENCODER_DIM})")
            _loaded = SentenceEncoder(embedding, tokenizer)
        return _loaded
