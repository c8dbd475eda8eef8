import json, math
import maspob_etal.claims as claims_mod
from pathlib import Path

import numpy as np
import pytest

import scipy.stats

from maspob_etal.claims import (METHODS, Claim, claim_holds, cpu_times, ledger, library_versions, load_record, load_results,
                                method_plot, notebook_defaults, notebook_name, paired_stats, parameters_cell, provenance, record,
                                report, report_markdown, results_dir, run_name, runs, sign_flip_p, summary_plot, unit_slopes,
                                verdict, verdict_counts)

def _c(**kw):
    base = dict(id="C1", statement="ours beats baseline", metric="accuracy", ours=0.8, baseline=0.7, n_seeds=3)
    return Claim(**{**base, **kw})

def test_nineteen_methods_in_spec_order():
    assert len(METHODS) == 19 and [n for n, _ in METHODS.values()] == list(range(1, 20))
    assert notebook_name("lora_convergence") == "12_lora_convergence.ipynb"

def test_holds_is_computed_in_the_stated_direction():
    assert _c().holds and not _c(higher_is_better=False).holds
    assert not _c(ours=0.7).holds  # a tie is not better
    assert _c(holds=False, baseline=None).status == "refuted"   # a property (no baseline) that fails
    assert _c(holds=np.bool_(True)).holds is True

@pytest.mark.parametrize("kw,msg", [
    (dict(ours=math.nan), "finite"), (dict(baseline=math.inf), "finite"), (dict(ours=None), "must be a number"),
    (dict(id="claim1"), "look like"), (dict(metric=""), "non-empty"), (dict(n_seeds=0), "n_seeds"),
    (dict(baseline=None), "holds"), (dict(higher_is_better="yes"), "higher_is_better"), (dict(paper=math.nan), "finite"),
    (dict(run=False), "run=False"),
])
def test_schema_errors_are_clear(kw, msg):
    with pytest.raises((ValueError, TypeError), match=msg): _c(**kw)

def test_record_roundtrip_and_env_folder(results_tmp):
    p = record("thickets", [_c(), Claim("C3", "full only", "acc", run=False)], scale="smoke", device="cpu",
               wall_time_s=3.2, metrics={"base_mse": 0.5, "label": "x", "curve": [1, 2.5]})
    assert p == results_tmp/"thickets.smoke.json" and results_dir() == results_tmp
    doc = json.loads(p.read_text())
    assert doc["slug"] == "thickets" and doc["scale"] == "smoke" and doc["device"] == "cpu" and doc["wall_time_s"] == 3.2
    for k in ["id", "statement", "metric", "ours", "baseline", "higher_is_better", "paper", "n_seeds", "holds", "run"]:
        assert k in doc["claims"][0]
    assert load_record("thickets", "smoke")["metrics"]["curve"] == [1.0, 2.5]
    assert load_results("thickets", "smoke")["C1 ours"] == 0.8 and load_results("thickets", "full") == {}
    assert [(r["id"], r["status"]) for r in ledger()] == [("C1", "held (no sesoi)"), ("C3", "not run")]

def test_record_rejects_bad_runs(results_tmp):
    with pytest.raises(ValueError, match="unknown method"): record("nosuch", [_c()], "smoke", "cpu", 1.0)
    with pytest.raises(ValueError, match="scale"): record("catq", [_c()], "medium", "cpu", 1.0)
    with pytest.raises(ValueError, match="at least one"): record("catq", [], "smoke", "cpu", 1.0)
    with pytest.raises(ValueError, match="finite"): record("catq", [_c()], "smoke", "cpu", math.nan)
    with pytest.raises(ValueError, match="finite"): record("catq", [_c()], "smoke", "cpu", 1.0, metrics={"m": [1, math.nan]})
    assert not (results_tmp/"catq.smoke.json").exists()

def test_report_tables_every_method(results_tmp):
    assert "No method notebook has recorded results yet" in report_markdown()
    src = dict(sesoi=5.0, sesoi_source="a stated rule")
    record("catq", [_c(higher_is_better=False, ours=30.0, baseline=200.0), _c(id="C2", ours=0.1, baseline=0.2)],
           "smoke", "cpu", 10.0)
    record("catq", [_c(higher_is_better=False, ours=25.0, baseline=180.0, paper=12.0, role="thesis", **src),
                    Claim("C2", "y", "acc", run=False)], "full", "cuda", 100.0)
    out = report(docs_page=results_tmp.parent/"results.qmd")
    txt = out.read_text()
    assert "**held (no sesoi)** 30 vs 200 (no CI)" in txt and "**not held (no sesoi)** 0.1 vs 0.2" in txt
    assert "**held** 25 vs 180 (no CI); sesoi 5" in txt
    assert txt.count("No results recorded yet.") == 18
    assert "**smoke**: 0 held" in txt and "2 recorded before the three verdicts (1 held, 1 not held, no sesoi); 0 not run." in txt
    assert "**full**: 1 held, 0 held, matched by a shortcut, 0 refuted, 0 inconclusive; 1 not run." in txt
    assert "| 05 | catq | C1, accuracy: **held** 25 vs 180 (no CI); sesoi 5 |" in txt          # the thesis line
    assert "| 12 vs – |" not in txt and "| 12 |" in txt                  # the paper's number sits beside ours
    assert "**gpu**" not in txt                                          # no gpu line until a gpu run exists
    qmd = (results_tmp.parent/"results.qmd").read_text()
    assert qmd.startswith("---\ntitle: Results") and qmd.count("data:image/png;base64,") == 2   # summary + catq travel in the page
    assert (results_tmp/"summary.png").read_bytes()[:4] == b"\x89PNG" and "](summary.png)" in txt
    assert (results_tmp/"figures"/"catq.png").exists() and "](figures/catq.png)" in txt and not (results_tmp/"forest.png").exists()
    assert "## Runs" in txt and "| 05 | catq | full |" in txt

def test_report_on_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"): report(tmp_path/"nope")
    assert not (tmp_path/"nope").exists()

def test_report_reads_the_committed_results_as_older_records(tmp_path):
    "Today's committed ledger: records made before the three verdicts are read as before and shown as such."
    import shutil
    from maspob_etal.claims import project_root
    src = project_root(Path(__file__).parent)/"results"
    for p in src.glob("*.json"): shutil.copy(p, tmp_path/p.name)
    txt = report(tmp_path).read_text()
    old = [c for c in ledger(tmp_path) if c["run"] and c.get("baseline") is not None and c.get("sesoi") is None]
    for r in old:   # an older comparison keeps its old holds and says that it has no sesoi
        assert Claim(**{k: v for k, v in r.items() if k in Claim.__dataclass_fields__}).status == \
            ("held (no sesoi)" if r["holds"] else "not held (no sesoi)")
    n = verdict_counts(tmp_path, "full")
    assert sum(n.values()) == sum(len(json.loads(p.read_text())["claims"]) for p in tmp_path.glob("*.full.json"))
    assert "## What became of each paper's thesis" in txt and txt.count("### ") == len(METHODS)

# --- claim statistics ---------------------------------------------------------------------------------------------

def test_t_interval_with_known_quantiles():
    "Below 30 units: mean ± t(0.975, n-1) · sd/√n; t with 2 degrees of freedom has the closed form (2p-1)/√(2p(1-p))."
    s = paired_stats([3.0, 5.0, 4.0], [1.0, 2.0, 3.0])                   # d = 2, 3, 1: mean 2, sd 1
    assert s["ci_method"] == "t" and s["effect"] == 2.0 and s["se"] == pytest.approx(1/math.sqrt(3))
    t2 = 0.95/math.sqrt(2*0.975*0.025)                                    # 4.3026527...
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((2 - t2/math.sqrt(3), 2 + t2/math.sqrt(3)), abs=1e-12)
    d = np.array([0.3, -0.1, 0.2, 0.4, 0.0, 0.1, 0.5, 0.2, -0.2, 0.3])
    s = paired_stats(d, 0.0)
    half = 2.262157*d.std(ddof=1)/math.sqrt(10)                           # the tables' t(0.975, 9)
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-7)
    ref = scipy.stats.t.interval(0.95, 9, loc=d.mean(), scale=scipy.stats.sem(d))
    assert (s["ci_low"], s["ci_high"]) == pytest.approx(ref, abs=1e-12)

def test_t_interval_is_wider_than_the_old_bootstrap_at_three_seeds():
    "The case the issue names: 3 seeds, where the percentile bootstrap called an effect held that the t interval does not."
    o, b = [0.80, 0.83, 0.86], [0.79, 0.80, 0.80]                        # d = 0.01, 0.03, 0.06
    s = paired_stats(o, b)
    boot = scipy.stats.bootstrap((np.subtract(o, b),), np.mean, method="percentile", n_resamples=10_000, random_state=0).confidence_interval
    assert boot.low > 0 and s["ci_low"] < 0                              # the old interval excluded 0, the honest one does not
    assert s["p_value"] == pytest.approx(2/8)                            # 3 of 3 positive: p = 2/2^3 at best

def test_sign_flip_p_exact_counts():
    assert sign_flip_p([1.0, 2.0, 3.0, -4.0]) == pytest.approx(14/16)    # sums 10 - 2·(subset sum): only the two zeros miss |2|
    assert sign_flip_p([1.0, 2.0, 3.0, 4.0]) == pytest.approx(2/16)      # only all-positive and all-negative reach 10
    assert sign_flip_p([0.0, 0.0, 0.0]) == 1.0
    # clusters flip as one: 2 seeds of 3 items, each seed's items sum to 3 and -1: |T| = 2 is reached by 4 of 4 patterns
    assert sign_flip_p([1.0, 1.0, 1.0, -0.5, -0.25, -0.25], cluster=[0, 0, 0, 1, 1, 1]) == pytest.approx(1.0)
    assert sign_flip_p([1.0, 1.0, 1.0, 0.5, 0.25, 0.25], cluster=[0, 0, 0, 1, 1, 1]) == pytest.approx(2/4)

@pytest.mark.parametrize("n", [6, 12, 16])
def test_sign_flip_p_matches_scipy_exactly(n):
    d = np.random.default_rng(n).normal(0.2, 1.0, n)
    ref = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf).pvalue
    assert sign_flip_p(d) == pytest.approx(ref, abs=1e-12)

def test_sign_flip_p_monte_carlo_beyond_16_units():
    d = np.random.default_rng(5).normal(0.3, 1.0, 40)
    ref = scipy.stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=50_000, random_state=1).pvalue
    assert sign_flip_p(d) == pytest.approx(ref, abs=0.01) and sign_flip_p(d) == sign_flip_p(d)   # seeded

def test_clustered_interval_is_wider_when_seeds_disagree():
    "Items pooled over 4 seeds: the item-level bootstrap is far too narrow; the clustered t on the seeds is honest."
    rng = np.random.default_rng(0)
    seed_effect = np.array([0.10, -0.05, 0.08, 0.0])
    d = np.repeat(seed_effect, 50) + 0.01*rng.standard_normal(200)
    seed = np.repeat(np.arange(4), 50)
    naive, cl = paired_stats(d, 0.0), paired_stats(d, 0.0, cluster=seed)
    assert naive["n"] == 200 and cl["n"] == 4 and cl["n_items"] == 200 and cl["ci_method"] == "cluster t"
    assert naive["ci_low"] > 0 and cl["ci_low"] < 0 < cl["ci_high"]
    assert (cl["ci_high"] - cl["ci_low"]) > 10*(naive["ci_high"] - naive["ci_low"])
    means = d.reshape(4, 50).mean(axis=1)                                # equal clusters: the t interval of the seed means
    ref = scipy.stats.t.interval(0.95, 3, loc=means.mean(), scale=scipy.stats.sem(means))
    assert (cl["ci_low"], cl["ci_high"]) == pytest.approx(ref, abs=1e-12)
    assert cl["effect"] == pytest.approx(d.mean()) and cl["wins"] == 2 and cl["p_value"] == pytest.approx(sign_flip_p(means))
    # unequal clusters: the CR1 standard error, checked against a direct sum
    g = np.array([0]*3 + [1]*7 + [2]*5); x = np.linspace(-0.2, 0.5, 15)
    s = paired_stats(x, 0.0, cluster=g)
    u = np.array([(x[g == k] - x.mean()).sum() for k in range(3)])
    assert s["se"] == pytest.approx(math.sqrt(3/2*(u**2).sum())/15, abs=1e-15)
    # 30 clusters or more: whole clusters are resampled
    many = paired_stats(np.repeat(np.linspace(-0.1, 0.3, 40), 3), 0.0, cluster=np.repeat(np.arange(40), 3))
    assert many["ci_method"] == "cluster bootstrap" and many["n"] == 40

def test_paired_stats_known_values():
    s = paired_stats([3.0, 5.0, 4.0, 6.0], [1.0, 2.0, 3.0, 4.0])          # d = 2, 3, 1, 2
    assert (s["effect"], s["wins"]) == (2.0, 4) and s["se"] == pytest.approx(np.std([2, 3, 1, 2], ddof=1)/2)
    s = paired_stats([1.0, 1.0, 1.0], 1.0)
    assert (s["effect"], s["ci_low"], s["ci_high"], s["wins"], s["ties"]) == (0.0, 0.0, 0.0, 0, 3)
    big = paired_stats(np.arange(50_000)*1e-5, 0.0, n_boot=200)           # many items: bounded memory, still exact mean
    assert big["effect"] == pytest.approx(np.arange(50_000).mean()*1e-5) and big["ci_method"] == "bootstrap"
    lo = paired_stats([3.0, 5.0, 4.0], [1.0, 2.0, 3.0], higher_is_better=False)
    assert lo["effect"] == -2.0 and lo["ci_high"] == pytest.approx(-paired_stats([3.0, 5.0, 4.0], [1.0, 2.0, 3.0])["ci_low"])

@pytest.mark.parametrize("lo,hi,rule,m,want", [(0.01, 0.2, "better", 0, True), (-0.01, 0.2, "better", 0, False),
                                               (0.0, 0.2, "better", 0, False), (-0.04, 0.1, "not_worse", 0.05, True),
                                               (-0.06, 0.1, "not_worse", 0.05, False), (-0.04, 0.04, "equivalent", 0.05, True),
                                               (-0.04, 0.06, "equivalent", 0.05, False)])
def test_old_claim_rule(lo, hi, rule, m, want):
    assert claim_holds(lo, hi, rule, m) is want

@pytest.mark.parametrize("lo,hi,rule,want", [
    (0.001, 0.2, "better", "held"), (-0.01, 0.049, "better", "refuted"), (-0.01, 0.051, "better", "inconclusive"),
    (-0.3, -0.1, "better", "refuted"), (-0.049, 0.1, "not_worse", "held"), (-0.2, -0.051, "not_worse", "refuted"),
    (-0.06, 0.01, "not_worse", "inconclusive"), (-0.049, 0.049, "equivalent", "held"), (0.051, 0.2, "equivalent", "refuted"),
    (-0.2, -0.051, "equivalent", "refuted"), (-0.01, 0.06, "equivalent", "inconclusive")])
def test_three_verdicts(lo, hi, rule, want):
    assert verdict(lo, hi, rule, sesoi=0.05) == want

def test_verdict_needs_the_sign_flips_to_agree_and_units_that_differ():
    assert verdict(0.01, 0.2, sesoi=0.05, p_value=0.0625) == "inconclusive"   # 5 units: no sign pattern reaches 0.05
    assert verdict(0.01, 0.2, sesoi=0.05, p_value=0.002) == "held"
    assert verdict(0.0, 0.0, "not_worse", 0.05, degenerate=True) == "inconclusive"
    assert verdict(0.01, 0.2) is None                                      # no sesoi: no verdict

def test_zero_variance_non_inferiority_is_inconclusive():
    "ParetoPO's C3b and MASPOB's C6: identical outputs on every seed held under the old rule; now they decide nothing."
    same = dict(ours_values=[0.25]*10, baseline_values=[0.25]*10)
    c = Claim("C3b", "no worse", "reward", rule="not_worse", sesoi=0.02, sesoi_source="rule", **same)
    assert (c.effect, c.ci_low, c.ci_high, c.verdict, c.holds, c.status) == (0.0, 0.0, 0.0, "inconclusive", False, "inconclusive")
    assert Claim("C3c", "no worse", "reward", rule="not_worse", margin=0.02, **same).status == "held (no sesoi)"   # the old rule
    assert Claim("C6", "better", "em", sesoi=0.02, sesoi_source="rule", **same).status == "inconclusive"

def test_claims_pick_the_interval_by_units_and_cluster():
    c = Claim("C1", "x", "acc", ours_values=[0.82, 0.80, 0.85, 0.79, 0.81], baseline_values=[0.80, 0.79, 0.80, 0.78, 0.79],
              sesoi=0.01, sesoi_source="rule")
    assert (c.ci_method, c.n_seeds, c.wins, c.p_value) == ("t", 5, 5, pytest.approx(2/32))
    assert c.ci_low > 0 and c.verdict == "inconclusive"                   # t clears 0 on 5 seeds; the sign flips cannot
    items = Claim("C2", "x", "acc", ours_values=[0.9, 0.8, 0.7, 0.6, 0.85, 0.75], baseline_values=[0.5]*6, cluster=[0, 0, 1, 1, 2, 2],
                  unit="seed", sesoi=0.05, sesoi_source="rule")
    assert (items.n_seeds, items.n_items, items.ci_method) == (3, 6, "cluster t")
    with pytest.raises(ValueError, match="one label"): Claim("C3", "x", "acc", ours_values=[1.0, 2.0], baseline_values=[0.0, 1.0], cluster=[0])
    with pytest.raises(ValueError, match="not both"): Claim("C4", "x", "acc", ours=0.8, ours_values=[0.8, 0.9], baseline_values=[0.1, 0.2])

def test_shortcut_comparison():
    b = np.linspace(0.6, 0.7, 12)
    beaten = Claim("C1", "x", "acc", ours_values=b + 0.05, baseline_values=b, sesoi=0.02, sesoi_source="rule",
                   shortcut="fixed letter", shortcut_values=b + np.linspace(0.0, 0.01, 12))
    assert beaten.status == "held" and beaten.matched_by_shortcut is False and beaten.shortcut_ci_low > 0
    assert beaten.shortcut_effect == pytest.approx(0.05 - 0.005) and beaten.shortcut_mean == pytest.approx((b + np.linspace(0, 0.01, 12)).mean())
    matched = Claim("C2", "x", "acc", ours_values=b + 0.05, baseline_values=b, sesoi=0.02, sesoi_source="rule",
                    shortcut="fixed letter", shortcut_values=0.7)            # one number for every unit
    assert matched.status == "held, matched by a shortcut" and matched.holds
    refuted = Claim("C3", "x", "acc", ours_values=b, baseline_values=b + 0.1, sesoi=0.02, sesoi_source="rule", shortcut="s", shortcut_values=b)
    assert refuted.status == "refuted"                                      # a shortcut never changes a verdict that is not held
    with pytest.raises(ValueError, match="needs `shortcut_values`"): Claim("C4", "x", "acc", ours=1.0, baseline=0.0, shortcut="s")

def test_regime_points_share_a_stem_and_slopes_are_paired():
    pts = [Claim(f"C2@{g}", "x", "acc", ours_values=[0.1*g + 0.01*k for k in range(10)], baseline=0.0, regime=("gamma", g),
                 sesoi=0.01, sesoi_source="rule") for g in (1, 2, 4)]
    assert {c.stem for c in pts} == {"C2"} and pts[2].regime == {"knob": "gamma", "value": 4}
    assert Claim(**json.loads(json.dumps(asdict_(pts[0])))).regime == pts[0].regime              # survives JSON
    eff = np.array([[0.1*g + 0.01*k for g in (1, 2, 4)] for k in range(10)])
    assert unit_slopes([1, 2, 4], eff) == pytest.approx([0.1]*10)
    with pytest.raises(ValueError, match="knob name, value"): Claim("C2@1", "x", "acc", ours=1.0, baseline=0.0, regime="gamma")
    with pytest.raises(ValueError, match="look like"): Claim("C2@", "x", "acc", ours=1.0, baseline=0.0)

def asdict_(c):
    from dataclasses import asdict
    return asdict(c)

def test_per_seed_values_survive_the_ledger(results_tmp):
    c = Claim("C1", "x", "acc", ours_values=[0.82, 0.80, 0.85], baseline_values=[0.80, 0.79, 0.80], paper=0.9, paper_baseline=0.8,
              sesoi=0.01, sesoi_source="rule", shortcut="s", shortcut_values=[0.8, 0.8, 0.8], cluster=None, budget=("steps", 100))
    record("maspob", [c], "full", "cpu", 1.0, params=dict(seed=0))
    back = load_record("maspob", "full")["claims"][0]
    assert back["ours_values"] == [0.82, 0.80, 0.85] and Claim(**back) == c and back["verdict"] == c.verdict
    assert "0.9 vs 0.8" in report_markdown()

def test_method_and_summary_plots(results_tmp):
    pts = [Claim(f"C1@{g}", "x", "acc", ours_values=[0.1*g + 0.01*k for k in range(10)], baseline=0.0, regime=("gamma", g),
                 sesoi=0.05, sesoi_source="rule", role="thesis") for g in (0, 1, 2)]
    old = Claim("C2", "x", "acc", ours_values=[1.0, 2.0, 3.0], baseline_values=[0.0, 1.0, 1.5])
    record("catq", [*pts, old, Claim("C3", "y", "acc", run=False)], "full", "cpu", 1.0)
    fig = method_plot("catq", "full")
    labels = [[t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes]
    assert labels[0] == ["C1@0", "C1@1", "C1@2"] and labels[1] == ["C2"]     # with a sesoi; without one, apart
    assert any("C1 along gamma" in ax.get_title() for ax in fig.axes)
    ax = summary_plot("full").axes[0]
    assert "3 " in ax.get_title() and "1 comparisons recorded before the three verdicts" in ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["01 maspob", "02 social_choice"]

# --- provenance and run names ------------------------------------------------------------------------------------------

def test_provenance_is_recorded(results_tmp):
    import torch
    p = record("maspob", [_c()], "smoke", "cpu", 1.0, params=dict(seed=0, n_seeds=None))
    doc = json.loads(p.read_text())
    assert doc["params"] == {"seed": 0, "n_seeds": None, "scale": "smoke"} and doc["run"] == "smoke"
    pv = doc["provenance"]
    assert pv["torch"] == torch.__version__.split("+")[0] or pv["torch"] == torch.__version__
    assert pv["cpu_threads"] == torch.get_num_threads() and pv["device"] == "cpu"
    assert pv["git_commit"] is None or len(pv["git_commit"]) == 40
    from importlib.metadata import version
    assert pv["versions"]["numpy"] == np.__version__ and pv["versions"]["scipy"] == version("scipy")
    assert pv["versions"]["torch-geometric"] == version("torch-geometric") and "pymoo" in pv["versions"]
    assert pv["load_avg_start_1m"] >= 0 and pv["load_avg_1m"] >= 0 and pv["cpu_time_total_s"] == pv["cpu_time_s"]
    assert library_versions(["no-such-package-xyz"]) == {"no-such-package-xyz": None}

def _spin(seconds:float)->float:
    import time
    t0 = time.process_time()
    while time.process_time() - t0 < seconds: pass
    return time.process_time() - t0

def test_cpu_time_counts_live_joblib_workers():
    "A joblib (loky) pool keeps its workers alive after the work: their CPU time is still counted."
    from joblib import Parallel, delayed
    before = cpu_times()
    spent = Parallel(n_jobs=2)(delayed(_spin)(0.6) for _ in range(2))
    after = cpu_times()
    assert sum(spent) >= 1.2
    workers = (after["workers_live_s"] + after["children_s"]) - (before["workers_live_s"] + before["children_s"])
    assert workers >= 0.9*sum(spent), (before, after)
    assert after["total_s"] - before["total_s"] >= 0.9*sum(spent)

def test_cpu_time_counts_finished_multiprocessing_workers():
    import multiprocessing as mp
    before = cpu_times()
    with mp.get_context("spawn").Pool(2) as pool: spent = pool.map(_spin, [0.5, 0.5])
    after = cpu_times()
    assert after["children_s"] + after["workers_live_s"] - before["children_s"] - before["workers_live_s"] >= 0.9*sum(spent)

def test_non_default_runs_get_their_own_file(results_tmp):
    defaults = notebook_defaults("maspob")
    assert defaults is not None and defaults["scale"] == "smoke" and "seed" in defaults   # read from nbs/01_maspob.ipynb
    record("maspob", [_c(ours=0.9)], "full", "cpu", 1.0, params=defaults)
    record("maspob", [_c(ours=0.5)], "full", "cpu", 1.0, params=dict(defaults, seed=3))
    record("maspob", [_c(ours=0.6)], "full", "cpu", 1.0, params=dict(defaults, model_path="/models/big"))
    names = runs("maspob")
    assert names[0] == "full" and "full.seed3" in names and any(n.startswith("full.model_path-") for n in names)
    assert load_record("maspob", "full")["claims"][0]["ours"] == 0.9        # the default run's file is untouched
    assert load_record("maspob", "full", tag="seed3")["claims"][0]["ours"] == 0.5
    txt = report_markdown()
    assert "## Runs with other parameters" in txt and "full.seed3" in txt and "seed=3" in txt
    assert "**held (no sesoi)** 0.9 vs 0.7" in txt.split("## Runs")[0] and "0.5 vs 0.7" not in txt.split("## Runs")[0]

def test_run_name_rules():
    d = dict(scale="smoke", seed=0, device="auto", model_path=None, lr=0.5, flag=False)
    assert run_name("full", dict(d, device="cuda"), d) == "full"
    assert run_name("gpu", dict(d, seed=2, flag=True), d) == "gpu.flagTrue+seed2"
    a, b = run_name("full", dict(d, model_path="/a"), d), run_name("full", dict(d, model_path="/b"), d)
    assert a != b and a.startswith("full.model_path-")
    assert run_name("full", dict(d, extra=1), d) == "full.extra1"          # a parameter the defaults lack is a difference

def test_parameters_cell_reads_every_method_notebook():
    from maspob_etal.claims import project_root
    root = project_root(Path(__file__).parent)
    for slug in METHODS:
        p = root/"nbs"/notebook_name(slug)
        if p.exists():
            d = parameters_cell(p)
            assert d.get("scale") == "smoke" and "seed" in d, slug


def test_units_to_decide_an_inconclusive_claim():
    "The least n with t_{n-1} sd / sqrt(n) < h, h the half-width that puts the CI above 0 or below the sesoi (the nearer)."
    import scipy.stats
    def need(sd, h, n0=6):
        n = n0 + 1
        while scipy.stats.t.ppf(0.975, n - 1)*sd/math.sqrt(n) >= h: n += 1
        return n
    d = np.array([0.30, -0.10, 0.25, 0.05, -0.20, 0.15])
    c = Claim("C1", "toy", "x", ours_values=list(1 + d), baseline_values=[1.0]*6, sesoi=0.2, sesoi_source="toy")
    assert c.verdict == "inconclusive"
    sd, e = d.std(ddof=1), d.mean()
    assert c.units_to_decide == need(sd, max(e, 0.2 - e)) == 13
    assert "would decide it" in claims_mod._cell(c)
    held = Claim("C2", "toy", "x", ours_values=list(2 + d), baseline_values=[1.0]*6, sesoi=0.5, sesoi_source="toy")
    assert held.verdict == "held" and held.units_to_decide is None
    ni = Claim("C3", "toy", "x", ours_values=list(1 + d - 0.2), baseline_values=[1.0]*6, sesoi=0.3, sesoi_source="toy",
               rule="not_worse")
    assert ni.verdict == "inconclusive" and ni.units_to_decide == need(sd, max(e - 0.2 + 0.3, -0.3 - e + 0.2)) == 8
