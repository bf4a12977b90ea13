"""The offline intent router: a small TF-IDF + linear text classifier that picks the specialist agent.

It answers one question per customer message: which agent (``cards``, ``billing``, ``refunds``,
``transfers``, ``account``, ``policy``; or ``other`` for greetings/off-topic, which the graph sends to
``clarify``) should handle it, with a probability per agent.

Model (``_build_pipeline``): the union of word 1–2-gram and ``char_wb`` 2–5-gram TF-IDF features
(``sublinear_tf``), then ``LinearSVC`` wrapped in ``CalibratedClassifierCV`` (sigmoid, 3 stratified folds,
no shuffling, ``random_state=0``), so fitting is deterministic.  When trained on fine labels (intents or
topics) with a ``label_to_agent`` map, the agent probability is the sum of its intents' probabilities.
Measured on BANKING77 (``../shared/data/banking77``, agent level, test.csv, 3,080 queries): trained on the
10,003 train.csv intents 0.977 (fit 8–25 s on 2 shared cores); the shipped default (``router_examples.csv``,
2,382 sentences of our own, fine labels = topics) 0.890 (fit 2–5 s).  ``tests/test_router.py`` enforces
>= 0.97 and >= 0.80.

Files: ``default_router()`` caches its fitted model at
``$SWITCHBOARD_HOME/router-default-<sha>.pkl``; ``train-router`` writes ``$SWITCHBOARD_HOME/router-trained.pkl``
(``trained_router_path()``).  Each ``.pkl`` has a JSON sidecar ``<name>.pkl.json`` with its metadata.
Pickles execute code when loaded: only load router files you (or ``train-router``) wrote.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import pickle
import tempfile
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np
import sklearn
from sklearn.calibration import CalibratedClassifierCV
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import FeatureUnion, Pipeline
from sklearn.svm import LinearSVC

from graph.errors import ConfigError, InputError

__all__ = [
    "AGENTS",
    "OTHER",
    "Route",
    "IntentRouter",
    "default_router",
    "default_examples_path",
    "load_router",
    "trained_router_path",
    "load_label_map",
    "read_labelled_csv",
    "read_router_examples",
    "clear_router_cache",
    "InputError",
    "ConfigError",
]

log = logging.getLogger(__name__)

#: The specialist agents the router can choose (the agents of ``agent_map.json``).
AGENTS: tuple[str, ...] = ("cards", "billing", "refunds", "transfers", "account", "policy")
#: Label for greetings, thanks, off-topic and gibberish; the graph routes it to ``clarify``.
OTHER = "other"
_ALL_AGENTS: tuple[str, ...] = AGENTS + (OTHER,)

#: Bump when the pipeline or the pickled state changes: invalidates cached default models.
_FORMAT_VERSION = 1
_FORMAT_NAME = "switchboard-router"
#: LinearSVC regularisation; 0.5 measured best of {0.25, 0.5, 1, 2} on BANKING77 train -> test (agent level).
_SVC_C = 0.5
_RANDOM_STATE = 0
_CALIBRATION_FOLDS = 3
#: Prune single-occurrence terms from this many training examples on (tiny unit-test sets keep every term).
_PRUNE_FROM = 500


@dataclass(frozen=True)
class Route:
    """One routing decision.

    Attributes:
        agent: one of ``AGENTS`` or ``"other"`` (greeting/off-topic: ask the customer to clarify).
        confidence: probability of ``agent``, 0..1 (``scores[agent]``).
        scores: probability per agent, keys ``AGENTS + ("other",)``, values sum to 1 (an agent's value is the
            sum of its fine labels' probabilities when the router was trained on fine labels).
        intent: the most probable fine label (topic or BANKING77 intent) *within* ``agent``; None when the
            router was trained on agent labels directly or the text was empty.
    """

    agent: str
    confidence: float
    scores: dict[str, float] = field(default_factory=dict)
    intent: str | None = None


def _home() -> Path:
    """``$SWITCHBOARD_HOME`` or ``./.switchboard`` (same rule as ``graph.settings.home_dir``)."""
    return Path(os.environ.get("SWITCHBOARD_HOME", ".switchboard"))


def trained_router_path() -> Path:
    """Where ``train-router`` stores its model: ``$SWITCHBOARD_HOME/router-trained.pkl``."""
    return _home() / "router-trained.pkl"


def default_examples_path() -> Path:
    """The shipped training examples: ``nodes/data/router_examples.csv`` (columns ``text,agent,topic``)."""
    return Path(__file__).resolve().parent / "data" / "router_examples.csv"


def _meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _build_pipeline(labels: list[str]) -> Pipeline:
    """Features + classifier for ``labels`` (the training labels, used to size folds and pruning).

    Terms seen in a single example are dropped (``min_df=2``) once there are at least ``_PRUNE_FROM`` examples:
    on BANKING77 that costs 0.001 agent accuracy and halves the model file.  Calibrated LinearSVC needs each
    class in every fold: folds = min(3, smallest class count).  A class with a single example makes calibration
    impossible; then ``LogisticRegression`` (lbfgs, C=10) is used instead, which is only reasonable for the
    tiny data sets where that happens.
    """
    min_df = 2 if len(labels) >= _PRUNE_FROM else 1
    features = FeatureUnion([
        ("word", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, strip_accents="unicode", min_df=min_df)),
        ("char", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, strip_accents="unicode",
                                 min_df=min_df)),
    ])
    smallest = min(Counter(labels).values())
    if smallest >= 2:
        folds = StratifiedKFold(n_splits=min(_CALIBRATION_FOLDS, smallest), shuffle=False)
        clf = CalibratedClassifierCV(LinearSVC(C=_SVC_C, random_state=_RANDOM_STATE), cv=folds, method="sigmoid")
    else:
        clf = LogisticRegression(C=10.0, max_iter=2000, random_state=_RANDOM_STATE)
    return Pipeline([("features", features), ("clf", clf)])


def _shrink(pipeline: Pipeline) -> None:
    """Store the fold SVMs' weights as float32 (halves the pickle; predictions unchanged to 1e-6 on BANKING77)."""
    clf = pipeline.named_steps["clf"]
    for cc in getattr(clf, "calibrated_classifiers_", ()):
        est = getattr(cc, "estimator", None)
        if est is not None and getattr(est, "coef_", None) is not None:
            est.coef_ = est.coef_.astype(np.float32)


class IntentRouter:
    """A fitted text classifier mapping a customer message to an agent (see the module docstring for the model).

    Args:
        source: where the training data comes from, recorded in the metadata: ``"default"`` for the shipped
            examples (``default_router``), the training CSV's path for ``train-router``; ``"custom"`` if not given.

    Attributes:
        source: as above (a plain attribute: ``train-router`` may set it after ``fit``).
        n_examples: number of training examples (0 before ``fit``).
        created_at: ISO-8601 UTC time of the fit ("" before ``fit``).
        label_to_agent: fine label -> agent, or None when trained on agent labels.
    """

    def __init__(self, source: str = "custom") -> None:
        self.source = source
        self.n_examples = 0
        self.created_at = ""
        self.label_to_agent: dict[str, str] | None = None
        self._pipeline: Pipeline | None = None
        self._classes: list[str] = []
        self._agent_matrix: np.ndarray | None = None  # (n_classes, n_agents) 0/1

    # ------------------------------------------------------------------ fitting
    def fit(self, texts: list[str], labels: list[str], label_to_agent: dict[str, str] | None = None) -> "IntentRouter":
        """Fit on ``texts`` with ``labels``; returns self.

        Args:
            texts: training utterances (non-empty strings).
            labels: one per text: agents (``AGENTS`` or ``"other"``) when ``label_to_agent`` is None, else
                fine labels (intents/topics) that ``label_to_agent`` maps to agents.  Fitting on fine labels and
                summing per agent is what reaches >= 0.97 agent accuracy on BANKING77.
            label_to_agent: fine label -> agent (e.g. ``load_label_map(agent_map.json)``).

        Raises:
            InputError: empty input, lengths differ, an empty text or label, fewer than two distinct labels,
                an agent label that is not a known agent, a label missing from ``label_to_agent``, or a map
                value that is not a known agent.
        """
        if texts is None or labels is None or len(texts) == 0:
            raise InputError("no training examples given")
        if len(texts) != len(labels):
            raise InputError(f"{len(texts)} texts but {len(labels)} labels: they must pair up one to one")
        clean_texts: list[str] = []
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise InputError(f"training text #{i} is empty or not a string")
            clean_texts.append(t.strip())
        clean_labels: list[str] = []
        for i, lab in enumerate(labels):
            if not isinstance(lab, str) or not lab.strip():
                raise InputError(f"training label #{i} is empty or not a string")
            clean_labels.append(lab.strip())
        if label_to_agent is None:
            bad = sorted({lab for lab in clean_labels if lab not in _ALL_AGENTS})
            if bad:
                raise InputError(f"unknown agent label {bad[0]!r} (expected one of {', '.join(_ALL_AGENTS)}; "
                                 "pass label_to_agent to train on fine labels)")
            mapping = None
        else:
            bad_values = sorted({a for a in label_to_agent.values() if a not in _ALL_AGENTS})
            if bad_values:
                raise InputError(f"label map sends labels to unknown agent {bad_values[0]!r}")
            missing = sorted({lab for lab in clean_labels if lab not in label_to_agent})
            if missing:
                raise InputError(f"label {missing[0]!r} is missing from the label map "
                                 f"({len(missing)} label(s) unmapped)")
            mapping = {lab: label_to_agent[lab] for lab in sorted(set(clean_labels))}
        if len(set(clean_labels)) < 2:
            raise InputError("need at least two distinct labels to train a router")

        pipeline = _build_pipeline(clean_labels)
        pipeline.fit(clean_texts, clean_labels)
        _shrink(pipeline)
        self._set_model(pipeline, mapping)
        self.n_examples = len(clean_texts)
        self.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        return self

    def _set_model(self, pipeline: Pipeline, mapping: dict[str, str] | None) -> None:
        self._pipeline = pipeline
        self.label_to_agent = mapping
        self._classes = [str(c) for c in pipeline.classes_]
        matrix = np.zeros((len(self._classes), len(_ALL_AGENTS)))
        for i, c in enumerate(self._classes):
            agent = mapping[c] if mapping is not None else c
            matrix[i, _ALL_AGENTS.index(agent)] = 1.0
        self._agent_matrix = matrix

    @property
    def fitted(self) -> bool:
        """True once ``fit`` or ``load`` has produced a model."""
        return self._pipeline is not None

    # ------------------------------------------------------------------ routing
    def route(self, text: str) -> Route:
        """Route one message. Empty/whitespace text -> ``Route("other", 1.0, …)``.

        Raises:
            InputError: ``text`` is not a string.
            ConfigError: the router has not been fitted or loaded.
        """
        return self.route_many([text])[0]

    def route_many(self, texts: list[str]) -> list[Route]:
        """Route several messages in one vectorised call; one ``Route`` per text, same order.

        Raises:
            InputError: an element is not a string.
            ConfigError: the router has not been fitted or loaded.
        """
        if self._pipeline is None or self._agent_matrix is None:
            raise ConfigError("the router is not fitted: call fit() or IntentRouter.load()")
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InputError(f"text #{i} to route is {type(t).__name__}, not a string")
        idx = [i for i, t in enumerate(texts) if t.strip()]
        routes: list[Route | None] = [None] * len(texts)
        if idx:
            proba = self._pipeline.predict_proba([texts[i].strip() for i in idx])
            agent_p = proba @ self._agent_matrix
            for row, i in enumerate(idx):
                routes[i] = self._decide(proba[row], agent_p[row])
        empty_scores = {a: (1.0 if a == OTHER else 0.0) for a in _ALL_AGENTS}
        return [r if r is not None else Route(OTHER, 1.0, dict(empty_scores), None) for r in routes]

    def _decide(self, fine_p: np.ndarray, agent_p: np.ndarray) -> Route:
        total = float(agent_p.sum()) or 1.0
        scores = {a: float(agent_p[j]) / total for j, a in enumerate(_ALL_AGENTS)}
        best = int(np.argmax(agent_p))  # ties -> first in _ALL_AGENTS order
        agent = _ALL_AGENTS[best]
        intent = None
        if self.label_to_agent is not None:
            in_agent = self._agent_matrix[:, best] > 0
            masked = np.where(in_agent, fine_p, -1.0)
            intent = self._classes[int(np.argmax(masked))]
        return Route(agent=agent, confidence=scores[agent], scores=scores, intent=intent)

    # ------------------------------------------------------------------ persistence
    def metadata(self) -> dict:
        """The JSON sidecar content: format, source, n_examples, created_at, sklearn/python versions, labels."""
        return {
            "format": _FORMAT_NAME,
            "format_version": _FORMAT_VERSION,
            "source": self.source,
            "n_examples": self.n_examples,
            "n_labels": len(self._classes),
            "fine_labels": self.label_to_agent is not None,
            "created_at": self.created_at,
            "sklearn_version": sklearn.__version__,
        }

    def save(self, path: Path) -> None:
        """Write the fitted model to ``path`` (pickle) and its metadata to ``<path>.json``; atomic per file.

        Raises:
            ConfigError: not fitted, or the file cannot be written.
        """
        if self._pipeline is None:
            raise ConfigError("cannot save an unfitted router")
        path = Path(path)
        state = {"format": _FORMAT_NAME, "format_version": _FORMAT_VERSION, "sklearn_version": sklearn.__version__,
                 "pipeline": self._pipeline, "label_to_agent": self.label_to_agent, "source": self.source,
                 "n_examples": self.n_examples, "created_at": self.created_at}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
            _atomic_write(_meta_path(path), (json.dumps(self.metadata(), indent=2) + "\n").encode())
        except OSError as exc:
            raise ConfigError(f"cannot write router to {path}: {exc.strerror or exc}") from exc

    @classmethod
    def load(cls, path: Path) -> "IntentRouter":
        """Load a router written by ``save``.

        Raises:
            ConfigError (one line): the file or its ``.json`` sidecar is missing/unreadable, it is not a
                switchboard router, or it was written by another format or scikit-learn version
                (re-run ``train-router``).
        """
        path = Path(path)
        meta_path = _meta_path(path)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"router metadata {meta_path} is missing (re-run train-router)") from None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"router metadata {meta_path} is unreadable: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != _FORMAT_NAME:
            raise ConfigError(f"{meta_path} is not switchboard router metadata")
        if meta.get("format_version") != _FORMAT_VERSION:
            raise ConfigError(f"router {path} has format version {meta.get('format_version')}, "
                              f"this switchboard reads {_FORMAT_VERSION} (re-run train-router)")
        if meta.get("sklearn_version") != sklearn.__version__:
            raise ConfigError(f"router {path} was fitted with scikit-learn {meta.get('sklearn_version')}, "
                              f"installed is {sklearn.__version__} (re-run train-router)")
        try:
            with open(path, "rb") as fh:
                state = pickle.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"router file {path} is missing") from None
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad file
            raise ConfigError(f"router file {path} is unreadable: {type(exc).__name__}: {exc}".splitlines()[0]) from None
        if (not isinstance(state, dict) or state.get("format") != _FORMAT_NAME
                or not isinstance(state.get("pipeline"), Pipeline)):
            raise ConfigError(f"{path} is not a switchboard router")
        if state.get("sklearn_version") != sklearn.__version__:
            raise ConfigError(f"router {path} was fitted with scikit-learn {state.get('sklearn_version')}, "
                              f"installed is {sklearn.__version__} (re-run train-router)")
        router = cls(source=str(state.get("source", "unknown")))
        try:
            router._set_model(state["pipeline"], state.get("label_to_agent"))
        except (AttributeError, KeyError, ValueError) as exc:
            raise ConfigError(f"router file {path} is inconsistent: {exc}") from None
        router.n_examples = int(state.get("n_examples", 0))
        router.created_at = str(state.get("created_at", ""))
        return router

    def __repr__(self) -> str:
        return (f"IntentRouter(source={self.source!r}, n_examples={self.n_examples}, "
                f"labels={len(self._classes)}, fine={self.label_to_agent is not None})")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---------------------------------------------------------------------- data readers
def _open_csv_rows(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            header = [h.strip() for h in (reader.fieldnames or [])]
            missing = [c for c in required if c not in header]
            if missing:
                raise InputError(f"{path}: missing column(s) {', '.join(missing)} "
                                 f"(expected header {','.join(required)})")
            reader.fieldnames = header
            rows = list(reader)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except csv.Error as exc:
        raise InputError(f"{path}: malformed CSV ({exc})") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a CSV file") from None
    if not rows:
        raise InputError(f"{path}: no data rows")
    return rows


def read_labelled_csv(path: Path) -> tuple[list[str], list[str]]:
    """Read a training CSV with header columns ``text,category`` (extra columns ignored).

    Returns:
        ``(texts, categories)``, whitespace-stripped, in file order.

    Raises:
        InputError (one line naming the problem): missing file, not UTF-8, missing column, no rows,
            or a row (numbered from 2, the header being line 1) with an empty text or category.
    """
    rows = _open_csv_rows(path, ("text", "category"))
    texts, cats = [], []
    for n, row in enumerate(rows, start=2):
        text, cat = (row.get("text") or "").strip(), (row.get("category") or "").strip()
        if not text or not cat:
            raise InputError(f"{path}: row {n} has an empty {'text' if not text else 'category'}")
        texts.append(text)
        cats.append(cat)
    return texts, cats


def read_router_examples(path: Path | None = None) -> tuple[list[str], list[str], dict[str, str]]:
    """Read the shipped examples (``text,agent,topic``; default ``default_examples_path()``).

    Returns:
        ``(texts, topics, topic_to_agent)``.

    Raises:
        InputError: missing/malformed file, an empty cell, an unknown agent, or a topic under two agents.
    """
    path = Path(path) if path is not None else default_examples_path()
    rows = _open_csv_rows(path, ("text", "agent", "topic"))
    texts, topics, topic_to_agent = [], [], {}
    for n, row in enumerate(rows, start=2):
        text, agent, topic = ((row.get(k) or "").strip() for k in ("text", "agent", "topic"))
        if not (text and agent and topic):
            raise InputError(f"{path}: row {n} has an empty cell")
        if agent not in _ALL_AGENTS:
            raise InputError(f"{path}: row {n} has unknown agent {agent!r}")
        if topic_to_agent.setdefault(topic, agent) != agent:
            raise InputError(f"{path}: row {n}: topic {topic!r} is under both {topic_to_agent[topic]} and {agent}")
        texts.append(text)
        topics.append(topic)
    return texts, topics, topic_to_agent


def load_label_map(path: Path) -> dict[str, str]:
    """Read an agent map of the shape of BANKING77's ``agent_map.json``: ``{"agents": {agent: [label, ...]}}``.

    Returns:
        ``{label: agent}``.

    Raises:
        InputError: missing/unreadable file, invalid JSON, wrong shape, an unknown agent name, or a label
            listed under two agents.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: unreadable ({exc})") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
    agents = data.get("agents") if isinstance(data, dict) else None
    if not isinstance(agents, dict) or not agents:
        raise InputError(f'{path}: expected {{"agents": {{agent: [label, ...]}}}}')
    mapping: dict[str, str] = {}
    for agent, labels in agents.items():
        if agent not in _ALL_AGENTS:
            raise InputError(f"{path}: unknown agent {agent!r} (expected one of {', '.join(_ALL_AGENTS)})")
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise InputError(f"{path}: agents.{agent} must be a list of non-empty strings")
        for label in labels:
            if mapping.setdefault(label, agent) != agent:
                raise InputError(f"{path}: label {label!r} is listed under both {mapping[label]} and {agent}")
    return mapping


# ---------------------------------------------------------------------- shipped and trained routers
def _default_cache_path(csv_bytes: bytes) -> Path:
    digest = hashlib.sha256(csv_bytes + b"\0" + sklearn.__version__.encode()
                            + b"\0" + str(_FORMAT_VERSION).encode()).hexdigest()[:16]
    return _home() / f"router-default-{digest}.pkl"


def default_router() -> IntentRouter:
    """The router fitted on the shipped examples (``router_examples.csv``, fine labels = topics).

    The fitted model is cached on disk at ``$SWITCHBOARD_HOME/router-default-<sha>.pkl`` (sha of the CSV bytes,
    the scikit-learn version and the format version) and reused from there; in memory it is kept per sha, so a
    process fits at most once (a home without the file gets it written).  An unreadable cache file is refitted
    and rewritten; an unwritable home only logs a warning.

    Raises:
        InputError: the shipped CSV is missing or malformed (a packaging bug).
    """
    csv_path = default_examples_path()
    try:
        data = csv_path.read_bytes()
    except OSError as exc:
        raise InputError(f"{csv_path}: cannot read the shipped router examples ({exc.strerror or exc})") from None
    cache_path = _default_cache_path(data)
    with _DEFAULT_LOCK:
        router = _DEFAULT_MEMO.get(cache_path.name)
        if router is None:
            router = _load_or_fit_default(cache_path, csv_path)
            _DEFAULT_MEMO[cache_path.name] = router
        elif not cache_path.exists():
            _save_quietly(router, cache_path)
    return router


_DEFAULT_MEMO: dict[str, IntentRouter] = {}
_DEFAULT_LOCK = threading.Lock()


def _load_or_fit_default(cache_path: Path, csv_path: Path) -> IntentRouter:
    if cache_path.exists():
        try:
            return IntentRouter.load(cache_path)
        except ConfigError as exc:
            log.warning("refitting the default router: %s", exc)
    texts, topics, topic_to_agent = read_router_examples(csv_path)
    router = IntentRouter(source="default").fit(texts, topics, topic_to_agent)
    _save_quietly(router, cache_path)
    return router


def _save_quietly(router: IntentRouter, path: Path) -> None:
    try:
        router.save(path)
    except ConfigError as exc:
        log.warning("default router not cached: %s", exc)


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> IntentRouter:
    return IntentRouter.load(Path(path))


def _load_file(path: Path) -> IntentRouter:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ConfigError(f"router file {path} is missing") from None
    except OSError as exc:
        raise ConfigError(f"router file {path} is unreadable: {exc.strerror or exc}") from None
    return _load_cached(str(path.resolve()), st.st_mtime_ns, st.st_size)


def load_router(path: Path | None = None) -> IntentRouter:
    """The router the graph should use.

    ``path`` given -> that file (``IntentRouter.load``); None -> ``trained_router_path()`` if it exists
    (written by ``train-router``), else ``default_router()``.  Memoised in-process by (path, mtime, size), so
    calling it per message is cheap and a retrained file is picked up.

    Raises:
        ConfigError: the chosen file is missing, unreadable or incompatible.
    """
    if path is not None:
        return _load_file(Path(path))
    trained = trained_router_path()
    if trained.exists():
        return _load_file(trained)
    return default_router()


def clear_router_cache() -> None:
    """Forget the in-process memo of ``load_router``/``default_router`` (files on disk are kept)."""
    _load_cached.cache_clear()
    with _DEFAULT_LOCK:
        _DEFAULT_MEMO.clear()
