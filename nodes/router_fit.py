"""Fitting the offline router with scikit-learn, and exporting the fit as plain arrays.

Only ``IntentRouter.fit`` (``train-router``, ``python -m nodes.router build-default``) and the tests import this
module; routing uses the exported :class:`nodes.router_model.RouterModel` and never loads scikit-learn.

Model (:func:`build_pipeline`): the union of word 1-2-gram and ``char_wb`` 2-5-gram TF-IDF features
(``sublinear_tf``, ``strip_accents="unicode"``), then ``LinearSVC(C=0.5)`` wrapped in ``CalibratedClassifierCV``
(sigmoid, 3 stratified folds, no shuffling, ``random_state=0``, ``ensemble=False``: one SVM on all the rows, its
calibrators fitted on out-of-fold scores), so fitting is deterministic.  Every fit runs its BLAS on one thread
(:data:`_BLAS_THREADS`): a multi-threaded BLAS splits its sums by the thread count, so the same data fitted with 1 or
2 threads gave networks whose probabilities differ by 0.002.  The SVM weights are rounded to float16 and
stored so (a quarter of float64; see :data:`FIT_SETTINGS` and the measurements in ``nodes.router``).

Embedding head (:func:`fit_head`, from :data:`_HEAD_FROM` examples with :data:`_HEAD_MIN_PER_CLASS` per label): an
``MLPClassifier`` (one hidden layer of :data:`_HEAD_HIDDEN` relu units, adam, early stopping on 10% of the rows,
``random_state=0``) on the ``nodes.router_embed`` sentence vectors, whose probabilities are blended half and half
with the SVM's.  Measured with ``python bench/router_heads.py`` (a router fitted on BANKING77 + CLINC150 train
without the held-out BANKING77 train queries, agent accuracy on those):

====================================  ==============  ================
fold                                  TF-IDF alone    with the head
====================================  ==============  ================
2,000 held out (seed 12)              0.9640          0.9725
3,000 held out (seed 99)              0.9597          0.9710
====================================  ==============  ================

Blend weights 0.3 / 0.4 / 0.5 / 0.6 gave 0.9700 / 0.9720 / 0.9725 / 0.9710 on the first fold and 0.9697 / 0.9707 /
0.9710 / 0.9697 on the second; 512 hidden units 0.9700 (first fold); a LinearSVC or LogisticRegression on the vectors
instead of the network 0.9675-0.9690; the vectors appended to the TF-IDF features of one SVM 0.9670.  The rows of
the comparison were measured with scripts of that session; ``bench/router_heads.py`` reproduces the head's rows.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import sklearn
from sklearn.calibration import CalibratedClassifierCV
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.neural_network import MLPClassifier
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

from nodes.router_embed import ENCODER_NAME
from nodes.router_model import SUPPORTED_VECTORIZER, EmbeddingHead, RouterModel, TfidfBlock

__all__ = ["FIT_SETTINGS", "build_pipeline", "fit_pipeline", "fit_head", "head_skip_reason", "export_model"]

#: LinearSVC regularisation; 0.5 measured best of {0.25, 0.5, 1, 2} on BANKING77 train -> test (agent level), and
#: kept against 0.25 and 1 on the shipped data (``python bench/router_tuning.py --set _SVC_C=...``, nodes/router.py).
_SVC_C = 0.5
_RANDOM_STATE = 0
_CALIBRATION_FOLDS = 3
#: False: one SVM fitted on all rows, its sigmoid calibrators fitted on the folds' out-of-fold scores (one weight
#: matrix in the file); True: one SVM + calibrator per fold, averaged (3 weight matrices).
_ENSEMBLE = False
#: dtype the SVM weights are rounded to and stored in (the pipeline scores with the rounded values too).
_COEF_DTYPE = "float16"
#: None or "balanced" (LinearSVC class_weight).
_CLASS_WEIGHT: str | None = None
#: Prune terms seen in fewer than this many examples, from ``_PRUNE_FROM`` training examples on (tiny unit-test sets
#: keep every term); per block.
_PRUNE_FROM = 500
_WORD_MIN_DF = 2
_CHAR_MIN_DF = 2
_WORD_NGRAMS = (1, 2)
_CHAR_NGRAMS = (2, 5)
#: The embedding head is fitted from this many training examples on (BANKING77 train alone has 10,003) ...
_HEAD_FROM = 2000
#: ... when every label has at least this many (early stopping holds out a stratified 10% of the rows: scikit-learn's
#: ``train_test_split`` needs two of each label, and a held-out part of at least one row per label).
_HEAD_MIN_PER_CLASS = 2
_HEAD_HIDDEN = 1024
#: Weight of the head's probabilities in the router's (module docstring table).
_HEAD_BLEND = 0.5
_HEAD_MAX_ITER = 200
#: BLAS threads of every fit. One thread makes a fit independent of the machine's core count (a fit of the shipped
#: head on 1 and on 2 OpenBLAS threads differed by 0.002 in probability); it does not make it independent of the
#: processor: OpenBLAS picks its kernels by CPU (Haswell, SkylakeX, ...), and their rounding differs, so a head
#: fitted on another processor differs by up to 0.003 (``tests/nodes/test_router.py`` compares within that, not bit for
#: bit). Cost: the head's training took 31 s on two threads and 35-59 s on one (2 cores shared with other jobs).
_BLAS_THREADS = 1

#: Everything that determines a fit besides the data; recorded in every router file's metadata, and the
#: shipped default is stale when its recorded settings differ from these (``tests/nodes/test_router.py``).
FIT_SETTINGS: dict = {
    "features": {"word": {"analyzer": "word", "ngram_range": list(_WORD_NGRAMS)},
                 "char": {"analyzer": "char_wb", "ngram_range": list(_CHAR_NGRAMS)},
                 "min_df": {"from_examples": _PRUNE_FROM, "word": _WORD_MIN_DF, "char": _CHAR_MIN_DF},
                 **SUPPORTED_VECTORIZER},
    "classifier": {"name": "LinearSVC", "C": _SVC_C, "class_weight": _CLASS_WEIGHT, "random_state": _RANDOM_STATE,
                   "coef_dtype": _COEF_DTYPE},
    "calibration": {"method": "sigmoid", "folds": _CALIBRATION_FOLDS, "ensemble": _ENSEMBLE,
                    "cv": "StratifiedKFold(shuffle=False)"},
    "embedding_head": {"encoder": ENCODER_NAME, "from_examples": _HEAD_FROM,
                       "min_per_label": _HEAD_MIN_PER_CLASS, "hidden": _HEAD_HIDDEN, "activation": "relu",
                       "solver": "adam", "early_stopping": True, "max_iter": _HEAD_MAX_ITER,
                       "random_state": _RANDOM_STATE, "blend": _HEAD_BLEND},
    "fallback": {"name": "LogisticRegression", "C": 10.0, "solver": "lbfgs", "max_iter": 2000,
                 "when": "a label has a single example"},
    "blas_threads": _BLAS_THREADS,
}


@contextmanager
def _pinned_blas() -> Iterator[None]:
    """BLAS (OpenBLAS, MKL, ...) limited to :data:`_BLAS_THREADS` threads for the enclosed fit (``threadpoolctl``,
    which scikit-learn depends on); the previous limits come back afterwards."""
    with threadpool_limits(limits=_BLAS_THREADS, user_api="blas"):
        yield


def build_pipeline(labels: list[str]) -> Pipeline:
    """Features + classifier for ``labels`` (the training labels, used to size folds and pruning).

    Terms seen in fewer than ``_WORD_MIN_DF`` / ``_CHAR_MIN_DF`` examples are dropped once there are at least
    ``_PRUNE_FROM`` examples (it keeps the file small at a cost of about 0.001 agent accuracy on BANKING77).
    Calibrated LinearSVC needs each class in every fold: folds = min(3, smallest class count); with
    ``_ENSEMBLE = False`` the folds only provide out-of-fold scores for the calibrators, and one SVM is fitted on all
    the rows.  A class with a single example makes calibration impossible; then ``LogisticRegression`` (lbfgs,
    C=10) is used instead, which is only reasonable for the tiny data sets where that happens.
    """
    big = len(labels) >= _PRUNE_FROM
    common = {"sublinear_tf": True, "strip_accents": "unicode"}
    features = FeatureUnion([
        ("word", TfidfVectorizer(ngram_range=_WORD_NGRAMS, min_df=_WORD_MIN_DF if big else 1, **common)),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=_CHAR_NGRAMS, min_df=_CHAR_MIN_DF if big else 1,
                                 **common)),
    ])
    smallest = min(Counter(labels).values())
    if smallest >= 2:
        folds = StratifiedKFold(n_splits=min(_CALIBRATION_FOLDS, smallest), shuffle=False)
        svm = LinearSVC(C=_SVC_C, class_weight=_CLASS_WEIGHT, random_state=_RANDOM_STATE)
        clf = CalibratedClassifierCV(svm, cv=folds, method="sigmoid", ensemble=_ENSEMBLE)
    else:
        clf = LogisticRegression(C=10.0, max_iter=2000, random_state=_RANDOM_STATE)
    return Pipeline([("features", features), ("clf", clf)])


def fit_pipeline(texts: list[str], labels: list[str]) -> Pipeline:
    """Fit :func:`build_pipeline` on clean ``texts``/``labels`` and round the SVM weights to ``_COEF_DTYPE``.

    The rounded weights are kept in the pipeline as float32 (scikit-learn scores with them), so the returned
    pipeline's ``predict_proba`` is the reference that :func:`export_model`'s arrays reproduce; the file stores them
    in ``_COEF_DTYPE`` (float16 halves the file against float32: 2 bytes per weight). Fitted with BLAS on
    :data:`_BLAS_THREADS` thread(s).
    """
    pipeline = build_pipeline(labels)
    with _pinned_blas():
        pipeline.fit(texts, labels)
    for cc in getattr(pipeline.named_steps["clf"], "calibrated_classifiers_", ()):
        cc.estimator.coef_ = cc.estimator.coef_.astype(_COEF_DTYPE).astype(np.float32)
    return pipeline


def head_skip_reason(labels: list[str]) -> str | None:
    """Why :func:`fit_head` fits no head for these training ``labels`` (one per example), or None when it fits one:
    "fewer than 2,000 examples", "label 'x' has 1 example (2 needed)", "only two labels", "more labels than a tenth of
    the examples"."""
    counts = Counter(labels)
    if len(labels) < _HEAD_FROM:
        return f"fewer than {_HEAD_FROM:,} examples"
    if len(counts) < 3:
        return "only two labels"
    rare, n = min(counts.items(), key=lambda kv: kv[1])
    if n < _HEAD_MIN_PER_CLASS:
        return f"label {rare!r} has {n} example{'s' if n != 1 else ''} ({_HEAD_MIN_PER_CLASS} needed)"
    if len(labels) // 10 < len(counts):
        return "more labels than a tenth of the examples"
    return None


def fit_head(texts: list[str], labels: list[str], classes: tuple[str, ...]) -> EmbeddingHead | None:
    """The embedding head for clean ``texts``/``labels`` (module docstring), its output columns in ``classes`` order
    (the SVM's), or None when the data is too small for one (fewer than ``_HEAD_FROM`` examples, a label with fewer
    than ``_HEAD_MIN_PER_CLASS``, two labels only, or more labels than a tenth of the examples).

    Raises:
        ConfigError: the sentence encoder cannot be loaded (``nodes.router_embed.load_encoder``).
        KeyboardInterrupt: Ctrl-C during the network's training (scikit-learn would swallow it).
    """
    if head_skip_reason(labels) is not None:
        return None
    from nodes.router_embed import load_encoder

    vectors = load_encoder().encode(texts)
    mlp = MLPClassifier(hidden_layer_sizes=(_HEAD_HIDDEN,), activation="relu", solver="adam", early_stopping=True,
                        max_iter=_HEAD_MAX_ITER, random_state=_RANDOM_STATE)
    with warnings.catch_warnings(record=True) as caught, _pinned_blas():
        warnings.simplefilter("always")
        mlp.fit(vectors, labels)
    if any("interrupted by user" in str(w.message) for w in caught):
        # scikit-learn's MLP catches Ctrl-C, warns and keeps the half-trained network
        # (sklearn/neural_network/_multilayer_perceptron.py, _fit_stochastic): a half-trained router must never be
        # measured or installed, so the interrupt goes on (train-router then exits 130, nothing written)
        raise KeyboardInterrupt
    for w in caught:  # a ConvergenceWarning (max_iter reached) is no user's business: early stopping kept the best
        if not issubclass(w.category, ConvergenceWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    order = [list(mlp.classes_).index(c) for c in classes]
    w1, w2 = mlp.coefs_
    b1, b2 = mlp.intercepts_
    return EmbeddingHead(ENCODER_NAME, np.ascontiguousarray(w1, dtype=np.float32),
                         np.asarray(b1, dtype=np.float32), np.ascontiguousarray(w2[:, order], dtype=np.float32),
                         np.asarray(b2[order], dtype=np.float32), _HEAD_BLEND)


def export_model(pipeline: Pipeline, label_to_agent: dict[str, str] | None, metadata: dict,
                 head: EmbeddingHead | None = None) -> RouterModel:
    """The fitted ``pipeline`` as a :class:`RouterModel` (plain arrays; see ``nodes.router_model``).

    Args:
        pipeline: from :func:`fit_pipeline`.
        label_to_agent: fine label -> agent, or None when the labels are agents.
        metadata: provenance to record (source, examples, ...); ``fit`` settings and the scikit-learn version
            are added here.
        head: from :func:`fit_head`, or None.

    Raises:
        ValueError: the pipeline has a shape this exporter does not know (a programming error, not user input).
    """
    blocks = []
    for name, vec in pipeline.named_steps["features"].transformer_list:
        params = vec.get_params()
        wrong = {k: params.get(k) for k, v in SUPPORTED_VECTORIZER.items() if params.get(k) != v}
        wrong.update({k: params[k] for k in ("stop_words", "tokenizer", "preprocessor") if params[k] is not None})
        if wrong or params["analyzer"] not in ("word", "char_wb"):
            raise ValueError(f"vectorizer {name} has settings the plain-array router does not implement: {wrong}")
        vocab = vec.vocabulary_
        terms = [""] * len(vocab)
        for term, j in vocab.items():
            terms[j] = term
        blocks.append(TfidfBlock(name, params["analyzer"], tuple(params["ngram_range"]), tuple(terms),
                                 np.asarray(vec.idf_, dtype=np.float64)))
    clf = pipeline.named_steps["clf"]
    classes = tuple(str(c) for c in clf.classes_)
    n_out = 1 if len(classes) == 2 else len(classes)
    if isinstance(clf, CalibratedClassifierCV):
        kind, folds = "calibrated_sigmoid", clf.calibrated_classifiers_
        coefs: list[np.ndarray] = []
        inters: list[np.ndarray] = []
        sig_a: list[float] = []
        sig_b: list[float] = []
        for cc in folds:
            if [str(c) for c in cc.estimator.classes_] != list(classes) or len(cc.calibrators) != n_out:
                raise ValueError("a calibration fold does not cover every class")
            coefs.append(np.asarray(cc.estimator.coef_).astype(_COEF_DTYPE))
            inters.append(np.asarray(cc.estimator.intercept_, dtype=np.float64))
            sig_a.extend(float(c.a_) for c in cc.calibrators)
            sig_b.extend(float(c.b_) for c in cc.calibrators)
        weights = np.ascontiguousarray(np.concatenate(coefs, axis=0).T)
        intercepts = np.concatenate(inters)
        a, b, n_folds = np.asarray(sig_a), np.asarray(sig_b), len(folds)
    elif isinstance(clf, LogisticRegression):
        kind, n_folds = "logistic", 1
        weights = np.ascontiguousarray(np.asarray(clf.coef_, dtype=np.float64).T)
        intercepts = np.asarray(clf.intercept_, dtype=np.float64)
        a = b = np.zeros(0)
    else:
        raise ValueError(f"cannot export classifier {type(clf).__name__}")
    if weights.shape[1] != n_folds * n_out:
        raise ValueError(f"weights have {weights.shape[1]} columns, expected {n_folds * n_out}")
    agents = tuple(label_to_agent[c] if label_to_agent is not None else c for c in classes)
    meta = {**metadata, "fit": {"settings": FIT_SETTINGS, "scikit-learn": sklearn.__version__}}
    return RouterModel(kind, tuple(blocks), weights, intercepts, a, b, n_folds, classes, agents, meta, head)
