"""Tests of the router's embedding head (nodes/router_embed.py, nodes/router_fit.fit_head, nodes/router_model step 4).

The head is only fitted from ``router_fit._HEAD_FROM`` examples; these tests lower that threshold to fit one on a
small hand-made data set (seconds), and check the file format, the blend rule, the encoder against the wordllama
package's own code, and the one-line errors.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from sklearn.neural_network import MLPClassifier

from graph.contracts.errors import ConfigError
from nodes import router_embed, router_fit
from nodes.router import IntentRouter
from nodes.router_model import read_metadata

WORDS = {
    "lost_card": ["I lost my card", "my card is gone", "cannot find my debit card", "card went missing today",
                  "where did my card go", "misplaced my bank card"],
    "stolen_card": ["someone stole my card", "my wallet with the card was stolen", "card theft last night",
                    "a thief took my card", "my card got stolen on the bus", "robbed, card taken"],
    "refund": ["I want my money back", "refund the order please", "give me a refund", "refund for the shoes",
               "please refund this purchase", "money back for the broken item"],
    "transfer": ["send money to my friend", "wire funds abroad", "make a bank transfer", "transfer to savings",
                 "pay my landlord by transfer", "move money to another account"],
    "greeting": ["hello there", "hi", "good morning", "hey", "good evening to you", "hiya"],
}
MAP = {"lost_card": "cards", "stolen_card": "cards", "refund": "refunds", "transfer": "transfers",
       "greeting": "other"}


def _data(copies: int = 4) -> tuple[list[str], list[str]]:
    texts, labels = [], []
    for label, examples in WORDS.items():
        for k in range(copies):
            for e in examples:
                texts.append(e if k == 0 else f"{e} ({k})")
                labels.append(label)
    return texts, labels


@pytest.fixture(scope="module")
def head_router() -> IntentRouter:
    saved = router_fit._HEAD_FROM
    router_fit._HEAD_FROM = 50
    try:
        return IntentRouter().fit(*_data(), MAP)
    finally:
        router_fit._HEAD_FROM = saved


def test_encoder_equals_wordllamas_own_embed():
    """Our loader of the bundled files gives WordLlama's ``embed(norm=True)`` vectors (its inference class, fed the
    same two files: its own loader looks for the tokenizer under a directory the wheel does not have)."""
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer
    from wordllama.inference import WordLlamaInference

    tok_path, weights_path = router_embed.encoder_files()
    ref = WordLlamaInference(load_file(str(weights_path))["embedding.weight"], Tokenizer.from_file(str(tok_path)))
    texts = ["I was charged twice for the same coffee", "hi", "Überweisung ins Ausland?", "tx_1001 refund " * 20]
    ours = router_embed.load_encoder().encode(texts)
    theirs = ref.embed(texts, norm=True)
    assert ours.shape == (4, router_embed.ENCODER_DIM) and ours.dtype == np.float32
    assert np.abs(ours - theirs).max() < 1e-5
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_token_vectors_are_mapped_from_the_package_file_bit_for_bit(tmp_path):
    """The encoder maps the bundled file instead of copying it, and the mapped values are safetensors' own."""
    from safetensors.numpy import load_file

    _, weights_path = router_embed.encoder_files()
    mapped = router_embed.map_safetensor(weights_path, "embedding.weight")
    assert isinstance(mapped, np.memmap) and not mapped.flags.writeable
    ref = load_file(str(weights_path))["embedding.weight"]
    assert mapped.dtype == ref.dtype and mapped.shape == ref.shape and np.array_equal(mapped, ref)
    assert isinstance(router_embed.load_encoder()._embedding, np.memmap)
    # a damaged file is refused, not mapped past its end
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(weights_path.read_bytes()[:4096])
    with pytest.raises(ValueError, match="offsets"):
        router_embed.map_safetensor(cut, "embedding.weight")
    with pytest.raises(ValueError, match="no tensor"):
        router_embed.map_safetensor(weights_path, "other")
    (tmp_path / "junk").write_bytes(b"\xff" * 64)
    with pytest.raises(ValueError, match="header length"):
        router_embed.map_safetensor(tmp_path / "junk", "embedding.weight")


def test_encoder_gives_zero_vector_for_no_tokens_and_handles_empty_lists():
    enc = router_embed.load_encoder()
    assert enc.encode([]).shape == (0, router_embed.ENCODER_DIM)
    assert not enc.encode([""]).any()


def test_head_is_fitted_only_on_enough_data():
    """Below ``_HEAD_FROM`` examples (the unit tests' tiny sets, a user's small file) the router is TF-IDF only and
    its file keeps format version 2."""
    texts, labels = _data(copies=1)
    router = IntentRouter().fit(texts, labels, MAP)
    assert router._model is not None and router._model.head is None
    assert router_fit.fit_head(texts, labels, tuple(sorted(set(labels)))) is None


def test_blend_is_half_tfidf_half_head_and_head_equals_scikit_learn(head_router):
    """p = (1 - blend) * p_tfidf + blend * p_head, and the exported head scores exactly as the MLPClassifier fitted
    with the same settings (same seed and the same BLAS threads, in the same process: the same network)."""
    model = head_router._model
    assert model is not None and model.head is not None and model.head.blend == router_fit._HEAD_BLEND
    probe = ["my card was taken by a thief", "hello!", "refund please", "send money to mum", "zzz"]
    texts, labels = _data()
    vectors = router_embed.load_encoder().encode(texts)
    with router_fit._pinned_blas():  # as fit_head trains: another thread count rounds differently
        mlp = MLPClassifier(hidden_layer_sizes=(router_fit._HEAD_HIDDEN,), early_stopping=True,
                            max_iter=router_fit._HEAD_MAX_ITER, random_state=0).fit(vectors, labels)
    ref = mlp.predict_proba(router_embed.load_encoder().encode(probe))
    ref = ref[:, [list(mlp.classes_).index(c) for c in head_router.classes]]
    head = model.head.predict_proba(router_embed.load_encoder().encode(probe))
    assert np.abs(head - ref).max() < 1e-5
    blended = head_router.predict_proba(probe)
    assert np.abs(blended - (0.5 * model._tfidf_proba(probe) + 0.5 * head)).max() < 1e-12
    assert np.allclose(blended.sum(axis=1), 1.0)
    assert head_router.route("a thief took my card on the train").agent == "cards"


def test_every_fit_runs_its_blas_on_one_thread(monkeypatch):
    """The TF-IDF fit and the head's training run with BLAS limited to ``router_fit._BLAS_THREADS`` (1) whatever the
    caller's limit (2 here, so the pin shows on a one-core machine too), and the caller's limit comes back after."""
    from sklearn.pipeline import Pipeline
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> set[int]:
        return {m["num_threads"] for m in threadpool_info() if m["user_api"] == "blas"}

    seen: list[tuple[str, set[int]]] = []
    for cls in (Pipeline, MLPClassifier):
        real = cls.fit

        def spy(self, *args, _real=real, _name=cls.__name__, **kwargs):
            seen.append((_name, blas_threads()))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(cls, "fit", spy)
    monkeypatch.setattr(router_fit, "_HEAD_FROM", 50)
    texts, labels = _data()
    with threadpool_limits(limits=2, user_api="blas"):
        router_fit.fit_pipeline(texts, labels)
        assert router_fit.fit_head(texts, labels, tuple(sorted(set(labels)))) is not None
        assert blas_threads() == {2}
    assert seen == [("Pipeline", {1}), ("MLPClassifier", {1})]
    assert router_fit.FIT_SETTINGS["blas_threads"] == router_fit._BLAS_THREADS == 1


def test_head_router_roundtrip_is_version_3_and_exact(tmp_path, head_router):
    path = tmp_path / "r.npz"
    head_router.save(path)
    meta = read_metadata(path)
    assert meta["format_version"] == 3 and meta["head"] == {"encoder": router_embed.ENCODER_NAME, "blend": 0.5}
    assert meta["fit"]["settings"]["embedding_head"]["hidden"] == router_fit._HEAD_HIDDEN
    again = IntentRouter.load(path)
    probe = ["lost my card", "hi", "wire to savings"]
    assert np.array_equal(again.predict_proba(probe), head_router.predict_proba(probe))
    again.save(tmp_path / "b.npz")
    assert (tmp_path / "b.npz").read_bytes() == path.read_bytes()


def _rewrite(path: Path, out: Path, *, meta_change=None, drop: str | None = None,
             replace: dict[str, np.ndarray] | None = None) -> None:
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            name = info.filename[:-4]
            if name == drop:
                continue
            data = src.read(info)
            if name == "metadata" and meta_change is not None:
                meta = json.loads(str(np.load(path)["metadata"][()]))
                meta_change(meta)
                import io
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.array(json.dumps(meta)), allow_pickle=False)
                data = buf.getvalue()
            if replace and name in replace:
                import io
                buf = io.BytesIO()
                np.lib.format.write_array(buf, replace[name], allow_pickle=False)
                data = buf.getvalue()
            dst.writestr(info, data)


@pytest.mark.parametrize("case, fragment", [
    ("other encoder", "needs the sentence encoder"),
    ("missing array", "array head_w2 is missing"),
    ("wrong shape", "do not fit together"),
    ("non-finite", "non-finite"),
    ("bad blend", "blend"),
    ("head in version 2", "bad head"),
])
def test_malformed_heads_are_one_line_config_errors(tmp_path, head_router, case, fragment):
    good = tmp_path / "good.npz"
    head_router.save(good)
    w1 = np.load(good)["head_w1"]
    bad = tmp_path / "bad.npz"
    if case == "other encoder":
        _rewrite(good, bad, meta_change=lambda m: m["head"].update(encoder="some-other-model"))
    elif case == "missing array":
        _rewrite(good, bad, drop="head_w2")
    elif case == "wrong shape":
        _rewrite(good, bad, replace={"head_w1": w1[:, :10]})
    elif case == "non-finite":
        broken = w1.copy()
        broken[0, 0] = np.nan
        _rewrite(good, bad, replace={"head_w1": broken})
    elif case == "bad blend":
        _rewrite(good, bad, meta_change=lambda m: m["head"].update(blend=1.5))
    else:
        _rewrite(good, bad, meta_change=lambda m: m.update(format_version=2))
    with pytest.raises(ConfigError) as err:
        IntentRouter.load(bad)
    msg = str(err.value)
    assert "\n" not in msg and str(bad) in msg and fragment in msg, msg


def test_a_head_router_without_the_encoder_installed_is_a_one_line_error(tmp_path, head_router, monkeypatch):
    """On a machine where wordllama is missing, loading such a router says so at load time, not at the first
    message (``encoder_files``), in one line that says how to fix it."""
    path = tmp_path / "r.npz"
    head_router.save(path)
    monkeypatch.setattr(router_embed.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as err:
        IntentRouter.load(path)
    assert "\n" not in str(err.value) and "wordllama" in str(err.value) and "not installed" in str(err.value)


def test_ctrl_c_while_the_head_trains_is_not_swallowed(monkeypatch):
    """scikit-learn's MLPClassifier catches KeyboardInterrupt, warns "Training interrupted by user." and returns the
    half-trained network; fit_head turns that back into KeyboardInterrupt, so train-router installs nothing and does not
    exit 0."""
    import warnings

    def interrupted(self, X, y):  # what MLPClassifier.fit does on Ctrl-C
        warnings.warn("Training interrupted by user.", stacklevel=2)
        return self

    monkeypatch.setattr(router_fit.MLPClassifier, "fit", interrupted)
    monkeypatch.setattr(router_fit, "_HEAD_FROM", 50)
    texts, labels = _data()
    with pytest.raises(KeyboardInterrupt):
        router_fit.fit_head(texts, labels, tuple(sorted(set(labels))))


def test_head_skip_reasons_name_the_cause():
    """train-router tells the user why the router has no embedding head."""
    many = [f"l{i % 50}" for i in range(2500)]
    assert router_fit.head_skip_reason(many) is None
    assert router_fit.head_skip_reason(many[:1999]) == "fewer than 2,000 examples"
    assert router_fit.head_skip_reason(many + ["lonely"]) == "label 'lonely' has 1 example (2 needed)"
    assert router_fit.head_skip_reason(["a", "b"] * 1500) == "only two labels"
    assert router_fit.head_skip_reason([f"l{i % 400}" for i in range(2500)]) == "more labels than a tenth of the examples"
