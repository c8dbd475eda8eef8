import json, math

import numpy as np
import pytest

from maspob_etal.claims import (METHODS, Claim, ledger, load_record, load_results, notebook_name, record, report,
                                report_markdown, results_dir)

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
    assert "**held** (30 vs 200)" in txt and "**held** (25 vs 180)" in txt and "**not held** (0.1 vs 0.2)" in txt
    assert txt.count("no results recorded yet") == 18
    assert "Smoke: 1 held, 1 not held, 0 not run" in txt and "Full: 1 held, 0 not held, 1 not run" in txt
    assert (results_tmp.parent/"results.qmd").read_text().startswith("---\ntitle: Results")
