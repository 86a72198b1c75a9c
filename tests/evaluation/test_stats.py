"""Paired statistics against references computed here by hand: McNemar's exact p from the binomial cdf, the
permutation p of a corpus F1 by enumerating every swap, the bootstrap by a per-resample loop, seed
stratification, the t-based comparison of whole-run numbers, and the verdict."""
import itertools
import json
import math

import numpy as np
import pytest
from scipy.stats import binom
from scipy.stats import t as t_dist

from mwb.core.errors import DataError
from mwb.evaluation.predictions import aggregate, combine, metric_parts
from mwb.evaluation.stats import _bootstrap_diffs, compare_pooled, compare_runs, compare_values, verdict


def run(values, metric="acc", prefix=""):
    return [{"id": f"{prefix}{i}", metric: v} for i, v in enumerate(values)]


def mcnemar_ref(b01, b10):
    n = b01 + b10
    return 1.0 if n == 0 else min(1.0, 2 * binom.cdf(min(b01, b10), n, 0.5))


def test_mcnemar_matches_binomial_cdf_on_random_pairs():
    rng = np.random.default_rng(11)
    a = (rng.random(300) < 0.55).astype(int)
    b = np.where(rng.random(300) < 0.2, 1 - a, a)  # flip 20%: discordant pairs both ways
    b01, b10 = int(np.sum((a == 0) & (b == 1))), int(np.sum((a == 1) & (b == 0)))
    assert b01 != b10
    r = compare_runs([run(a.tolist())], [run(b.tolist())], "acc", resamples=2000)
    assert r.test == "mcnemar-exact" and r.n_items == 300 and r.n_seeds == 1
    assert r.p == pytest.approx(mcnemar_ref(b01, b10), rel=1e-9)
    assert r.mean_a == pytest.approx(a.mean()) and r.diff == pytest.approx(b.mean() - a.mean())


def test_mcnemar_hand_worked_8_vs_2():
    # 8 items A wrong → B right, 2 items A right → B wrong, 5 right in both, 5 wrong in both
    a = [0] * 8 + [1] * 2 + [1] * 5 + [0] * 5
    b = [1] * 8 + [0] * 2 + [1] * 5 + [0] * 5
    r = compare_runs([run(a)], [run(b)], "acc", resamples=2000)
    assert r.p == pytest.approx(0.109375, abs=1e-12)  # 2 * P(X <= 2), X ~ Bin(10, 1/2) = 2 * 56/1024
    assert r.diff == pytest.approx(6 / 20)


def test_legacy_mcnemar_pools_discordant_pairs_over_seeds_and_no_discordance_gives_one():
    s0a, s0b = [0] * 5 + [1], [1] * 5 + [0]  # 5 vs 1
    s1a, s1b = [0] * 3 + [1] + [1] * 4, [1] * 3 + [0] + [1] * 4  # 3 vs 1
    r = compare_pooled([run(s0a), run(s1a)], [run(s0b), run(s1b)], "acc", resamples=2000)
    assert r.p == pytest.approx(0.109375, abs=1e-12) and r.n_seeds == 2 and r.n_items == 14
    assert r.test == "legacy-pooled"
    same = compare_runs([run([1, 0, 1])], [run([1, 0, 1])], "acc", resamples=2000)
    assert same.p == 1.0 and same.diff == 0.0


def test_permutation_detects_a_planted_shift_and_not_identical_runs():
    rng = np.random.default_rng(5)
    a = rng.normal(size=200)
    b = a + 0.3 + 0.5 * rng.normal(size=200)
    r = compare_runs([run(a.tolist(), "score")], [run(b.tolist(), "score")], "score", resamples=2000)
    assert r.test == "permutation" and r.p < 0.01 and r.diff == pytest.approx(float((b - a).mean()))
    same = compare_runs([run(a.tolist(), "score")], [run(a.tolist(), "score")], "score", resamples=2000)
    assert same.p == 1.0 and same.diff == 0.0 and same.ci95 == (0.0, 0.0)


def f1_records(counts, prefix=""):
    return [{"id": f"{prefix}{i}", "f1": dict(zip(("tp", "fp", "fn"), c))} for i, c in enumerate(counts)]


def test_permutation_recomputes_corpus_f1_exactly_as_enumerated():
    """6 items → 64 swaps: scipy enumerates them all, and so does this test, recomputing F1 from parts."""
    A = np.array([[1, 0, 1], [2, 1, 0], [0, 1, 1], [3, 0, 0], [1, 1, 1], [0, 2, 1]], float)
    B = np.array([[2, 0, 0], [2, 0, 0], [1, 0, 1], [3, 0, 0], [2, 0, 1], [1, 1, 0]], float)
    r = compare_runs([f1_records(A.astype(int).tolist())], [f1_records(B.astype(int).tolist())], "f1")
    observed = combine("f1", B.sum(0)) - combine("f1", A.sum(0))
    null = []
    for flips in itertools.product([False, True], repeat=len(A)):
        f = np.array(flips)[:, None]
        null.append(combine("f1", np.where(f, A, B).sum(0)) - combine("f1", np.where(f, B, A).sum(0)))
    null = np.array(null)
    eps = 1e-12
    ref = min(1.0, 2 * min(np.mean(null >= observed - eps), np.mean(null <= observed + eps)))
    assert r.diff == pytest.approx(observed) and r.p == pytest.approx(ref) and r.test == "permutation"


def test_bootstrap_equals_a_per_resample_loop_on_corpus_f1():
    rng = np.random.default_rng(2)
    pa = rng.integers(0, 4, size=(30, 3)).astype(float)
    pb = rng.integers(0, 4, size=(30, 3)).astype(float)
    fast = _bootstrap_diffs("f1", [(pa, pb)], 500, np.random.default_rng(9))
    draws = np.random.default_rng(9).integers(0, 30, size=(500, 30))
    slow = [combine("f1", pb[idx].sum(0)) - combine("f1", pa[idx].sum(0)) for idx in draws]
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_bootstrap_ci_contains_diff_and_shrinks_with_n():
    rng = np.random.default_rng(0)

    def counts(n, p_tp):
        return np.stack([rng.binomial(3, p_tp, n), rng.binomial(2, 0.3, n), rng.binomial(2, 0.3, n)], 1).tolist()

    widths = []
    for n in (100, 1600):
        r = compare_runs([f1_records(counts(n, 0.5))], [f1_records(counts(n, 0.6))], "f1", resamples=2000)
        assert r.ci95[0] < r.diff < r.ci95[1]
        widths.append(r.ci95[1] - r.ci95[0])
    assert widths[1] < widths[0] / 2.5  # ~1/sqrt(16) = 1/4 in expectation


def test_perplexity_comparison_uses_corpus_ppl():
    nll_a, nll_b, tok = [20.0, 5.0, 9.0], [18.0, 4.0, 9.5], [10, 4, 6]
    ra = [{"id": str(i), "ppl": {"nll": n, "tokens": t}} for i, (n, t) in enumerate(zip(nll_a, tok))]
    rb = [{"id": str(i), "ppl": {"nll": n, "tokens": t}} for i, (n, t) in enumerate(zip(nll_b, tok))]
    r = compare_runs([ra], [rb], "ppl", resamples=2000)
    assert r.mean_a == pytest.approx(math.exp(34 / 20)) and r.mean_b == pytest.approx(math.exp(31.5 / 20))
    assert r.mean_a == pytest.approx(aggregate(ra, "ppl"))


def test_legacy_seeds_are_averaged_and_resampled_within_each_seed():
    rng = np.random.default_rng(4)
    a0, a1 = rng.random(10), rng.random(30) + 1.0  # seeds with different means and sizes
    b0, b1 = a0 + 0.1, a1 + 0.3  # a constant gain within each seed
    r = compare_pooled([run(a0.tolist(), "s"), run(a1.tolist(), "s")], [run(b0.tolist(), "s"), run(b1.tolist(), "s")],
                     "s", resamples=2000)
    assert r.mean_a == pytest.approx((a0.mean() + a1.mean()) / 2)  # mean over seeds, not over the 40 items
    assert r.mean_b == pytest.approx((b0.mean() + b1.mean()) / 2)
    assert r.diff == pytest.approx(0.2)
    # stratified: every resample keeps each seed's own items, so each seed's gain is exact and the interval
    # collapses to 0.2; resampling the 40 items pooled would mix the two gains and widen it
    assert r.ci95 == pytest.approx((0.2, 0.2), abs=1e-9)
    assert r.n_seeds == 2 and r.n_items == 40


def test_items_pair_by_id_not_by_order():
    a = run([1, 1, 0, 0, 1, 0])
    b = list(reversed(a))  # the same outcomes listed backwards: paired by position they would all disagree
    r = compare_runs([a], [b], "acc", resamples=2000)
    assert r.diff == 0.0 and r.p == 1.0 and r.ci95 == (0.0, 0.0)


def test_mismatched_ids_and_seed_counts_are_data_errors():
    a = run([1, 0, 1, 1])
    b = run([1, 0, 1], prefix="") + [{"id": "x9", "acc": 1}, {"id": "x8", "acc": 0}]
    with pytest.raises(DataError) as e:
        compare_runs([a], [b], "acc")
    msg = str(e.value)
    assert "1 of A's ids missing in B" in msg and "2 of B's missing in A" in msg and "'3'" in msg
    with pytest.raises(DataError, match="seed 1"):
        compare_runs([a, a], [a, b], "acc")
    with pytest.raises(DataError, match="A has 3 runs and B has 2"):
        compare_runs([a, a, a], [a, a], "acc")


def test_same_seed_same_result_and_to_dict_is_strict_json():
    rng = np.random.default_rng(1)
    a, b = run(rng.random(50).tolist(), "s"), run(rng.random(50).tolist(), "s")
    r1 = compare_runs([a], [b], "s", resamples=2000, seed=7)
    assert r1 == compare_runs([a], [b], "s", resamples=2000, seed=7)
    assert r1.ci95 != compare_runs([a], [b], "s", resamples=2000, seed=8).ci95
    d = json.loads(json.dumps(r1.to_dict(), allow_nan=False))
    assert d["diff"] == pytest.approx(r1.diff) and d["ci95"] == list(r1.ci95) and d["seed"] == 7
    assert d["test"] == "permutation" and d["resamples"] == 2000 and d["n_items"] == 50


def test_compare_values_t_interval_and_paired_t():
    a, b = [0.61, 0.58, 0.64], [0.66, 0.60, 0.70]
    r = compare_values(a, b, "accuracy")
    d = np.array(b) - np.array(a)
    half = t_dist.ppf(0.975, 2) * d.std(ddof=1) / math.sqrt(3)
    tstat = d.mean() / (d.std(ddof=1) / math.sqrt(3))
    assert r.diff == pytest.approx(d.mean()) and r.ci95 == pytest.approx((d.mean() - half, d.mean() + half))
    assert r.p == pytest.approx(2 * t_dist.sf(abs(tstat), 2)) and r.test == "paired-t" and r.n_seeds == 3
    one = compare_values([0.5], [0.7])
    assert one.test == "none" and math.isnan(one.p) and one.diff == pytest.approx(0.2)
    assert one.to_dict()["p"] is None and verdict(one.p, one.diff, "greater") == "not shown"
    with pytest.raises(DataError, match="one value per seed"):
        compare_values([1.0, 2.0, 3.0], [1.0, 2.0])


@pytest.mark.parametrize("p, diff, direction, expected", [
    (0.01, 0.2, "greater", "shown"), (0.01, -0.2, "greater", "contradicted"),
    (0.01, -0.2, "less", "shown"), (0.01, 0.2, "less", "contradicted"),
    (0.05, 0.2, "greater", "not shown"), (0.3, -0.2, "less", "not shown"),
    (float("nan"), 0.2, "greater", "not shown"), (None, 0.2, "greater", "not shown"),
])
def test_verdict(p, diff, direction, expected):
    assert verdict(p, diff, direction) == expected


def test_verdict_rejects_unknown_direction():
    with pytest.raises(ValueError, match="direction"):
        verdict(0.01, 0.1, "up")


def test_metric_parts_columns_follow_tp_fp_fn():
    parts = metric_parts([{"id": "0", "f1": {"fn": 3, "tp": 1, "fp": 2}}], "f1")
    assert parts.kind == "f1" and parts.parts.tolist() == [[1.0, 2.0, 3.0]] and parts.ids == ("0",)
