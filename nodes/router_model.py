"""The fitted router as plain arrays: scoring without scikit-learn, and the safe file format.

``nodes.router_fit`` fits the scikit-learn pipeline (TF-IDF features -> calibrated LinearSVC) and exports it
to a :class:`RouterModel`; this module turns a message into the same probabilities as the pipeline's
``predict_proba`` (to 1e-9, ``tests/nodes/test_router.py``) using only the standard library and numpy:

1. Features, per vectorizer (the word 1-2-gram and the ``char_wb`` 2-5-gram blocks, in that order), exactly
   as scikit-learn's ``TfidfVectorizer`` (``sklearn/feature_extraction/text.py``): ``str.lower``, then
   ``strip_accents="unicode"`` (NFKD, combining marks dropped, ASCII text unchanged), then the analyzer —
   ``word``: tokens of ``(?u)\\b\\w\\w+\\b``, unigrams then n-grams joined by one space; ``char_wb``: runs of
   2+ whitespace become one space, each whitespace-separated word padded with one space on each side, every
   n-gram inside it, a word shorter than n counted once — counts of in-vocabulary terms, ``1 + ln(count)``
   (``sublinear_tf``), times ``idf``, then each block divided by its own l2 norm (an all-zero block stays 0).
2. Scores: one product of the sparse feature row with the dense weight matrix ``(n_features, n_folds x
   n_outputs)`` (all folds at once), plus the intercepts.
3. ``calibrated_sigmoid`` (``CalibratedClassifierCV(method="sigmoid")``): per fold and class
   ``p = 1 / (1 + exp(a * score + b))`` (``_SigmoidCalibration.predict``); multi-class: divided by the fold's
   sum over classes, or ``1 / n_classes`` for every class when that sum is exactly 0 (all calibrators
   underflowed); binary: one calibrator for the second class, the first gets ``1 - p``
   (``_CalibratedClassifier.predict_proba``, scikit-learn 1.9); then the mean over folds
   (``CalibratedClassifierCV.predict_proba``).  ``logistic`` (the fallback for tiny data sets,
   ``LogisticRegression``): softmax of the scores, or ``[1 - expit(s), expit(s)]`` for two classes.

4. Optionally (:class:`EmbeddingHead`, routers fitted on enough data, ``nodes.router_fit``): a second classifier on
   the message's sentence vector (``nodes.router_embed``): one hidden layer ``h = max(0, v @ w1 + b1)``, then
   ``softmax(h @ w2 + b2)`` (scikit-learn's ``MLPClassifier.predict_proba``, relu, multi-class); the router's
   probabilities are ``(1 - blend) * p_tfidf + blend * p_head``.

File format (:func:`save_model` / :func:`load_model`): one ``.npz`` (a zip of ``.npy`` arrays, read with
``allow_pickle=False``, so a router file from elsewhere cannot run code) holding the arrays and a JSON
``metadata`` entry with the format name ``switchboard-router`` and :data:`ROUTER_FORMAT_VERSION`.  Every array's
dtype and shape is checked on load; a malformed, truncated or foreign file is a one-line ``ConfigError`` naming
it.  The shipped default router is written with its large float arrays (:data:`MAPPABLE`) stored uncompressed
(``save_model(..., mappable=True)``) and read with ``load_model(..., mapped=True)``: those arrays are then memory
maps of the file (nothing copied or decompressed; a message reads only the weight rows of its own terms, and
processes share the pages), with the same values as a copy.  Because scoring never touches scikit-learn
objects, a file fitted with one scikit-learn version is read by any other (the version that fitted it is recorded in
the metadata for information only).
"""

from __future__ import annotations

import io
import json
import mmap
import os
import re
import struct
import tempfile
import unicodedata
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph.contracts.errors import ConfigError

__all__ = [
    "ROUTER_FORMAT_NAME",
    "ROUTER_FORMAT_VERSION",
    "READ_FORMAT_VERSIONS",
    "TfidfBlock",
    "EmbeddingHead",
    "RouterModel",
    "save_model",
    "load_model",
    "read_metadata",
]

#: Written into every router file; another value means "not ours".
ROUTER_FORMAT_NAME = "switchboard-router"
#: Bump when the arrays or their meaning change (1 was the pickled scikit-learn pipeline, never read now; 3 added
#: the optional embedding head).  Files are written as 3 with a head and as 2 without one, so a router without a
#: head stays readable by the switchboard before the head.
ROUTER_FORMAT_VERSION = 3
#: Versions :func:`load_model` reads.
READ_FORMAT_VERSIONS = (2, 3)
#: Model kinds this module scores (see the module docstring, step 3).
KINDS = ("calibrated_sigmoid", "logistic")
#: The only vectorizer settings implemented here (``TfidfVectorizer`` parameters); anything else is refused.
SUPPORTED_VECTORIZER = {"lowercase": True, "strip_accents": "unicode", "token_pattern": r"(?u)\b\w\w+\b",
                        "sublinear_tf": True, "use_idf": True, "norm": "l2", "binary": False}
#: The arrays a mappable file stores uncompressed and a mapped load maps from the file (the weight matrix and the
#: head's two layers: 26 of the default router's 28 MB).
MAPPABLE = ("weights", "head_w1", "head_w2")
#: Upper bound on the uncompressed size of a router file (a BANKING77 train.csv router is 23 MB): refuses zip bombs.
_MAX_UNCOMPRESSED = 1 << 30

#: Distinct whitespace-separated words whose char_wb term ids are memoised per model (then the memo stops growing).
_WORD_CACHE = 200_000


def _strip_accents_unicode(s: str) -> str:
    """``sklearn.feature_extraction.text.strip_accents_unicode``: ASCII unchanged, else NFKD minus combining marks."""
    if s.isascii():
        return s
    return "".join(c for c in unicodedata.normalize("NFKD", s) if not unicodedata.combining(c))


@dataclass(frozen=True, eq=False)
class TfidfBlock:
    """One TF-IDF vectorizer of the feature union, as plain data.

    Attributes:
        name: the FeatureUnion entry (``"word"`` / ``"char"``).
        analyzer: ``"word"`` or ``"char_wb"``.
        ngram_range: ``(min_n, max_n)``.
        terms: the vocabulary in feature-index order (``vocabulary_`` sorted by index).
        idf: ``(len(terms),)`` float64, the fitted ``idf_``.
    """

    name: str
    analyzer: str
    ngram_range: tuple[int, int]
    terms: tuple[str, ...]
    idf: np.ndarray

    def ngrams(self, doc: str) -> list[str]:
        """The analyzer's terms of ``doc`` (already lowercased and accent-stripped), with repeats.

        ``word``: ``VectorizerMixin._word_ngrams`` over the token pattern's matches; ``char_wb``:
        ``_char_wb_ngrams`` (its squeeze of whitespace runs is left out: ``str.split()`` splits on runs anyway).
        """
        if self.analyzer == "word":
            return self._word_ngrams(_TOKEN.findall(doc))
        out: list[str] = []
        for w in doc.split():
            out.extend(self._char_wb_word(w))
        return out

    def _word_ngrams(self, tokens: list[str]) -> list[str]:
        lo, hi = self.ngram_range
        out = list(tokens) if lo == 1 else []
        for n in range(max(lo, 2), min(hi, len(tokens)) + 1):
            out.extend(" ".join(tokens[i:i + n]) for i in range(len(tokens) - n + 1))
        return out

    def _char_wb_word(self, word: str) -> list[str]:
        lo, hi = self.ngram_range
        w = " " + word + " "
        w_len = len(w)
        out: list[str] = []
        for n in range(lo, hi + 1):
            if w_len <= n:  # the padded word is no longer than n: counted once, longer n skipped
                out.append(w)
                break
            out.extend(w[i:i + n] for i in range(w_len - n + 1))
        return out


_TOKEN = re.compile(str(SUPPORTED_VECTORIZER["token_pattern"]))


@dataclass(frozen=True, eq=False)
class EmbeddingHead:
    """The second classifier, on sentence vectors (module docstring, step 4).

    Attributes:
        encoder: the ``nodes.router_embed.ENCODER_NAME`` the head was fitted on.
        w1: ``(dim, hidden)`` float32; b1: ``(hidden,)`` float32.
        w2: ``(hidden, n_classes)`` float32, columns in the router's ``classes`` order; b2: ``(n_classes,)`` float32.
        blend: weight of the head's probabilities, 0..1.
    """

    encoder: str
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    blend: float

    def predict_proba(self, vectors: np.ndarray) -> np.ndarray:
        """Class probabilities ``(n, n_classes)`` float64 of sentence ``vectors`` ``(n, dim)``."""
        h = np.maximum(vectors @ self.w1 + self.b1, 0.0)
        z = (h @ self.w2 + self.b2).astype(np.float64)
        z -= z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


class _Analyzer:
    """A block's terms -> global feature ids (``offset`` + vocabulary index), unknown terms dropped."""

    def __init__(self, block: TfidfBlock, offset: int) -> None:
        self.block = block
        self.get = {t: i + offset for i, t in enumerate(block.terms)}.get
        self.words: dict[str, list[int]] = {}  # char_wb: a word's ids depend on the word alone

    def ids(self, doc: str) -> list[int]:
        get = self.get
        if self.block.analyzer == "word":
            return [j for j in map(get, self.block.ngrams(doc)) if j is not None]
        out: list[int] = []
        words = self.words
        for w in doc.split():
            ids = words.get(w)
            if ids is None:
                ids = [j for j in map(get, self.block._char_wb_word(w)) if j is not None]
                if len(words) < _WORD_CACHE:
                    words[w] = ids
            out.extend(ids)
        return out


@dataclass(frozen=True, eq=False)
class RouterModel:
    """A fitted router as plain arrays (see the module docstring for the scoring rule).

    Attributes:
        kind: ``"calibrated_sigmoid"`` or ``"logistic"``.
        blocks: the TF-IDF vectorizers in feature order (their features are concatenated).
        weights: ``(n_features, n_folds * n_outputs)`` float16/float32/float64; column ``f * n_outputs + k`` is output
            ``k`` of fold ``f``.  ``n_outputs`` is ``n_classes``, or 1 for two classes (the second class).
        intercepts: ``(n_folds * n_outputs,)`` float64.
        sigmoid_a, sigmoid_b: ``(n_folds * n_outputs,)`` float64 Platt parameters (empty for ``logistic``).
        n_folds: calibration folds (1 for ``logistic``).
        classes: the fine labels (or agents), in the classifier's order.
        class_agents: the agent of each class (``classes`` themselves when trained on agents).
        metadata: JSON-able provenance (format, source, examples, fit settings, ...), written into the file.
        head: the optional :class:`EmbeddingHead` (None: the TF-IDF classifier alone).
    """

    kind: str
    blocks: tuple[TfidfBlock, ...]
    weights: np.ndarray
    intercepts: np.ndarray
    sigmoid_a: np.ndarray
    sigmoid_b: np.ndarray
    n_folds: int
    classes: tuple[str, ...]
    class_agents: tuple[str, ...]
    metadata: dict = field(default_factory=dict)
    head: EmbeddingHead | None = None
    # Derived in __post_init__ (not constructor arguments): feature offset of each block, the concatenated idf and
    # one analyzer per block.
    _offsets: np.ndarray = field(init=False, repr=False, compare=False)
    _idf: np.ndarray = field(init=False, repr=False, compare=False)
    _analyzers: tuple[_Analyzer, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        offsets = np.cumsum([0] + [len(b.terms) for b in self.blocks])
        object.__setattr__(self, "_offsets", offsets)
        object.__setattr__(self, "_idf", np.concatenate([np.asarray(b.idf, dtype=np.float64) for b in self.blocks]))
        object.__setattr__(self, "_analyzers", tuple(_Analyzer(b, int(o)) for b, o in zip(self.blocks, offsets)))

    @property
    def n_features(self) -> int:
        """Total feature count (sum of the blocks' vocabularies)."""
        return int(self._offsets[-1])

    def features(self, docs: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The TF-IDF rows of ``docs`` in coordinate form, as ``TfidfVectorizer`` + ``FeatureUnion`` compute them.

        Returns:
            ``(rows, ids, values)``: int64, int64, float64 arrays of equal length, sorted by row then feature id;
            a doc without a known term has no entry.
        """
        n_features = self.n_features
        ids_per_doc: list[int] = []
        lengths: list[int] = []
        for doc in docs:
            doc = _strip_accents_unicode(doc.lower())
            before = len(ids_per_doc)
            for an in self._analyzers:
                ids_per_doc.extend(an.ids(doc))
            lengths.append(len(ids_per_doc) - before)
        keys = np.repeat(np.arange(len(docs), dtype=np.int64) * n_features, lengths)
        keys += np.asarray(ids_per_doc, dtype=np.int64)
        uniq, counts = np.unique(keys, return_counts=True)
        rows, ids = np.divmod(uniq, n_features)
        vals = (np.log(counts) + 1.0) * self._idf[ids]  # sublinear tf, idf
        seg = rows * len(self.blocks) + (np.searchsorted(self._offsets, ids, side="right") - 1)
        norms = np.sqrt(np.bincount(seg, weights=vals * vals))  # l2 per (doc, block); idf >= 1 so never 0 here
        return rows, ids, vals / norms[seg]

    def scores(self, docs: list[str]) -> np.ndarray:
        """Decision values ``(len(docs), n_folds * n_outputs)`` float64: ``x @ weights + intercepts`` per doc."""
        rows, ids, vals = self.features(docs)
        out = np.zeros((len(docs), self.weights.shape[1]), dtype=np.float64)
        bounds = np.searchsorted(rows, np.arange(len(docs) + 1))
        w = self.weights
        for r in range(len(docs)):  # one small gather + BLAS product per doc: cache-friendly, no scipy needed
            lo, hi = bounds[r], bounds[r + 1]
            if hi > lo:
                out[r] = vals[lo:hi] @ w[ids[lo:hi]]
        out += self.intercepts
        return out

    def predict_proba(self, docs: list[str]) -> np.ndarray:
        """Class probabilities ``(len(docs), len(classes))`` float64, rows sum to 1, columns in ``classes`` order.

        Without a head, equal to the exported scikit-learn pipeline's ``predict_proba`` on the same strings (to
        1e-9); with one, blended with the head's (step 4).

        Raises:
            ConfigError: the head's sentence encoder cannot be loaded (``nodes.router_embed.load_encoder``).
        """
        proba = self._tfidf_proba(docs)
        if self.head is None or not docs:
            return proba
        from nodes.router_embed import load_encoder

        q = self.head.predict_proba(load_encoder().encode(docs))
        return (1.0 - self.head.blend) * proba + self.head.blend * q

    def _tfidf_proba(self, docs: list[str]) -> np.ndarray:
        s = self.scores(docs)
        n_classes = len(self.classes)
        if self.kind == "logistic":
            if n_classes == 2:
                p = 1.0 / (1.0 + _exp(-s[:, 0]))
                return np.stack([1.0 - p, p], axis=1)
            s = s - s.max(axis=1, keepdims=True)
            e = np.exp(s)
            return e / e.sum(axis=1, keepdims=True)
        sig = 1.0 / (1.0 + _exp(self.sigmoid_a * s + self.sigmoid_b))  # expit(-(a*T + b))
        sig = sig.reshape(len(docs), self.n_folds, -1)
        if n_classes == 2:
            proba = np.concatenate([1.0 - sig, sig], axis=2)
        else:
            den = sig.sum(axis=2, keepdims=True)
            proba = np.divide(sig, den, out=np.full_like(sig, 1.0 / n_classes), where=den != 0)
        return proba.sum(axis=1) / self.n_folds


def _exp(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp overflow -> inf -> probability exactly 0, as scipy's expit
        return np.exp(x)


# ---------------------------------------------------------------------- file format
def save_model(model: RouterModel, path: Path, *, mappable: bool = False) -> None:
    """Write ``model`` to ``path`` as one compressed ``.npz`` (the name is kept as given), atomically.

    Rebuilding from the same model writes the same bytes (zip entry times are fixed).  ``mappable``: the arrays of
    :data:`MAPPABLE` are stored uncompressed, so that ``load_model(..., mapped=True)`` maps them (a larger file:
    the shipped default router).

    Raises:
        ConfigError: the file cannot be written.
    """
    path = Path(path)
    head = model.head
    meta = {**model.metadata, "format": ROUTER_FORMAT_NAME, "format_version": ROUTER_FORMAT_VERSION if head else 2,
            "kind": model.kind, "n_folds": model.n_folds,
            "head": None if head is None else {"encoder": head.encoder, "blend": head.blend},
            "blocks": [{"name": b.name, "analyzer": b.analyzer, "ngram_range": list(b.ngram_range),
                        **SUPPORTED_VECTORIZER} for b in model.blocks]}
    arrays: dict[str, np.ndarray] = {
        "metadata": np.array(json.dumps(meta, sort_keys=True)),
        "classes": np.array(model.classes, dtype=str),
        "class_agents": np.array(model.class_agents, dtype=str),
        "weights": model.weights, "intercepts": model.intercepts,
        "sigmoid_a": model.sigmoid_a, "sigmoid_b": model.sigmoid_b,
    }
    if head is not None:
        arrays.update(head_w1=head.w1, head_b1=head.b1, head_w2=head.w2, head_b2=head.b2)
    for b in model.blocks:
        arrays[f"terms_{b.name}"] = np.array(b.terms, dtype=str)
        arrays[f"idf_{b.name}"] = b.idf
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:  # np.savez_compressed's layout,
        for name, arr in arrays.items():                                      # but fixed entry times: same
            info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))  # model, same bytes
            info.compress_type = zipfile.ZIP_DEFLATED
            if mappable and name in MAPPABLE:
                info.compress_type = zipfile.ZIP_STORED
                info.extra = _alignment_extra(buf.tell(), len(info.filename.encode()))
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.asanyarray(arr), allow_pickle=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, buf.getvalue())
    except OSError as exc:
        raise ConfigError(f"cannot write router to {path}: {exc.strerror or exc}") from None


#: Where a stored entry's ``.npy`` starts in the file: a multiple of this (the ``.npy`` header is padded to 64 bytes
#: too, so the array data is aligned: numpy gathers rows of an unaligned map through a copy of the whole array).
_ALIGN = 64
#: The extra-field id of the padding record (Android's zipalign uses it for the same purpose); readers skip it.
_ALIGN_EXTRA_ID = 0xD935


def _alignment_extra(header_offset: int, name_len: int) -> bytes:
    """The local header extra field that puts a stored entry's data at a multiple of :data:`_ALIGN`: a padding
    record before the 20-byte zip64 record ``zipfile`` appends (``force_zip64``) after the 30-byte header and name."""
    pad = -(header_offset + 30 + name_len + 4 + 20) % _ALIGN
    return struct.pack("<HH", _ALIGN_EXTRA_ID, pad) + bytes(pad)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make a shipped file unreadable to other users
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_metadata(path: Path) -> dict:
    """Only the metadata of the router file at ``path`` (cheap: no weights are decompressed).

    Raises:
        ConfigError: as :func:`load_model`.
    """
    return _read(Path(path), metadata_only=True)[0]


def load_model(path: Path, agents: tuple[str, ...], *, mapped: bool = False) -> RouterModel:
    """Read a router file written by :func:`save_model`; never unpickles anything.

    Args:
        path: the ``.npz`` file.
        agents: the agent names a class may map to (``nodes.router.ALL_AGENTS``).
        mapped: map the arrays of :data:`MAPPABLE` that the file stores uncompressed instead of copying them (the
            others, and compressed ones, are read as usual).  For the package's own file only: a mapped array's
            values are not scanned for NaN/inf on load (that would read every page); ``tests/nodes/test_router.py``
            checks the shipped file with a full load.

    Raises:
        ConfigError (one line naming ``path``): missing/unreadable, not a zip of arrays (e.g. an old pickled
            router: re-run train-router), truncated, another format or format version, unsupported settings,
            or arrays of the wrong dtype/shape or non-finite values.
    """
    path = Path(path)
    meta, arrays = _read(path, metadata_only=False, mapped=mapped)
    try:
        return _build(meta, arrays, agents)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"router file {path} is malformed: {exc}".splitlines()[0]) from None


_ARRAYS = ("classes", "class_agents", "weights", "intercepts", "sigmoid_a", "sigmoid_b")


def _read(path: Path, metadata_only: bool, mapped: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except FileNotFoundError:
        raise ConfigError(f"router file {path} is missing") from None
    except OSError as exc:
        raise ConfigError(f"router file {path} is unreadable: {exc.strerror or exc}") from None
    if head != b"PK\x03\x04":
        hint = " (an old pickled router? re-run train-router)" if head[:1] == b"\x80" else ""
        raise ConfigError(f"router file {path} is not a switchboard router (.npz){hint}")
    try:
        with np.load(path, allow_pickle=False) as npz:
            if sum(i.file_size for i in npz.zip.infolist()) > _MAX_UNCOMPRESSED:
                raise ConfigError(f"router file {path} is larger than {_MAX_UNCOMPRESSED >> 20} MiB uncompressed")
            if "metadata" not in npz.files:
                raise ConfigError(f"router file {path} is not a switchboard router (no metadata)")
            meta = json.loads(str(npz["metadata"][()]))
            if not isinstance(meta, dict) or meta.get("format") != ROUTER_FORMAT_NAME:
                raise ConfigError(f"router file {path} is not a switchboard router")
            if meta.get("format_version") not in READ_FORMAT_VERSIONS:
                raise ConfigError(f"router file {path} has format version {meta.get('format_version')}, "
                                  f"this switchboard reads {' and '.join(map(str, READ_FORMAT_VERSIONS))} "
                                  "(re-run train-router)")
            if metadata_only:
                return meta, {}
            arrays = {name: _array(npz, name, path, mapped) for name in npz.files if name != "metadata"}
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - zip/npy/json damage of any kind: a bad file, reported on one line
        raise ConfigError(f"router file {path} is unreadable: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    return meta, arrays


def _array(npz: Any, name: str, path: Path, mapped: bool) -> np.ndarray:
    """The array ``name`` of the open ``.npz`` ``npz`` (of file ``path``): mapped when ``mapped`` and it may be."""
    arr = _map_entry(path, npz.zip.getinfo(name + ".npy")) if mapped and name in MAPPABLE else None
    return npz[name] if arr is None else arr


def _map_entry(path: Path, info: zipfile.ZipInfo) -> np.ndarray | None:
    """The ``.npy`` entry ``info`` of the zip ``path`` as a read-only memory map, or None when it is compressed.

    A stored entry's bytes are the ``.npy`` file itself, after the entry's local header (30 bytes, then the name and
    the extra field, whose lengths are at bytes 26 and 28: PKWARE APPNOTE 4.3.7); the ``.npy`` header gives dtype,
    shape and order. Raises ValueError when the entry is not such an array or does not fit in itself."""
    if info.compress_type != zipfile.ZIP_STORED:
        return None
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        local = fh.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            raise ValueError(f"entry {info.filename} has no local header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        start = info.header_offset + 30 + name_len + extra_len
        fh.seek(start)
        version = np.lib.format.read_magic(fh)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(fh)
        offset = fh.tell()
    if dtype.hasobject or offset - start + int(np.prod(shape)) * dtype.itemsize != info.file_size:
        raise ValueError(f"entry {info.filename} is not a plain array of its stated size")
    arr = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")
    if info.filename == "weights.npy" and hasattr(mmap, "MADV_RANDOM"):
        # a message reads a few hundred scattered rows: without this hint the kernel reads ahead and maps whole
        # large folios around each row (measured: 18 of the 24 MB resident after one message, 4.6 MB with it)
        arr._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]
    return arr


def _build(meta: dict, a: dict[str, np.ndarray], known_agents: tuple[str, ...]) -> RouterModel:
    missing = [k for k in _ARRAYS if k not in a]
    if missing:
        raise KeyError(f"array {missing[0]!r} missing")
    kind, n_folds = meta.get("kind"), meta.get("n_folds")
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}")
    if not isinstance(n_folds, int) or n_folds < 1 or (kind == "logistic" and n_folds != 1):
        raise ValueError(f"bad n_folds {n_folds!r}")
    blocks = [_block(spec, a) for spec in meta.get("blocks") or []]
    if not blocks:
        raise ValueError("no vectorizers")
    classes, agents = _strings(a, "classes"), _strings(a, "class_agents")
    if len(classes) < 2 or len(agents) != len(classes) or len(set(classes)) != len(classes):
        raise ValueError(f"{len(classes)} classes / {len(agents)} agents")
    unknown = sorted(set(agents) - set(known_agents))
    if unknown:
        raise ValueError(f"unknown agent {unknown[0]!r}")
    n_out = 1 if len(classes) == 2 else len(classes)
    weights = _floats(a, "weights", 2, allow_small=True)
    n_features = sum(len(b.terms) for b in blocks)
    if weights.shape != (n_features, n_folds * n_out):
        raise ValueError(f"weights have shape {weights.shape}, expected {(n_features, n_folds * n_out)}")
    intercepts = _floats(a, "intercepts", 1)
    sa, sb = _floats(a, "sigmoid_a", 1), _floats(a, "sigmoid_b", 1)
    n_sig = 0 if kind == "logistic" else n_folds * n_out
    if intercepts.shape != (n_folds * n_out,) or sa.shape != (n_sig,) or sb.shape != (n_sig,):
        raise ValueError("intercepts or sigmoid parameters do not match the weights")
    head = _head(meta, a, len(classes))
    meta = {k: v for k, v in meta.items() if k not in ("blocks", "kind", "n_folds", "head")}
    return RouterModel(kind, tuple(blocks), weights, intercepts, sa, sb, n_folds, classes, agents, meta, head)


def _head(meta: dict, a: dict[str, np.ndarray], n_classes: int) -> EmbeddingHead | None:
    """The embedding head of a version-3 file (None when it has none); ValueError when it is malformed or needs an
    encoder this switchboard does not have."""
    from nodes.router_embed import ENCODER_DIM, ENCODER_NAME, encoder_files

    spec = meta.get("head")
    if spec is None:
        return None
    encoder_files()  # ConfigError now, not at the first message, when the encoder is not installed
    if meta.get("format_version") != 3 or not isinstance(spec, dict):
        raise ValueError("bad head")
    if spec.get("encoder") != ENCODER_NAME:
        raise ValueError(f"the head needs the sentence encoder {spec.get('encoder')!r}, this switchboard has "
                         f"{ENCODER_NAME!r}")
    blend = spec.get("blend")
    if not isinstance(blend, float) or not 0.0 <= blend <= 1.0:
        raise ValueError(f"bad head blend {blend!r}")
    missing = [k for k in ("head_w1", "head_b1", "head_w2", "head_b2") if k not in a]
    if missing:
        raise ValueError(f"the embedding head's array {missing[0]} is missing")
    w1, b1, w2, b2 = (_floats(a, f"head_{k}", n, allow_small=True) for k, n in
                      (("w1", 2), ("b1", 1), ("w2", 2), ("b2", 1)))
    hidden = w1.shape[1]
    if w1.shape[0] != ENCODER_DIM or b1.shape != (hidden,) or w2.shape != (hidden, n_classes) \
            or b2.shape != (n_classes,):
        raise ValueError("head arrays do not fit together")
    return EmbeddingHead(ENCODER_NAME, w1, b1, w2, b2, blend)


def _block(spec: dict, a: dict[str, np.ndarray]) -> TfidfBlock:
    """One vectorizer block from its metadata ``spec`` and arrays; ValueError when it is not one we can score."""
    bad = {k: spec.get(k) for k, v in SUPPORTED_VECTORIZER.items() if spec.get(k) != v}
    if bad or spec.get("analyzer") not in ("word", "char_wb"):
        raise ValueError(f"unsupported vectorizer settings {bad or spec.get('analyzer')}")
    lo, hi = (int(x) for x in spec["ngram_range"])
    if not 1 <= lo <= hi <= 10:
        raise ValueError(f"bad ngram_range {spec['ngram_range']}")
    terms, idf = _strings(a, f"terms_{spec['name']}"), _floats(a, f"idf_{spec['name']}", 1)
    if idf.shape != (len(terms),):
        raise ValueError(f"idf_{spec['name']} has shape {idf.shape}, expected ({len(terms)},)")
    return TfidfBlock(str(spec["name"]), spec["analyzer"], (lo, hi), terms, idf)


def _strings(a: dict[str, np.ndarray], key: str) -> tuple[str, ...]:
    arr = a[key]
    if arr.dtype.kind != "U" or arr.ndim != 1:
        raise ValueError(f"{key} must be a 1-D string array, got {arr.dtype} {arr.shape}")
    return tuple(str(x) for x in arr)


def _floats(a: dict[str, np.ndarray], key: str, ndim: int, allow_small: bool = False) -> np.ndarray:
    arr = a[key]
    ok = (np.float64, np.float32, np.float16) if allow_small else (np.float64,)
    if arr.dtype not in ok or arr.ndim != ndim:
        raise ValueError(f"{key} must be a {ndim}-D float array, got {arr.dtype} {arr.shape}")
    if not isinstance(arr, np.memmap) and not np.isfinite(arr).all():  # a map: the package's file (load_model)
        raise ValueError(f"{key} has non-finite values")
    if arr.flags.writeable:
        arr.setflags(write=False)
    return arr
