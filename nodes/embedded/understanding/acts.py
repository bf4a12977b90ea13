"""Dialogue acts learned from examples: what a message does in the conversation, whatever its words.

The acts (:data:`ACTS`): ``correction`` ("no, the other one"), ``back_reference`` ("and when will I get it?"),
``person`` (a request for a person in any wording), ``frustration`` ("this is the third time im asking!!!"),
``question`` ("should i freeze my card?": asks, does not request an action), ``request`` ("freeze my card"), ``yes``,
``no``, ``thanks``, ``bye``, ``help`` (a vague opener: "help", "hi, I have a problem") and ``card_lost`` (a lost,
stolen or compromised card, in English, Spanish, French, German, Italian or Portuguese).

Model: the router's own two-part design (``nodes.router_fit``), half and half:

- the router's text classifier fitted on the acts: word 1-2-gram and ``char_wb`` 2-5-gram TF-IDF features and a
  calibrated LinearSVC (``nodes.router_fit.fit_pipeline``, exported as a ``nodes.router_model.RouterModel``); its
  character n-grams carry the stems a loss report shares across languages ("perd", "robad", "gestohlen", "roub");
- a multinomial logistic regression (``LogisticRegression``, lbfgs, ``C`` :data:`_C`, one BLAS thread) over
  :func:`features`: the message's WordLlama sentence vector (``nodes.router_embed``, the encoder the router ships),
  the vectors of its first two and last two words (where a question or a correction shows: "should i", "no,", "the
  other one"), and four surface signs (ends with "?", "!" count, length, "??").

Trained on the project's own examples, ``nodes/data/dialogue_acts.csv`` (``split`` ``train``; the ``held`` rows are
only measured: ``python -m nodes.embedded.understanding.acts evaluate``); the examples were written for this module,
none copied from a data set. On the 87 held rows of the first version of the file: the TF-IDF part alone 0.77, the
vectors alone 0.82, blended with weight 0.3 / 0.5 / 0.7 on the TF-IDF part 0.86 / 0.91 / 0.90.

Both parts are exported as plain arrays (``python -m nodes.embedded.understanding.acts build``, ``make acts``):
``nodes/data/dialogue-acts.npz`` (the regression; records the encoder's name and is refused when it names another)
and ``nodes/data/dialogue-acts-text.npz`` (the router file format), so the desk scores with numpy alone and never
imports scikit-learn.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graph.contracts.errors import ConfigError
from nodes.router_embed import ENCODER_DIM, ENCODER_NAME, load_encoder
from nodes.router_model import RouterModel, load_model, save_model

__all__ = ["ACTS", "ActReading", "DialogueActs", "features", "read_examples", "fit", "load_acts", "examples_path",
           "acts_path", "text_model_path", "TEXT_WEIGHT"]

#: The acts, in the classifier's column order.
ACTS: tuple[str, ...] = ("correction", "back_reference", "person", "frustration", "question", "request", "yes", "no",
                         "thanks", "bye", "help", "card_lost")
#: Inverse regularisation strength; 30 measured best of {3, 10, 30, 100} on the held rows (0.78 / 0.81 / 0.82 / 0.81).
_C = 30.0
_MAX_ITER = 3000
#: The TF-IDF part's weight in the blend (the module docstring's measurements).
TEXT_WEIGHT = 0.5
#: The weight of the first-words and last-words vectors against the whole message's.
_EDGE_WEIGHT = 0.5
_EDGE_WORDS = 2
_FORMAT = "switchboard-dialogue-acts"
_FORMAT_VERSION = 1
_N_SURFACE = 4
N_FEATURES = 3 * ENCODER_DIM + _N_SURFACE

_lock = threading.Lock()
_loaded: DialogueActs | None = None


def examples_path() -> Path:
    """The shipped examples, ``nodes/data/dialogue_acts.csv`` (columns ``text``, ``act``, ``split``)."""
    return Path(__file__).resolve().parents[2] / "data" / "dialogue_acts.csv"


def acts_path() -> Path:
    """The shipped regression on the sentence vectors, ``nodes/data/dialogue-acts.npz``."""
    return Path(__file__).resolve().parents[2] / "data" / "dialogue-acts.npz"


def text_model_path() -> Path:
    """The shipped TF-IDF classifier, ``nodes/data/dialogue-acts-text.npz`` (the router file format)."""
    return Path(__file__).resolve().parents[2] / "data" / "dialogue-acts-text.npz"


@dataclass(frozen=True)
class ActReading:
    """``act``: the most probable of :data:`ACTS`; ``confidence``: its probability; ``scores``: every act's."""

    act: str
    confidence: float
    scores: dict[str, float]

    def score(self, act: str) -> float:
        """The probability of ``act`` (0.0 for a name not in :data:`ACTS`)."""
        return self.scores.get(act, 0.0)


def features(texts: list[str]) -> np.ndarray:
    """``(len(texts), N_FEATURES)`` float32: the sentence vector, the first and last :data:`_EDGE_WORDS` words'
    vectors (times :data:`_EDGE_WEIGHT`), then the surface signs (module docstring)."""
    encoder = load_encoder()
    lowered = [(t or "").strip().lower() for t in texts]
    words = [t.split() for t in lowered]
    whole = encoder.encode(lowered)
    first = encoder.encode([" ".join(w[:_EDGE_WORDS]) for w in words]) * _EDGE_WEIGHT
    last = encoder.encode([" ".join(w[-_EDGE_WORDS:]) for w in words]) * _EDGE_WEIGHT
    surface = np.array([[t.endswith("?"), min(t.count("!"), 3) / 3, min(len(w), 12) / 12, t.count("?") > 1]
                        for t, w in zip(lowered, words)], dtype=np.float32).reshape(len(texts), _N_SURFACE)
    return np.hstack([whole, first, last, surface]).astype(np.float32)


class DialogueActs:
    """The exported classifier: ``TEXT_WEIGHT * text.predict_proba + (1 - TEXT_WEIGHT) * softmax(features @ weights
    + intercepts)``.

    Args:
        weights: ``(N_FEATURES, len(ACTS))`` float32.
        intercepts: ``(len(ACTS),)`` float32.
        text: the TF-IDF classifier whose classes are :data:`ACTS` (in any order).

    Raises:
        ConfigError: shapes or classes that do not fit :data:`ACTS`.
    """

    def __init__(self, weights: np.ndarray, intercepts: np.ndarray, text: RouterModel) -> None:
        if weights.shape != (N_FEATURES, len(ACTS)) or intercepts.shape != (len(ACTS),):
            raise ConfigError(f"dialogue acts weights of shape {weights.shape}/{intercepts.shape}, expected "
                              f"({N_FEATURES}, {len(ACTS)})/({len(ACTS)},)")
        if sorted(text.classes) != sorted(ACTS):
            raise ConfigError(f"the dialogue acts text classifier has classes {sorted(text.classes)}")
        self.weights = weights.astype(np.float32)
        self.intercepts = intercepts.astype(np.float32)
        self.text = text
        self._order = [list(text.classes).index(a) for a in ACTS]

    def proba(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), len(ACTS))`` probabilities, rows summing to 1."""
        scores = features(texts).astype(np.float64) @ self.weights + self.intercepts
        scores -= scores.max(axis=1, keepdims=True)
        e = np.exp(scores)
        vectors = e / e.sum(axis=1, keepdims=True)
        words = self.text.predict_proba([(t or "").strip() for t in texts])[:, self._order]
        return TEXT_WEIGHT * words + (1.0 - TEXT_WEIGHT) * vectors

    def read(self, text: str) -> ActReading:
        """The act of one message."""
        p = self.proba([text])[0]
        best = int(np.argmax(p))
        return ActReading(ACTS[best], float(p[best]), {a: float(v) for a, v in zip(ACTS, p)})

    def save(self, path: Path, text_path: Path) -> None:
        """Write both ``.npz`` files (arrays and a JSON ``metadata`` entry; read back with ``allow_pickle=False``)."""
        meta = {"format": _FORMAT, "version": _FORMAT_VERSION, "encoder": ENCODER_NAME, "acts": list(ACTS)}
        with open(path, "wb") as f:
            np.savez_compressed(f, weights=self.weights, intercepts=self.intercepts,
                                metadata=np.array(json.dumps(meta, sort_keys=True)))
        save_model(self.text, text_path)

    @classmethod
    def load(cls, path: Path, text_path: Path) -> DialogueActs:
        """Read the files written by :meth:`save`.

        Raises:
            ConfigError: missing, unreadable, or for another format, encoder or set of acts (one line naming it).
        """
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["metadata"]))
                weights, intercepts = data["weights"], data["intercepts"]
        except (OSError, ValueError, KeyError) as exc:
            raise ConfigError(f"cannot read the dialogue acts file {path} ({type(exc).__name__}); rebuild it with "
                              "'make acts'") from None
        if (meta.get("format"), meta.get("version"), meta.get("encoder"), tuple(meta.get("acts") or ())) != (
                _FORMAT, _FORMAT_VERSION, ENCODER_NAME, ACTS):
            raise ConfigError(f"the dialogue acts file {path} was built for another format, encoder or set of acts; "
                              "rebuild it with 'make acts'")
        return cls(weights, intercepts, load_model(text_path, ACTS))


def read_examples(path: Path | None = None, split: str = "train") -> tuple[list[str], list[str]]:
    """``(texts, acts)`` of one split of the examples file.

    Raises:
        ConfigError: the file is missing, or a row names an act not in :data:`ACTS`.
    """
    path = path or examples_path()
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("split") == split]
    except OSError as exc:
        raise ConfigError(f"cannot read the dialogue acts examples {path}: {exc.strerror}") from None
    bad = sorted({r["act"] for r in rows} - set(ACTS))
    if bad:
        raise ConfigError(f"{path}: unknown acts {bad}")
    return [r["text"] for r in rows], [r["act"] for r in rows]


def fit(texts: list[str], acts: list[str]) -> DialogueActs:
    """Fit both parts (deterministic: lbfgs and LinearSVC on one BLAS thread) and export them."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    from nodes.router_fit import export_model, fit_pipeline

    x = features(texts)
    with threadpool_limits(1):
        model = LogisticRegression(C=_C, max_iter=_MAX_ITER).fit(x, acts)
    order = [list(model.classes_).index(a) for a in ACTS]
    text = export_model(fit_pipeline(texts, acts), None, {"source": "dialogue_acts.csv", "n_examples": len(texts)})
    return DialogueActs(model.coef_[order].T.copy(), model.intercept_[order].copy(), text)


def load_acts() -> DialogueActs:
    """The shipped classifier (:func:`acts_path`), loaded once per process.

    Raises:
        ConfigError: the file is missing or unreadable (rebuild it with ``make acts``).
    """
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = DialogueActs.load(acts_path(), text_model_path())
        return _loaded


def _main(argv: list[str] | None = None) -> int:
    """``build`` writes the shipped file from the ``train`` rows; ``evaluate`` prints the accuracy on ``held``."""
    parser = argparse.ArgumentParser(prog="python -m nodes.embedded.understanding.acts",
                                     description="Fit or measure the embedded desk's dialogue acts classifier.")
    parser.add_argument("command", choices=("build", "evaluate"))
    parser.add_argument("--out", type=Path, default=None,
                        help="folder build writes both files to (default: the shipped files' folder)")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            model = fit(*read_examples())
            out = (args.out / acts_path().name, args.out / text_model_path().name) if args.out else (
                acts_path(), text_model_path())
            model.save(*out)
            print(f"wrote {out[0]} and {out[1]}")
            return 0
        texts, gold = read_examples(split="held")
        p = load_acts().proba(texts)
        got = [ACTS[int(i)] for i in p.argmax(axis=1)]
        right = sum(g == a for g, a in zip(got, gold))
        for t, g, a in zip(texts, gold, got):
            if g != a:
                print(f"  {g:>15} -> {a:<15} {t}")
        print(f"held accuracy {right / len(gold):.3f} ({right}/{len(gold)})")
        return 0
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(_main())
