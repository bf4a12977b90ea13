"""The evaluation harness (graph/app/evaluation.py) behind ``switchboard route``."""

from __future__ import annotations

import json
import statistics

import pytest

from graph.app.evaluation import QueryOutcome, evaluate, read_evaluation_set, summarise
from graph.contracts.errors import InputError


def _outcome(i: int, expected: str, answered: str, first: str | None = None, hops: int = 1, secs: float = 0.01,
             error: str | None = None) -> QueryOutcome:
    return QueryOutcome(i, expected, answered, first or answered, hops, secs, error)


def test_summarise_counts_by_hand():
    outs = [_outcome(0, "cards", "cards"), _outcome(1, "cards", "billing", first="cards"),
            _outcome(2, "billing", "billing"), _outcome(3, "billing", "clarify", first="none", hops=0),
            _outcome(4, "refunds", "refunds", hops=2), _outcome(5, "cards", "cards")]
    r = summarise(outs, router="r", model="m")
    assert r.queries == 6
    assert r.accuracy == pytest.approx(4 / 6)
    assert r.accuracy_first_handoff == pytest.approx(5 / 6)  # the misanswered card query was routed right
    assert r.confusion_rows == ("billing", "cards", "refunds")
    assert r.confusion_columns == ("billing", "cards", "refunds", "clarify")
    assert r.confusion == ((1, 0, 0, 1), (1, 2, 0, 0), (0, 0, 1, 0))
    assert r.per_agent["cards"].recall == pytest.approx(2 / 3) and r.per_agent["cards"].precision == 1.0
    assert r.per_agent["billing"].recall == 0.5 and r.per_agent["billing"].precision == 0.5
    assert r.per_agent["cards"].support == 3
    assert r.handoffs_per_query == pytest.approx(6 / 6)
    assert r.failures == ()
    fig = r.figures()
    assert set(fig) == {"queries", "accuracy_answering_agent", "accuracy_first_handoff", "handoffs_per_query",
                        "p50_s", "p95_s", "router", "model", "desk_accuracy", "in_scope_refused",
                        "in_scope_no_specialist", "out_of_scope_recall", "conversational_no_specialist",
                        "no_specialist_recall"}
    assert json.loads(json.dumps(fig)) == fig


@pytest.mark.filterwarnings("error")
def test_percentiles_match_the_previous_statistics_definition():
    secs = [0.013 * ((i * 7919) % 101) + 0.001 * i for i in range(60)]
    r = summarise([_outcome(i, "cards", "cards", secs=s) for i, s in enumerate(secs)], router="r", model="m")
    assert r.p50_s == pytest.approx(statistics.median(secs))
    assert r.p95_s == pytest.approx(statistics.quantiles(secs, n=20)[-1])


def test_failures_split_model_errors_from_exceptions():
    outs = [_outcome(0, "cards", "fallback", error="model server 500"),
            _outcome(1, "cards", "error:RuntimeError", first="none", hops=0, error="RuntimeError: boom"),
            _outcome(2, "cards", "cards")]
    r = summarise(outs, router="r", model="m")
    assert [o.index for o in r.failures] == [0, 1]
    assert [o.index for o in r.model_failures] == [0]
    assert r.confusion_columns == ("cards", "error:RuntimeError", "fallback")


def test_evaluate_drives_the_compiled_graph(make_graph):
    graph = make_graph()
    texts = ["I want a refund for my order", "my card is lost", "there is a strange fee", "hello there"]
    expected = ["refunds", "cards", "billing", "account"]
    seen = []
    r = evaluate(graph, texts, expected, router="keywords", model="offline",
                 progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [o.first_handoff for o in r.outcomes] == ["refunds", "cards", "billing", "clarify"]
    assert [o.answered for o in r.outcomes][:3] == expected[:3]
    assert r.outcomes[3].answered != "account" and r.accuracy == pytest.approx(3 / 4)
    assert all(o.seconds > 0 for o in r.outcomes) and r.p50_s > 0
    assert (r.router, r.model) == ("keywords", "offline")
    # the routing reasons, entry first, are kept per query (bench/route_losses.py groups by them)
    assert r.outcomes[1].reasons[0].startswith("entry->triage: ")
    assert r.outcomes[1].reasons[1].startswith("handoff->cards: ")
    assert len(r.outcomes[1].reasons) == 1 + r.outcomes[1].handoffs


def test_evaluate_records_a_raising_run_and_goes_on():
    class Broken:
        calls = 0

        def invoke(self, *a, **k):
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("boom")
            return {"outcome": {"agent": "cards"},
                    "handoff_path": [{"hop": 2, "turn": 1, "from_agent": "triage", "kind": "handoff", "to_agent": "cards"}]}

    r = evaluate(Broken(), ["a", "b"], ["cards", "cards"], router="r", model="m")
    assert [o.answered for o in r.outcomes] == ["error:RuntimeError", "cards"]
    assert r.failures[0].error == "RuntimeError: boom" and r.model_failures == ()
    with pytest.raises(InputError):
        evaluate(Broken(), [], [], router="r", model="m")
    with pytest.raises(InputError):
        evaluate(Broken(), ["a"], [], router="r", model="m")


def test_read_evaluation_set(tmp_path):
    csv = tmp_path / "q.csv"
    csv.write_text("text,category\nlost card,card_lost\nrefund?,refund_q\nfee,fee_q\n")
    amap = tmp_path / "map.json"
    amap.write_text(json.dumps({"agents": {"cards": ["card_lost"], "refunds": ["refund_q"], "billing": ["fee_q"]}}))
    assert read_evaluation_set(csv, amap) == (["lost card", "refund?", "fee"], ["cards", "refunds", "billing"])
    assert read_evaluation_set(csv, amap, limit=1) == (["lost card"], ["cards"])
    with pytest.raises(InputError, match="limit"):
        read_evaluation_set(csv, amap, limit=0)
    amap.write_text(json.dumps({"agents": {"cards": ["card_lost"]}}))
    with pytest.raises(InputError, match="2 categories"):
        read_evaluation_set(csv, amap)


def test_summarise_gives_scikit_learns_figures_to_the_bit():
    """The report counts in plain Python what sklearn.metrics computes; each rate is the same one division."""
    import random
    import warnings

    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    rng = random.Random(7)
    agents = ["cards", "billing", "refunds", "policy", "no_specialist:out_of_scope"]
    answers = ["cards", "billing", "refunds", "clarify", "fallback", "none", "out_of_scope"]
    outs = [_outcome(i, rng.choice(agents), rng.choice(answers), first=rng.choice(answers), hops=rng.randrange(3))
            for i in range(333)]
    r = summarise(outs, router="r", model="m")
    from graph.app.evaluation import no_specialist_answered

    def correct(o):
        return no_specialist_answered(o) if o.expected.startswith("no_specialist:") else o.answered == o.expected

    truth = [o.expected for o in outs]
    scored = [o.expected if correct(o) else o.answered for o in outs]
    rows = sorted(set(truth))
    labels = rows + sorted({o.answered for o in outs} - set(rows))
    precision, recall, _, support = precision_recall_fscore_support(truth, scored, labels=rows, zero_division=0)
    assert r.accuracy == float(accuracy_score(truth, scored))
    assert {a: (s.precision, s.recall, s.support) for a, s in r.per_agent.items()} == \
        {a: (float(precision[k]), float(recall[k]), int(support[k])) for k, a in enumerate(rows)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matrix = confusion_matrix(truth, [o.answered for o in outs], labels=labels)[: len(rows)]
    keep = [k for k, c in enumerate(labels) if not c.startswith("no_specialist:")]
    assert r.confusion == tuple(tuple(int(x) for x in row[keep]) for row in matrix)
    assert r.handoffs_per_query == statistics.fmean(o.handoffs for o in outs)
