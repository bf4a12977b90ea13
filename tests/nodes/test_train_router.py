"""train-router is safe to use: the desk's conversational and out-of-scope classes are kept,
held-out figures are reported beside the shipped router's on the same data, and a worse router is not installed
without --force."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graph.app.cli import app
from nodes.router import read_router_examples, trained_router_path
from nodes.router_training import DESK_PREFIX, merge_desk_classes, read_holdout, split_held_out


def test_merge_keeps_the_desk_classes_unless_the_data_has_its_own() -> None:
    texts, labels, mapping, added = merge_desk_classes(["my card is lost"], ["lost"], {"lost": "cards"})
    ex_texts, ex_topics, topic_agent = read_router_examples()
    assert added == sum(topic_agent[t] == "other" for t in ex_topics) > 0
    assert len(texts) == 1 + added and all(lab.startswith(DESK_PREFIX) for lab in labels[1:])
    assert {mapping[lab] for lab in labels[1:]} == {"other"} and mapping["lost"] == "cards"
    own = merge_desk_classes(["hi"], ["hello"], {"hello": "other"})
    assert own == (["hi"], ["hello"], {"hello": "other"}, 0)


def test_split_is_stratified_and_deterministic() -> None:
    labels = ["a"] * 10 + ["b"] * 5 + ["c"]
    train, held = split_held_out(labels)
    assert (train, held) == split_held_out(labels)
    assert sorted(train + held) == list(range(16))
    assert [labels[i] for i in held].count("a") == 2 and [labels[i] for i in held].count("b") == 1
    assert "c" not in [labels[i] for i in held]  # a single example stays in train


def test_holdout_sentences_are_not_training_examples() -> None:
    texts, agents = read_holdout()
    ex_texts, _, _ = read_router_examples()
    assert len(texts) >= 40 and set(agents) == {"other"}
    assert not {t.lower() for t in texts} & {t.lower() for t in ex_texts}


def _small_data(tmp_path: Path) -> tuple[Path, Path]:
    """A deliberately thin data set (6 of our own sentences per agent, taken from the shipped examples) with its own
    tiny small-talk label: no desk examples are merged, so the result routes much less small talk to ``other``."""
    texts, topics, topic_agent = read_router_examples()
    rows, seen = [], {}
    for t, topic in zip(texts, topics):
        agent = topic_agent[topic]
        if agent != "other" and seen.get(agent, 0) < 6:
            seen[agent] = seen.get(agent, 0) + 1
            rows.append((t, agent + "_things"))
    data = tmp_path / "small.csv"
    with open(data, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["text", "category"])
        w.writerows(rows)
    rows += [("hello there friend", "chit_chat"), ("many thanks friend", "chit_chat")]
    with open(data, "a", newline="") as fh:
        csv.writer(fh).writerows(rows[-2:])
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"agents": {**{a: [a + "_things"] for a in seen}, "other": ["chit_chat"]}}))
    return data, labels


def test_a_worse_router_is_refused_unless_forced(tmp_path: Path, isolated_home) -> None:
    data, labels = _small_data(tmp_path)
    r = CliRunner().invoke(app, ["train-router", str(data), "--labels", str(labels)])
    assert r.exit_code == 1, r.output
    out = " ".join(r.output.split())  # rich wraps long lines
    assert "held-out accuracy" in out and "shipped" in out and "own 'other' labels" in out
    assert "not installed" in out and "conversational/out-of-scope" in out
    # refused right after the comparison: no second fit, and no word of a router that was never made
    assert "no router to install was fitted" in out and "for the router to install" not in out, r.output
    assert "refitted" not in out and "installed router" not in out, r.output
    assert not trained_router_path().exists()
    forced = CliRunner().invoke(app, ["train-router", str(data), "--labels", str(labels), "--force"])
    assert forced.exit_code == 0 and "installed" in forced.output and trained_router_path().exists()
    assert "for the router to install" in " ".join(forced.output.split()), forced.output


def test_a_worse_router_costs_one_fit_when_it_will_not_be_installed(tmp_path: Path) -> None:
    """``refit_if_worse=False`` (what train-router passes without --force) stops after the comparison fit."""
    from nodes.router import load_training_labels, read_labelled_csv
    from nodes.router_training import train_with_holdout

    data, labels = _small_data(tmp_path)  # worse on small talk: its own two 'other' rows replace the desk's
    user_texts, cats = read_labelled_csv(data)
    user_labels, mapping = load_training_labels(labels, cats)
    steps: list[str] = []
    router, report = train_with_holdout(user_texts, user_labels, mapping, step=steps.append, refit_if_worse=False)
    assert report.worse_on, "the thin data set should not beat the shipped router"
    assert router is None and not report.refitted and report.n_final == 0 and report.final_no_head is None
    assert not any(s.startswith("refitting") for s in steps)


@pytest.mark.slow
@pytest.mark.data
def test_banking77_router_keeps_small_talk_and_is_installed_only_when_not_worse(isolated_home) -> None:
    from tests.conftest import banking77

    folder = banking77()
    args = ["train-router", str(folder / "train.csv"), "--labels", str(folder / "agent_map.json")]
    r = CliRunner().invoke(app, args)
    report = " ".join(r.output.split())  # rich wraps long lines
    if r.exit_code == 1:  # refused: it must say on which held-out figure the trained router is worse
        assert "not installed: the trained router is worse than the shipped one on" in report, r.output
        assert not (isolated_home / "router-trained.npz").exists()
        r = CliRunner().invoke(app, [*args, "--force"])
    assert r.exit_code == 0 and "installed" in r.output, r.output
    from nodes.router import clear_router_cache, load_router

    clear_router_cache()
    router = load_router()
    for text in ("hi", "hello", "thanks, that's all"):
        assert router.route(text).agent == "other", text


def test_no_specialist_groups_become_other_labels_that_keep_their_group(tmp_path: Path) -> None:
    from graph.contracts.errors import InputError
    from nodes.router import load_training_labels
    from policies.entry import scope_of

    labels = tmp_path / "desk_map.json"
    labels.write_text(json.dumps({"agents": {"cards": ["lost_card"]},
                                  "no_specialist": {"out_of_scope": ["weather"], "conversational": ["greeting"]}}))
    cats, mapping = load_training_labels(labels, ["lost_card", "weather", "greeting"])
    assert cats == ["lost_card", "out_of_scope:weather", "conversational:greeting"]
    assert mapping == {"lost_card": "cards", "out_of_scope:weather": "other", "conversational:greeting": "other"}
    assert scope_of("other", cats[1]) == "out_of_scope"
    assert scope_of("other", cats[2]) == "conversational"
    assert scope_of("other", "desk_other:off_topic") == "out_of_scope"  # the desk's merged examples keep their kind
    assert scope_of("cards", cats[0]) is None
    labels.write_text(json.dumps({"agents": {"cards": ["lost_card"]}, "no_specialist": {"out_of_scope": ["lost_card"]}}))
    with pytest.raises(InputError, match="listed twice"):
        load_training_labels(labels, ["lost_card"])


def test_the_installed_router_is_refitted_on_every_row(tmp_path: Path) -> None:
    """The held-out comparison is a fit on 80% of the rows; the router returned (and installed) is fitted on all of
    them plus the merged desk rows, so a held-out row it was never shown before is now a training row."""
    from nodes.router_training import train_with_holdout

    texts, topics, topic_agent = read_router_examples()
    rows = [(t, topic) for t, topic in zip(texts, topics) if topic_agent[topic] != "other"][:300]
    user_texts, user_labels = [t for t, _ in rows], [lab for _, lab in rows]
    mapping = {lab: topic_agent[lab] for lab in user_labels}
    steps: list[str] = []
    router, report = train_with_holdout(user_texts, user_labels, mapping, step=steps.append)
    _, held = split_held_out(user_labels)
    assert report.merged_desk_rows > 0 and report.candidate.n_held_out == len(held) > 0
    assert report.n_train == len(user_texts) - len(held) + report.merged_desk_rows
    assert report.n_final == router.n_examples == len(user_texts) + report.merged_desk_rows
    assert steps[-1].startswith("refitting on all")
    # too few rows for an embedding head: the report says why, for both fits (train-router prints it)
    assert report.candidate_no_head == report.final_no_head == "fewer than 2,000 examples"
    assert router._model is not None and router._model.head is None
