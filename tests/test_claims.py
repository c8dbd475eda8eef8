import json, math
from pathlib import Path

import numpy as np
import pytest

import scipy.stats

from maspob_etal.claims import (METHODS, Claim, claim_holds, forest_plot, ledger, load_record, load_results, notebook_defaults,
                                notebook_name, paired_stats, parameters_cell, record, report, report_markdown, results_dir,
                                run_name, runs)

def _c(**kw):
    base = dict(id="C1", statement="ours beats baseline", metric="accuracy", ours=0.8, baseline=0.7, n_seeds=3)
    return Claim(**{**base, **kw})

def test_nineteen_methods_in_spec_order():
    assert len(METHODS) == 19 and [n for n, _ in METHODS.values()] == list(range(1, 20))
    assert notebook_name("lora_convergence") == "12_lora_convergence.ipynb"

def test_holds_is_computed_in_the_stated_direction():
    assert _c().holds and not _c(higher_is_better=False).holds
    assert not _c(ours=0.7).holds  # a tie is not better
    assert _c(holds=False, baseline=None).status == "not held"
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
    assert [(r["id"], r["status"]) for r in ledger()] == [("C1", "held"), ("C3", "not run")]

def test_record_rejects_bad_runs(results_tmp):
    with pytest.raises(ValueError, match="unknown method"): record("nosuch", [_c()], "smoke", "cpu", 1.0)
    with pytest.raises(ValueError, match="scale"): record("catq", [_c()], "medium", "cpu", 1.0)
    with pytest.raises(ValueError, match="at least one"): record("catq", [], "smoke", "cpu", 1.0)
    with pytest.raises(ValueError, match="finite"): record("catq", [_c()], "smoke", "cpu", math.nan)
    with pytest.raises(ValueError, match="finite"): record("catq", [_c()], "smoke", "cpu", 1.0, metrics={"m": [1, math.nan]})
    assert not (results_tmp/"catq.smoke.json").exists()

def test_report_tables_every_method(results_tmp):
    assert "No method notebook has recorded results yet" in report_markdown()
    record("catq", [_c(higher_is_better=False, ours=30.0, baseline=200.0), _c(id="C2", ours=0.1, baseline=0.2)],
           "smoke", "cpu", 10.0)
    record("catq", [_c(higher_is_better=False, ours=25.0, baseline=180.0, paper=12.0)], "full", "cuda", 100.0)
    out = report(docs_page=results_tmp.parent/"results.qmd")
    txt = out.read_text()
    assert "**held** 30 vs 200 (no CI)" in txt and "**held** 25 vs 180 (no CI)" in txt and "**not held** 0.1 vs 0.2" in txt
    assert txt.count("no results recorded yet") == 18
    assert "Smoke: 1 held, 1 not held, 0 not run" in txt and "Full: 1 held, 0 not held, 1 not run" in txt
    assert "| 12 vs – |" not in txt and "| 12 |" in txt                  # the paper's number sits beside ours
    assert "Gpu:" not in txt                                             # no gpu column until a gpu run exists
    qmd = (results_tmp.parent/"results.qmd").read_text()
    assert qmd.startswith("---\ntitle: Results") and "data:image/png;base64," in qmd   # the forest plot travels inside the page
    assert (results_tmp/"forest.png").read_bytes()[:4] == b"\x89PNG" and "](forest.png)" in txt
    assert "## Runs" in txt and "| 05 | catq | full |" in txt

def test_report_on_a_missing_folder_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"): report(tmp_path/"nope")
    assert not (tmp_path/"nope").exists()

# --- claim statistics ---------------------------------------------------------------------------------------------

def test_paired_stats_against_scipy():
    rng = np.random.default_rng(3)
    b = rng.normal(1.0, 0.3, 15); o = b + rng.normal(0.1, 0.05, 15)   # paired: a shared per-seed offset
    s = paired_stats(o, b)
    d = o - b
    assert s["n"] == 15 and s["wins"] == int((d > 0).sum()) and s["ties"] == 0
    assert s["ours"] == pytest.approx(o.mean()) and s["baseline"] == pytest.approx(b.mean())
    assert s["effect"] == pytest.approx(d.mean()) and s["se"] == pytest.approx(scipy.stats.sem(d))
    ref = scipy.stats.bootstrap((d,), np.mean, method="percentile", n_resamples=20_000, random_state=0).confidence_interval
    assert s["ci_low"] == pytest.approx(ref.low, abs=0.15*s["se"]) and s["ci_high"] == pytest.approx(ref.high, abs=0.15*s["se"])
    # the paired interval is far narrower than one that ignored the pairing
    unpaired = scipy.stats.ttest_ind(o, b).confidence_interval()
    assert s["ci_high"] - s["ci_low"] < 0.5*(unpaired.high - unpaired.low)
    # lower-is-better flips the sign (same resamples, mirrored interval); scipy's t interval agrees roughly for n = 15
    t = scipy.stats.ttest_rel(o, b).confidence_interval()
    lo = paired_stats(o, b, higher_is_better=False)
    assert lo["effect"] == pytest.approx(-d.mean()) and lo["ci_high"] == pytest.approx(-s["ci_low"], abs=1e-12)
    assert abs(s["ci_low"] - t.low) < 0.3*(t.high - t.low) and abs(s["ci_high"] - t.high) < 0.3*(t.high - t.low)

def test_paired_stats_known_values():
    s = paired_stats([3.0, 5.0, 4.0, 6.0], [1.0, 2.0, 3.0, 4.0])          # d = 2, 3, 1, 2
    assert (s["effect"], s["wins"]) == (2.0, 4) and s["se"] == pytest.approx(np.std([2, 3, 1, 2], ddof=1)/2)
    assert 1.0 <= s["ci_low"] <= 2.0 <= s["ci_high"] <= 3.0             # a bootstrap mean lies within the data's range
    s = paired_stats([1.0, 1.0, 1.0], 1.0)
    assert (s["effect"], s["ci_low"], s["ci_high"], s["wins"], s["ties"]) == (0.0, 0.0, 0.0, 0, 3)
    big = paired_stats(np.arange(50_000)*1e-5, 0.0, n_boot=200)           # many items: bounded memory, still exact mean
    assert big["effect"] == pytest.approx(np.arange(50_000).mean()*1e-5)

@pytest.mark.parametrize("lo,hi,rule,m,want", [(0.01, 0.2, "better", 0, True), (-0.01, 0.2, "better", 0, False),
                                               (0.0, 0.2, "better", 0, False), (-0.04, 0.1, "not_worse", 0.05, True),
                                               (-0.06, 0.1, "not_worse", 0.05, False), (-0.04, 0.04, "equivalent", 0.05, True),
                                               (-0.04, 0.06, "equivalent", 0.05, False)])
def test_claim_rule(lo, hi, rule, m, want):
    assert claim_holds(lo, hi, rule, m) is want

def test_claim_from_values_is_decided_by_its_ci():
    ours, base = [0.82, 0.80, 0.85, 0.79, 0.81], [0.80, 0.79, 0.80, 0.78, 0.79]
    c = Claim("C1", "x", "acc", ours_values=ours, baseline_values=base)
    assert c.holds and c.n_seeds == 5 and c.wins == 5 and c.ci_low > 0 and c.ours == pytest.approx(np.mean(ours))
    flat = Claim("C2", "x", "acc", ours_values=[0.9, 0.5, 0.8, 0.6], baseline_values=[0.6, 0.8, 0.5, 0.7])
    assert flat.ours > flat.baseline and not flat.holds                   # better on average is not enough
    eq = Claim("C3", "matches", "loss", ours_values=[1.00, 1.01, 0.99], baseline_values=[1.0, 1.0, 1.0], rule="equivalent", margin=0.05)
    assert eq.holds
    with pytest.raises(ValueError, match="not both"): Claim("C4", "x", "acc", ours=0.8, ours_values=[0.8, 0.9], baseline_values=[0.1, 0.2])

def test_per_seed_values_survive_the_ledger(results_tmp):
    c = Claim("C1", "x", "acc", ours_values=[0.82, 0.80, 0.85], baseline_values=[0.80, 0.79, 0.80], paper=0.9, paper_baseline=0.8)
    record("maspob", [c], "full", "cpu", 1.0, params=dict(seed=0))
    back = load_record("maspob", "full")["claims"][0]
    assert back["ours_values"] == [0.82, 0.80, 0.85] and Claim(**back) == c
    assert "0.9 vs 0.8" in report_markdown()

# --- provenance and run names ------------------------------------------------------------------------------------------

def test_provenance_is_recorded(results_tmp):
    import torch
    p = record("maspob", [_c()], "smoke", "cpu", 1.0, params=dict(seed=0, n_seeds=None))
    doc = json.loads(p.read_text())
    assert doc["params"] == {"seed": 0, "n_seeds": None, "scale": "smoke"} and doc["run"] == "smoke"
    pv = doc["provenance"]
    assert pv["torch"] == torch.__version__ and pv["cpu_threads"] == torch.get_num_threads() and pv["device"] == "cpu"
    assert pv["git_commit"] is None or len(pv["git_commit"]) == 40

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
    assert "**held** 0.9 vs 0.7" in txt.split("## Runs")[0] and "0.5 vs 0.7" not in txt.split("## Runs")[0]

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

def test_forest_plot_draws_one_row_per_claim(results_tmp):
    record("catq", [_c(), Claim("C2", "x", "acc", ours_values=[1.0, 2.0, 3.0], baseline_values=[0.0, 1.0, 1.5]),
                    Claim("C3", "y", "acc", run=False)], "full", "cpu", 1.0)
    fig = forest_plot(scale="full")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["catq C1", "catq C2", "catq C3"]
    assert "2 held, 0 not held, 1 not run" in ax.get_title()
