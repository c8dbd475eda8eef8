"TTT-Discover (method 14): verifiers, known values, invariances, gradients, projection, the LP polish, entropic advantages, PUCT (scores pinned), CEM, modes and fairness, the classical baseline, thread independence, LM policy."
import dataclasses, json, math, os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings, strategies as st
from scipy.optimize import minimize

import pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.ttt_discover import (
    AC1, ERDOS, HPARAMS, KNOWN, KNOWN_SOURCES, MODES, OPS, PRIOR_LOG_STD, PRIOR_MU, LMPolicy, ProgramPolicy, PUCTArchive,
    ac1_term_grads, ac1_terms, adam_smooth, cem_update_, classical_search, erdos_overlap_grads, erdos_overlaps, lp_polish,
    ac1_smooth_grad, ac1_smooth_loss,
    ac1_value, ac2_value, entropic_advantages, erdos_c5, erdos_smooth_grad, erdos_smooth_loss, haugland_51, kl_to_uniform,
    load_construction, make_ac1, make_erdos, make_tiny_llama, mean_baseline_advantages, project_box_sum, run_program,
    run_ttt_discover, smollm2_tokenizer, solve_beta, state_features, verify_ac1, verify_erdos, verify_file)

HAUGLAND = 0.3809268534

# ---------- Erdős: known values and invariances ----------
@pytest.mark.parametrize("n", [10, 51, 200])
def test_erdos_constant_half(n):
    assert abs(erdos_c5(np.full(n, 0.5)) - 0.5) <= 1e-12
    assert abs(verify_erdos(np.full(n, 0.5)) - 0.5) <= 1e-12

def test_haugland_51_step_construction():
    h = haugland_51()
    assert len(h) == 51 and h.sum() == 25.5 and np.allclose(h, h[::-1])
    assert abs(verify_erdos(h) - HAUGLAND) <= 1e-9
    assert "Haugland" in KNOWN_SOURCES["erdos"]["human"] and KNOWN["erdos"]["human"] == 0.380927

@pytest.mark.parametrize("r", [2, 4])
def test_erdos_upsampling_and_reversal_invariant(r):
    h = haugland_51()
    assert abs(erdos_c5(np.repeat(h, r)) - erdos_c5(h)) <= 1e-12
    assert abs(erdos_c5(h[::-1]) - erdos_c5(h)) <= 1e-12
    x = ERDOS.init_state(np.random.default_rng(r))
    assert abs(erdos_c5(x[::-1]) - erdos_c5(x)) <= 1e-12 and abs(ERDOS.value(np.repeat(x, r)) - erdos_c5(x)) <= 1e-12

def test_erdos_verifier_rescales_and_rejects():
    h = haugland_51()
    assert abs(verify_erdos(0.9*h) - HAUGLAND) <= 1e-9                      # wrong sum: rescaled
    with pytest.raises(ValueError, match=r"\[0, 1\]"): verify_erdos(np.r_[h[:-1], 1.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"): verify_erdos(np.r_[h[:-1], -0.1])
    with pytest.raises(ValueError, match="after rescaling"): verify_erdos(np.r_[1.0, np.full(9, 0.1)])
    with pytest.raises(ValueError, match="NaN"): verify_erdos(np.r_[h[:-1], np.nan])
    with pytest.raises(ValueError, match="C5 mismatch"): verify_erdos(h, reported=HAUGLAND + 2e-4)
    assert abs(verify_erdos(h, reported=HAUGLAND + 5e-5) - HAUGLAND) <= 1e-9
    with pytest.raises(ValueError, match="1-D"): verify_erdos(np.ones((3, 3)))
    with pytest.raises(ValueError, match="empty"): verify_erdos([])
    with pytest.raises(ValueError, match="sequence of numbers"): verify_erdos(["a", "b"])

# ---------- AC1 ----------
def test_ac1_values_and_invariances():
    assert ac1_value(np.ones(100)) == 2.0 and ac1_value(np.full(7, 3.3)) == pytest.approx(2.0, abs=1e-12)
    a = np.random.default_rng(0).uniform(0, 2, 40)
    v = ac1_value(a)
    assert ac1_value(5.0*a) == pytest.approx(v, abs=1e-12)
    for r in (2, 3): assert ac1_value(np.repeat(a, r)) == pytest.approx(v, abs=1e-12)   # same step function, finer grid
    assert ac1_value(a[::-1]) == pytest.approx(v, abs=1e-12)
    b = a.copy(); b[[3, 7]] = -1.0; c = a.copy(); c[[3, 7]] = 0.0
    assert ac1_value(b) == pytest.approx(ac1_value(c), abs=1e-12)           # negatives clipped to 0
    with pytest.raises(ValueError, match="NaN or inf"): verify_ac1(np.r_[a, np.nan])
    with pytest.raises(ValueError, match="sum"): verify_ac1(np.full(5, 1e-4))
    with pytest.raises(ValueError, match="C1 mismatch"): verify_ac1(a, reported=v + 1e-3)
    assert ac2_value(np.ones(10)) > 0

# ---------- gradients ----------
def _fd(f, x, eps=1e-6):
    return np.array([(f(x + eps*e) - f(x - eps*e))/(2*eps) for e in np.eye(len(x))])

@pytest.mark.parametrize("seed", [0, 1, 2])
def test_smooth_gradients_match_finite_differences(seed):
    r = np.random.default_rng(seed)
    h = r.uniform(0.05, 0.95, 13)
    assert np.abs(erdos_smooth_grad(h, 0.05) - _fd(lambda z: erdos_smooth_loss(z, 0.05), h)).max() < 1e-7
    a = r.uniform(0.1, 2.0, 13)
    assert np.abs(ac1_smooth_grad(a, 0.05) - _fd(lambda z: ac1_smooth_loss(z, 0.05), a)).max() < 1e-7

def test_fft_path_matches_direct():
    h = ERDOS.project(np.random.default_rng(0).uniform(0, 1, 700))
    assert ERDOS.value(h) == pytest.approx(erdos_c5(h), abs=1e-12)
    g = erdos_smooth_grad(h, 1e-3)
    n, dx = len(h), 2/len(h); c = np.correlate(h, 1 - h, "full")*dx
    w = np.exp((c - c.max())/1e-3); w /= w.sum()
    ref = dx*(np.convolve(w, 1 - h)[n-1:2*n-1] - np.convolve(w[::-1], h)[n-1:2*n-1])
    assert np.abs(g - ref).max() < 1e-10

# ---------- projection ----------
@settings(max_examples=25, deadline=None)
@given(st.integers(2, 12), st.integers(0, 10_000), st.floats(0.1, 3.0))
def test_projection_matches_slsqp(n, seed, spread):
    y = np.random.default_rng(seed).normal(0.5, spread, n)
    h = project_box_sum(y, n/2)
    assert h.min() >= 0 and h.max() <= 1 and abs(h.sum() - n/2) <= 1e-9
    assert np.abs(project_box_sum(h, n/2) - h).max() <= 1e-12              # idempotent
    res = minimize(lambda z: 0.5*np.sum((z - y)**2), np.full(n, 0.5), jac=lambda z: z - y, method="SLSQP",
                   bounds=[(0, 1)]*n, constraints=[{"type": "eq", "fun": lambda z: z.sum() - n/2}],
                   options={"ftol": 1e-14, "maxiter": 500})
    assert np.abs(h - res.x).max() <= 1e-5

def test_projection_errors_and_simplex():
    a = project_box_sum(np.random.default_rng(0).normal(0, 2, 50), 50.0, 0.0, np.inf)
    assert a.min() >= 0 and abs(a.sum() - 50) <= 1e-9
    with pytest.raises(ValueError, match="infeasible"): project_box_sum(np.zeros(4), 5.0)
    with pytest.raises(ValueError, match="NaN or inf"): project_box_sum(np.array([0.5, np.nan]), 1.0)
    with pytest.raises(ValueError, match="lo < hi"): project_box_sum(np.zeros(4), 1.0, 1.0, 1.0)

# ---------- entropic advantages ----------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(2.4, 2.7), min_size=2, max_size=16), st.floats(-5, 5))
@example([2.5, 2.625, 2.625, 2.5625], 0.0)          # half the group tied at the top: the lower weights underflow
def test_entropic_advantage_properties(r, shift):
    r = np.array(r)
    if np.ptp(r) < 1e-9: return
    b = solve_beta(r)
    if b < 1e6: assert abs(kl_to_uniform(r, b) - math.log(2)) <= 1e-6
    A = entropic_advantages(r)
    order = np.argsort(r, kind="stable"); rs = r[order]; As = A[order]
    # order preserving, and by at least the gap of the weights w = exp(b (r - max)): with Z_i = mean of the others' w
    # (<= 1), A_hi - A_lo >= (w_hi - w_lo)/Z_lo >= w_hi - w_lo. Strict wherever the weights differ in float64; where
    # b*gap is large both weights underflow and the advantages tie at -1.
    w = np.exp(b*(rs - rs.max()))
    assert np.all(np.diff(As) >= np.diff(w) - 1e-12)
    assert As[-1] > As[0]
    assert np.allclose(entropic_advantages(r + shift), A, atol=1e-6, rtol=1e-6)  # shift invariant

def test_entropic_advantage_special_cases():
    assert np.array_equal(entropic_advantages(np.full(8, 2.6)), np.zeros(8))
    assert np.array_equal(entropic_advantages(np.array([3.0])), np.zeros(1))
    r = np.array([2.61, 2.6, 2.63, 2.59]); e = np.exp(2.0*(r - r.max()))
    assert np.allclose(entropic_advantages(r, beta=2.0), e/((e.sum() - e)/3) - 1, atol=1e-12)
    assert np.allclose(mean_baseline_advantages(r), (r - r.mean())/(r.std() + 1e-8))
    with pytest.raises(ValueError, match="finite"): entropic_advantages(np.array([1.0, np.nan]))

# ---------- PUCT ----------
def _arc(values, **kw):
    return PUCTArchive([(np.array([float(i), 0.5]), v) for i, v in enumerate(values)], **kw)

def test_puct_prior_and_q():
    arc = _arc([-0.5, -0.4, -0.45, -0.6])
    _, P, _ = arc.scores()
    assert abs(P.sum() - 1) < 1e-12
    by_value = np.argsort([-s.value for s in arc.states])
    assert np.all(np.diff(P[by_value]) < 0)                                  # decreasing in rank
    for s in arc.states: assert arc.Q(s) == s.value                          # unexpanded: own value

def test_puct_score_pinned_by_hand():
    "score = Q + c * scale * P * sqrt(1 + T) / (1 + n), every term different from 1 and 0."
    arc = _arc([-0.5, -0.4, -0.45])                                          # P = (1, 3, 2)/6 by rank; scale = 0.1
    ids = [s.id for s in arc.states]
    arc.T = 8; arc.n = {ids[0]: 3, ids[2]: 1}; arc.m = {ids[0]: -0.42}      # Q: -0.42 (expanded), -0.4, -0.45 (no child value yet)
    score, P, bonus = arc.scores()
    assert np.allclose(P, [1/6, 3/6, 2/6]) and arc.scale() == pytest.approx(0.1)
    assert np.allclose(score, [-0.42 + 0.1*(1/6)*3/4, -0.4 + 0.1*(3/6)*3/1, -0.45 + 0.1*(2/6)*3/2], atol=1e-15)
    arc2 = _arc([-0.5, -0.4, -0.45], c=2.5); arc2.T = 15
    assert np.allclose(arc2.scores()[2], 2.5*0.1*np.array([1/6, 3/6, 2/6])*4)   # sqrt(1 + 15) = 4
    kid = arc.update(arc.states[1], [(np.array([7.0, 1.0]), -0.41), (np.array([7.0, 2.0]), -0.3)])   # non-initial states exist
    assert arc.scale() == pytest.approx(0.11)                                # max - min over non-initial states only
    assert arc.T == 9 and arc.Q(arc.states[1]) == -0.3

def test_puct_update_backs_up_max_and_counts():
    arc = _arc([-0.5, -0.4]); p = arc.states[0]
    arc.update(p, [(np.array([9.0, 1.0]), -0.45), (np.array([9.0, 2.0]), -0.42), (np.array([9.0, 3.0]), -0.47), (None, None)])
    assert arc.m[p.id] == -0.42 and arc.Q(p) == -0.42
    assert arc.n[p.id] == 2 and arc.T == 2                                   # one expansion + one failed rollout
    assert len(arc) == 4                                                     # top-2 children kept
    child = [s for s in arc.states if s.parents][0]
    arc.update(child, [(np.array([8.0, 1.0]), -0.41)])
    assert arc.n[p.id] == 3 and arc.n[child.id] == 1                         # ancestors counted too

def test_puct_bonus_strictly_decreases_with_visits():
    arc = _arc([-0.5, -0.4, -0.45]); s = arc.states[0]; last = np.inf
    for _ in range(5):
        _, _, bonus = arc.scores(); i = arc.states.index(s)
        assert bonus[i] < last; last = bonus[i]
        arc.n[s.id] = arc.n.get(s.id, 0) + 1

def test_puct_select_blocks_lineages():
    arc = _arc([-0.5, -0.49, -0.48])
    root = arc.states[0]
    kids = arc.update(root, [(np.array([5.0, 1.0]), -0.30), (np.array([5.0, 2.0]), -0.31)])
    arc.update(kids[0], [(np.array([6.0, 1.0]), -0.29)])
    picked = arc.select(3)
    for i, a in enumerate(picked):
        for b in picked[i+1:]: assert b.id not in arc.lineage(a)
    assert len(arc.select(10)) == 10                                          # filled up when too few are unrelated

def test_puct_bounded_keeps_initial_and_dedups():
    arc = _arc([-0.9, -0.95], max_size=6, topk_children=2)
    r = np.random.default_rng(0)
    for t in range(20):
        p = arc.select(1)[0]
        arc.update(p, [(r.uniform(0, 1, 2), -float(r.uniform(0.3, 0.8))) for _ in range(3)], step=t)
        assert len(arc) <= 6 and sum(s.initial for s in arc.states) == 2
    x = arc.states[-1].x.copy(); n0 = len(arc)
    arc.update(arc.states[0], [(x, -0.1)])                                    # duplicate construction
    assert len(arc) == n0
    with pytest.raises(ValueError, match="initial state"): PUCTArchive([])

def test_puct_length_limits():
    arc = PUCTArchive([(np.ones(4), -1.0)], max_len=5, min_len=3)
    assert arc.update(arc.states[0], [(np.ones(6), -0.5), (np.ones(2), -0.6)]) == []

# ---------- programs ----------
def test_run_program_never_worse_and_validates():
    x = ERDOS.init_state(np.random.default_rng(0)); v0 = ERDOS.value(x)
    for op in OPS:
        xb, v = run_program(ERDOS, x, dict(op=op, log10_lr=0.5, log10_tau=-3, log10_sigma=-1.5), np.random.default_rng(1), 10)
        assert v <= v0 + 1e-15 and abs(verify_erdos(xb) - v) < 1e-12
    with pytest.raises(ValueError, match="'op' in"): run_program(ERDOS, x, dict(op="magic"), np.random.default_rng(0))
    with pytest.raises(ValueError, match="needs 'log10_sigma'"): run_program(ERDOS, x, dict(op="hill"), np.random.default_rng(0))
    with pytest.raises(ValueError, match="iters"): run_program(ERDOS, x, dict(op="hill", log10_sigma=-2), np.random.default_rng(0), -1)

# ---------- the loop: fairness, modes, AC1, workers ----------
KW = dict(steps=3, groups=2, group_size=4, iters=4)

def test_frozen_baseline_fairness():
    pol = ProgramPolicy(); before = {k: v.clone() for k, v in pol.state_dict().items()}
    fr = run_ttt_discover(ERDOS, "frozen", seed=3, policy=pol, **KW)
    assert all(torch.equal(v, pol.state_dict()[k]) for k, v in before.items())  # bit-identical
    tt = run_ttt_discover(ERDOS, "ttt", seed=3, **KW)
    ex = run_ttt_discover(ERDOS, "expected", seed=3, **KW)
    assert fr["rollouts"] == tt["rollouts"] == ex["rollouts"] == 3*2*4
    assert fr["initial_best"] == tt["initial_best"] == ex["initial_best"]
    assert not torch.equal(tt["policy"].mu, ProgramPolicy().mu)
    assert all(a >= b for a, b in zip(tt["curve"], tt["curve"][1:]))            # best-so-far is monotone
    again = run_ttt_discover(ERDOS, "ttt", seed=3, **KW)
    assert again["curve"] == tt["curve"] and np.array_equal(again["best_x"], tt["best_x"])  # seeded

def test_workers_give_identical_results():
    a = run_ttt_discover(ERDOS, "ttt", seed=1, **KW)
    b = run_ttt_discover(ERDOS, "ttt", seed=1, workers=2, **KW)
    assert a["curve"] == b["curve"] and np.array_equal(a["best_x"], b["best_x"])

def test_ac1_and_mlp_policy_run():
    p = make_ac1(max_len=1100, n_init=(1000, 1050))
    r = run_ttt_discover(p, "ttt", seed=0, steps=2, groups=2, group_size=3, iters=3, policy=ProgramPolicy(state_independent=False), policy_lr=1e-2)
    assert r["best_value"] <= 2.0 and r["rollouts"] == 12 and 1000 <= len(r["best_x"]) <= 1100
    assert r["best_value"] == pytest.approx(verify_ac1(r["best_x"]), abs=1e-12)

def test_run_arguments_are_checked():
    with pytest.raises(ValueError, match="mode must be"): run_ttt_discover(ERDOS, "greedy")
    with pytest.raises(ValueError, match="group_size must be"): run_ttt_discover(ERDOS, group_size=0)
    with pytest.raises(ValueError, match="policy_lr"): run_ttt_discover(ERDOS, policy_lr=0)
    with pytest.raises(FileNotFoundError, match="does not exist"): run_ttt_discover(ERDOS, construction_path="/no/such.json")
    with pytest.raises(ValueError, match="max_len"): make_erdos(max_len=10)

def test_construction_files(tmp_path):
    h = haugland_51()
    (tmp_path/"a.json").write_text(json.dumps({"sequence": h.tolist()}))
    (tmp_path/"b.json").write_text(json.dumps(h.tolist()))
    np.save(tmp_path/"c.npy", h)
    (tmp_path/"d.txt").write_text(",".join(map(repr, h.tolist())))
    for f in "a.json b.json c.npy d.txt".split(): assert abs(verify_file(tmp_path/f) - HAUGLAND) <= 1e-9
    (tmp_path/"nan.json").write_text('{"sequence": [0.5, NaN]}')
    with pytest.raises(ValueError, match="NaN"): verify_file(tmp_path/"nan.json")
    (tmp_path/"keys.json").write_text('{"h": [0.5]}')
    with pytest.raises(ValueError, match="sequence/construction"): load_construction(tmp_path/"keys.json")
    with pytest.raises(ValueError, match="problem must be"): verify_file(tmp_path/"a.json", "ac9")

OFFICIAL = os.environ.get("MASPOB_TTT_ERDOS_JSON", "")

@pytest.mark.skipif(not (OFFICIAL and Path(OFFICIAL).is_file()),
                    reason="set MASPOB_TTT_ERDOS_JSON to the official results/mathematics/ttt_erdos_sequence.json")
def test_official_ttt_erdos_construction():
    x = load_construction(OFFICIAL)
    assert len(x) == 600 and abs(verify_file(OFFICIAL) - 0.3808753) <= 1e-7
    r = run_ttt_discover(ERDOS, steps=0, construction_path=OFFICIAL)
    assert abs(r["construction_value"] - 0.3808753) <= 1e-7 and r["best_value"] <= KNOWN["erdos"]["ttt_discover"]

# ---------- the LM policy on a tiny random Llama ----------
@pytest.fixture(scope="module")
def tok():
    n = torch.get_num_threads(); torch.set_num_threads(1)      # a tiny model gains nothing from threads, which only spin
    yield smollm2_tokenizer()
    torch.set_num_threads(n)

def test_lm_policy_writes_parseable_programs(tok):
    pol = LMPolicy(make_tiny_llama(len(tok)), tok, lora_r=4)
    f = state_features(ERDOS, 0.39, 80, 0, 5)
    acts = pol.sample(f, 6, torch.Generator().manual_seed(0))
    for a in acts:
        b = pol.codec.parse(a["text"])
        assert b["op"] == a["op"] and all(abs(b[h] - a[h]) < 1e-9 for h in HPARAMS)
        assert pol.codec.to_action(a["ids"])["op"] == a["op"]
    lp = pol.log_prob(f, acts)
    assert lp.shape == (6,) and torch.all(lp < 0)
    lp.sum().backward()
    grads = {n: p.grad for n, p in pol.named_parameters() if p.requires_grad}
    assert grads and all("lora_" in n for n in grads) and any(g is not None and g.abs().sum() > 0 for g in grads.values())
    assert acts == pol.sample(f, 6, torch.Generator().manual_seed(0))        # seeded
    pol.use_cache = False                                                    # the KV cache changes nothing
    assert acts == pol.sample(f, 6, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="cannot parse"): pol.codec.parse("op=9 lr=1")
    with pytest.raises(ValueError, match="temperature"): LMPolicy(make_tiny_llama(len(tok)), tok, temperature=0)

def test_lm_policy_ttt_trains_lora_and_frozen_does_not(tok):
    out = {}
    for mode in ("ttt", "frozen"):
        pol = LMPolicy(make_tiny_llama(len(tok), seed=1), tok, lora_r=4, seed=1)
        before = {n: p.detach().clone() for n, p in pol.named_parameters()}
        r = run_ttt_discover(ERDOS, mode, seed=2, steps=2, groups=2, group_size=3, iters=2, policy=pol, policy_lr=1e-2)
        changed = {n for n, p in pol.named_parameters() if not torch.equal(p, before[n])}
        out[mode] = (r, changed)
    assert out["frozen"][1] == set()
    assert out["ttt"][1] and all("lora_" in n for n in out["ttt"][1])         # only the adapters move
    assert out["ttt"][0]["rollouts"] == out["frozen"][0]["rollouts"] == 12
    assert out["ttt"][0]["initial_best"] == out["frozen"][0]["initial_best"]

# ---------- the LP polish, CEM, modes, the classical baseline ----------
@pytest.mark.parametrize("seed", [0, 1])
def test_term_gradients_match_finite_differences(seed):
    r = np.random.default_rng(seed)
    h, a = r.uniform(0.05, 0.95, 9), r.uniform(0.2, 1.5, 8)
    fd = lambda f, x: np.array([(f(x + 1e-6*e) - f(x - 1e-6*e))/2e-6 for e in np.eye(len(x))]).T
    idx = np.arange(2*9 - 1)
    assert np.allclose(erdos_overlap_grads(h, idx), fd(erdos_overlaps, h), atol=1e-7)
    assert np.allclose(ac1_term_grads(a, np.arange(15)), fd(ac1_terms, a), atol=1e-6)
    assert erdos_overlaps(h).max() == pytest.approx(erdos_c5(h), abs=1e-15) and ac1_terms(a).max() == pytest.approx(ac1_value(a), rel=1e-12)

def test_lp_polish_descends_and_stays_feasible():
    h0 = project_box_sum(np.random.default_rng(2).uniform(0, 1, 40), 20.0)
    pr = lambda z: project_box_sum(z, len(z)/2)
    h, v = lp_polish(h0, erdos_c5, erdos_overlaps, erdos_overlap_grads, pr, iters=15, rho=0.05)
    assert v < erdos_c5(h0) - 1e-3 and v == pytest.approx(verify_erdos(h), abs=1e-15)
    assert h.min() >= 0 and h.max() <= 1 and abs(h.sum() - 20) < 1e-9
    h1, v1 = lp_polish(h0, erdos_c5, erdos_overlaps, erdos_overlap_grads, pr, iters=0)
    assert np.array_equal(h1, h0) and v1 == erdos_c5(h0)
    a0 = np.ones(30) + np.random.default_rng(3).uniform(0, 0.5, 30); a0 *= 30/a0.sum()
    a, va = lp_polish(a0, ac1_value, ac1_terms, ac1_term_grads, AC1.project, 0.0, np.inf, iters=10)
    assert va <= ac1_value(a0) and a.min() >= 0
    with pytest.raises(ValueError, match="rho > 0"): lp_polish(h0, erdos_c5, erdos_overlaps, erdos_overlap_grads, pr, rho=0.0)

def test_cem_update_known_values_and_checks():
    pol = ProgramPolicy()
    acts = [dict(op="lp", log10_lr=0.0, log10_tau=-3.0, log10_sigma=-1.0), dict(op="lp", log10_lr=0.0, log10_tau=-3.0, log10_sigma=-2.0),
            dict(op="grad", log10_lr=1.0, log10_tau=-4.0, log10_sigma=0.0), dict(op="hill", log10_lr=1.0, log10_tau=-4.0, log10_sigma=-3.0)]
    cem_update_(pol, acts, [5.0, 4.0, 1.0, 2.0], elite_frac=0.5, smoothing=0.25)
    p = torch.softmax(pol.logits, -1)
    assert torch.allclose(p, torch.tensor([0.15, 0.15, 0.15, 0.15, 0.4]), atol=1e-6)      # 0.75 * 0.2 + 0.25 * (0, 0, 0, 0, 1)
    assert pol.mu[2].item() == pytest.approx(0.75*PRIOR_MU[2] + 0.25*(-1.5), abs=1e-6)
    assert pol.mu[0].item() == pytest.approx(PRIOR_MU[0])                    # no elite uses lr
    assert pol.log_std.exp()[2].item() == pytest.approx(0.75*math.exp(PRIOR_LOG_STD[2]) + 0.25*math.sqrt(0.5), abs=1e-6)
    with pytest.raises(ValueError, match="state-independent"): cem_update_(ProgramPolicy(state_independent=False), acts, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="one reward per action"): cem_update_(pol, acts, [1.0])

def test_every_mode_runs_the_same_rollouts_from_the_same_start():
    runs = {m: run_ttt_discover(make_erdos(max_len=200), m, seed=4, **KW) for m in MODES}
    assert {r["rollouts"] for r in runs.values()} == {3*2*4}
    assert len({r["initial_best"] for r in runs.values()}) == 1
    assert runs["restarts"]["archive_size"] == 2                            # best-of-N never adds to the archive
    assert not torch.equal(runs["cem"]["policy"].logits, ProgramPolicy().logits)
    assert torch.equal(runs["restarts"]["policy"].mu, ProgramPolicy().mu)   # frozen
    for r in runs.values(): assert r["best_value"] == pytest.approx(verify_erdos(r["best_x"]), abs=1e-15)

def test_classical_search_is_deterministic_and_improves():
    P = make_erdos(max_len=160)
    a = classical_search(P, seed=3, restarts=2, adam_steps=80, lp_iters=6, upsample=1)
    b = classical_search(P, seed=3, restarts=2, adam_steps=80, lp_iters=6, upsample=1)
    assert a["best_value"] == b["best_value"] and np.array_equal(a["best_x"], b["best_x"])
    assert a["best_value"] <= min(a["per_start"]) and a["best_value"] == pytest.approx(verify_erdos(a["best_x"]), abs=1e-15)
    x0 = P.init_state(np.random.default_rng(0)); x, v = adam_smooth(P, x0, steps=50)
    assert v <= P.value(x0) and v == pytest.approx(P.value(x), abs=1e-15)
    with pytest.raises(ValueError, match="needs the problem's terms"): classical_search(dataclasses.replace(make_erdos(), terms=None))

def test_runs_do_not_depend_on_the_thread_count():
    assert_thread_independent("""
import torch
torch.set_num_threads(1)   # as the notebook does
from maspob_etal.ttt_discover import run_ttt_discover, make_erdos, classical_search
P = make_erdos(max_len=200)
r = run_ttt_discover(P, "ttt", seed=1, steps=3, groups=2, group_size=4, iters=10)
c = classical_search(P, seed=1, restarts=1, adam_steps=40, lp_iters=4)
result = r["curve"] + [r["best_value"], c["best_value"]] + r["policy"].mu.tolist()
""")

# ---------- a user's own problem: reward transform, failures, errors that surface ----------
from maspob_etal.ttt_discover import (ProgramFailed, group_rewards, value_at, value_at_cpu, cpu_note, erdos_c5_exact,
                                      exactly_feasible, lora_shift, upsample_polish)
from fractions import Fraction

NEG = dataclasses.replace(ERDOS, value=lambda x: ERDOS.value(x) - 1.0)    # an objective that is negative everywhere

def test_nonpositive_objective_is_refused_with_a_message():
    x = ERDOS.init_state(np.random.default_rng(0))
    with pytest.raises(ValueError, match="pass reward_fn"): NEG.reward(x)
    with pytest.raises(ValueError, match="pass reward_fn"): run_ttt_discover(NEG, steps=1, groups=2, group_size=2, iters=1)
    assert dataclasses.replace(NEG, reward_fn=lambda v: -v).reward(x) == pytest.approx(1.0 - ERDOS.value(x), abs=1e-15)
    assert ERDOS.reward(x) == 1.0/ERDOS.value(x)

def test_group_rewards_of_failures():
    assert np.array_equal(group_rewards(ERDOS, [0.5, None, 0.25]), [2.0, 0.0, 4.0])                # official: R = 1/C, failure 0
    neg = dataclasses.replace(NEG, reward_fn=lambda v: -v)
    assert np.array_equal(group_rewards(neg, [-0.5, None, -0.25]), [0.5, 0.25, 0.25])             # failure: the group's lowest
    assert np.array_equal(group_rewards(dataclasses.replace(neg, fail_reward=-3.0), [-0.5, None]), [0.5, -3.0])
    r = run_ttt_discover(neg, steps=2, groups=2, group_size=3, iters=2, seed=1)
    assert r["rollouts"] == 12 and r["failed"] == 0

def test_user_errors_surface_and_program_failures_do_not():
    calls = [0]
    def buggy(x):                                  # works for the initial states, then fails inside a rollout
        calls[0] += 1
        if calls[0] > 10: raise ValueError("bug in the user's objective")
        return ERDOS.value(x)
    with pytest.raises(ValueError, match="bug in the user's objective"):
        run_ttt_discover(dataclasses.replace(ERDOS, value=buggy), steps=1, groups=2, group_size=2, iters=2)
    bad = dataclasses.replace(ERDOS, grad=lambda x, tau: np.full_like(x, np.inf))   # every gradient program breaks down
    x = ERDOS.init_state(np.random.default_rng(0))
    with pytest.raises(ProgramFailed): run_program(bad, x, dict(op="grad", log10_lr=0, log10_tau=-3), np.random.default_rng(0), 2)
    pol = ProgramPolicy(ops=("grad",))
    r = run_ttt_discover(bad, steps=1, groups=2, group_size=3, iters=2, seed=0, policy=pol)
    assert r["failed"] == 6 and r["rollouts"] == 6 and r["best_value"] == r["initial_best"]   # counted as failures, reward 0

# ---------- the policy over generic operators ----------
GENERIC = ("grad", "hill", "upsample_grad", "symmetrize_grad")

def test_policy_without_lp():
    pol, full = ProgramPolicy(ops=GENERIC), ProgramPolicy()
    f = state_features(ERDOS, 0.39, 80, 0, 5)
    acts = pol.sample(f, 300, torch.Generator().manual_seed(0))
    assert {a["op"] for a in acts} == set(GENERIC)                                    # never lp, every other operator
    a4 = acts[:5]
    assert torch.allclose(pol.log_prob(f, a4) - full.log_prob(f, a4), torch.full((5,), math.log(5/4)), atol=1e-6)
    cem_update_(pol, acts[:8], list(range(8)))                                         # CEM keeps lp at probability 0
    logits, _, _ = pol.dist(f); assert torch.softmax(logits, -1)[OPS.index("lp")] == 0
    r = run_ttt_discover(ERDOS, "ttt", steps=2, groups=2, group_size=4, iters=2, seed=0, policy=ProgramPolicy(ops=GENERIC))
    assert all(fr[OPS.index("lp")] == 0 for fr in r["op_frac"]) and not torch.equal(r["policy"].mu, full.mu)
    with pytest.raises(ValueError, match="ops must be"): ProgramPolicy(ops=("grad", "grad"))

# ---------- budgets, equal CPU, the CPU note ----------
def test_value_at_and_equal_cpu():
    r = dict(initial_best=0.39, curve=[0.385, 0.384, 0.384, 0.382], cpu_curve=[1.0, 2.5, 3.0, 4.5])
    assert [value_at(r, t) for t in range(5)] == [0.39, 0.385, 0.384, 0.384, 0.382]
    assert value_at_cpu(r, 2.5) == (0.384, 2, True) and value_at_cpu(r, 2.49) == (0.385, 1, True)
    assert value_at_cpu(r, 0.9) == (0.39, 0, True) and value_at_cpu(r, 5.0) == (0.382, 4, False)
    with pytest.raises(ValueError, match="t must lie"): value_at(r, 5)

def test_a_shorter_run_is_the_start_of_a_longer_one():
    "The budgets of C1 are read off one run: its first t steps equal a run of t steps."
    a = run_ttt_discover(ERDOS, "ttt", seed=2, steps=2, groups=2, group_size=3, iters=3)
    b = run_ttt_discover(ERDOS, "ttt", seed=2, steps=4, groups=2, group_size=3, iters=3)
    assert b["curve"][:2] == a["curve"] and len(b["cpu_curve"]) == 4 and np.all(np.diff(b["cpu_curve"]) >= 0)

def test_cpu_note_says_on_how_many_seeds():
    assert cpu_note([207.0, 56.0], [28.0, 20.0], "TTT-Discover", "classical") == \
        "CPU s per run: TTT-Discover 131.5, classical 24.0; classical used less CPU on every seed (2 of 2)"
    assert cpu_note([1.0, 5.0, 8.0], [2.0, 4.0, 9.0], "a", "b").endswith("b used less CPU on 1 of 3 seeds")
    assert cpu_note([1.0, 2.0], [3.0, 4.0], "a", "b").endswith("b used less CPU on no seed")
    with pytest.raises(ValueError, match="one CPU time per seed"): cpu_note([1.0], [1.0, 2.0], "a", "b")

# ---------- the exact evaluator ----------
def test_exact_evaluator_agrees_and_is_exact():
    h = exactly_feasible(haugland_51())
    assert np.abs(h - haugland_51()).max() <= 2e-16 and sum(map(Fraction, h)) >= Fraction(51, 2)
    e = erdos_c5_exact(h)
    assert isinstance(e, Fraction) and abs(float(e) - HAUGLAND) <= 1e-9 and abs(float(e) - erdos_c5(h)) <= 1e-15
    assert erdos_c5_exact(np.repeat(h, 3)) == e                                          # exact invariance
    assert erdos_c5_exact([0.5, 0.5]) == Fraction(1, 2)
    # asymmetric, every shift different: [1, 0, 0.5] has overlaps m=-2: 0, m=-1: 1*(1-0)..., computed by hand
    h3 = [1.0, 0.0, 0.5]                                                                 # sum 1.5 = n/2, dx = 2/3
    S = {m: sum(h3[i + m]*(1 - h3[i]) for i in range(3) if 0 <= i + m < 3) for m in range(-2, 3)}
    assert erdos_c5_exact(h3) == Fraction(2, 3)*Fraction(max(S.values())).limit_denominator(8)
    x = ERDOS.project(np.random.default_rng(3).uniform(0, 1, 301))
    assert abs(float(erdos_c5_exact(exactly_feasible(x))) - erdos_c5(x)) <= 1e-13
    with pytest.raises(ValueError, match="exactly_feasible"): erdos_c5_exact(haugland_51())
    with pytest.raises(ValueError, match="negative"): erdos_c5_exact([-0.1, 0.6, 1.0])

# ---------- the classical optimiser's screen and the upsampling polish ----------
def test_screened_restarts_and_upsample_polish():
    P = make_erdos(max_len=160)
    s = classical_search(P, seed=2, restarts=3, adam_steps=40, lp_iters=6, screen=2, finish=1, keep=3)
    full = classical_search(P, seed=2, restarts=3, adam_steps=40, lp_iters=2, keep=3)   # the same starts, screened only
    assert sorted(s["per_start"]) == sorted(full["per_start"])                            # the screen is the short polish
    assert s["best_value"] <= min(s["per_start"]) and len(s["top"]) == 3
    x = s["top"][0]
    y, v = upsample_polish(P, x, np.random.default_rng(0), tries=0)
    assert np.array_equal(y, x) and v == P.value(x)
    y, v = upsample_polish(P, x, np.random.default_rng(0), tries=1, lp_iters=5)
    assert v <= P.value(x) and len(y) in (len(x), 2*len(x)) and v == pytest.approx(verify_erdos(y), abs=1e-15)

# ---------- the LM policy: shared prompt caches, the shift probe ----------
def _moved(pol, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in pol.named_parameters():
            if "lora_B" in n: p.copy_(0.05*torch.randn(p.shape, generator=g))
    return pol

def test_lm_shared_cache_equals_one_row_per_action(tok):
    pol = _moved(LMPolicy(make_tiny_llama(len(tok), seed=2), tok, lora_r=4, seed=2))
    feats = [state_features(ERDOS, 0.39, 80, 0, 5), state_features(ERDOS, 0.3851, 1000, 3, 5)]   # prompts of different lengths
    acts = pol.sample_groups(feats, 3, torch.Generator().manual_seed(1))
    out = {}
    for cache in (True, False):
        pol.use_cache = cache; pol.zero_grad()
        assert pol.sample_groups(feats, 3, torch.Generator().manual_seed(1)) == acts
        lp = torch.cat(pol.log_prob_groups(feats, acts)); lp.sum().backward()
        out[cache] = (lp.detach(), {n: p.grad.clone() for n, p in pol.named_parameters() if p.grad is not None})
    assert torch.allclose(out[True][0], out[False][0], atol=1e-4)
    pol.use_cache = True; prompts = [tok.encode(pol.prompt(f), add_special_tokens=False) for f in feats]
    with torch.no_grad():
        z, _, mask, ids = pol._prefix(prompts, 3)                                    # rows 0-2: prompt 0, rows 3-5: prompt 1
        own = [pol._forward(torch.tensor([p]), torch.ones((1, len(p)), dtype=torch.long), 1)[0][0, -1] for p in prompts]
    assert (own[0] - own[1]).abs().max() > 0
    for r in range(6): assert torch.equal(ids[r, -len(prompts[r // 3]):], torch.tensor(prompts[r // 3]))
    assert max((z[r] - own[r // 3]).abs().max().item() for r in range(6)) < 1e-5
    assert out[True][1].keys() == out[False][1].keys()
    assert all(torch.allclose(out[True][1][n], out[False][1][n], atol=1e-4) for n in out[True][1])

def test_lora_shift_and_reset(tok):
    pol = LMPolicy(make_tiny_llama(len(tok), seed=3), tok, lora_r=4, seed=5)
    init = {n: p.clone() for n, p in pol.named_parameters() if "lora_" in n}
    f = [state_features(ERDOS, 0.39, 80, 0, 5)]
    sh = lora_shift(pol, f, k=4)
    assert sh["kl"] == 0 and sh["tv_op"] == 0 and all(x == 0 for x in sh["log_ratio"])   # B = 0: the base model
    _moved(pol)
    sh = lora_shift(pol, f, k=4)
    assert sh["tv_op"] > 0 and max(abs(x) for x in sh["log_ratio"]) > 0
    assert abs(sh["kl"] + np.mean(sh["log_ratio"])) < 1e-6                                   # KL estimate = -mean log-ratio
    pol.reset_lora(5)
    assert all(torch.equal(p, init[n]) for n, p in pol.named_parameters() if "lora_" in n)  # as freshly built with seed 5
    assert torch.allclose(pol.op_probs(f).sum(-1), torch.ones(1), atol=1e-6)

# ---------- the prose states the budget the code runs ----------
def test_differences_state_the_full_budget_of_the_code():
    import ast
    nb = json.loads((Path(__file__).parents[1]/"nbs"/"14_ttt_discover.ipynb").read_text())
    src = lambda c: "".join(c["source"])
    cfg_src = next(src(c) for c in nb["cells"] if c["cell_type"] == "code" and src(c).lstrip().startswith("cfg = pick("))
    call = ast.parse(cfg_src).body[0].value
    def lit(n):                                                        # literals, and dict(...) calls of literals
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "dict": return {k.arg: lit(k.value) for k in n.keywords}
        if isinstance(n, ast.Tuple): return tuple(lit(e) for e in n.elts)
        return ast.literal_eval(n)
    full = {}
    for kw in call.keywords:
        try: full[kw.arg] = lit(kw.value)[1]
        except (ValueError, KeyError): pass                            # e.g. workers (from the machine), dry_run, dry
    diff = next(src(c) for c in nb["cells"] if c["cell_type"] == "markdown" and "## Differences from the paper" in src(c))
    f = full
    for s in (f"{f['steps']} steps × {f['groups']} groups × {f['group_size']} = {f['steps']*f['groups']*f['group_size']} rollouts "
              f"of {f['iters']} iterations", f"(read at {', '.join(map(str, f['budgets'][:-1]))} and {f['budgets'][-1]} steps)",
              f"lengths up to {f['max_len']}, {f['n_seeds']} seeds", f"the frozen sampler runs {f['frozen_steps']} steps",
              f"{f['lm_steps']} steps × {f['lm_groups']} groups × {f['lm_group_size']} = {f['lm_steps']*f['lm_groups']*f['lm_group_size']} rollouts",
              f"runs {f['classical']['restarts']} restarts per seed", f"{f['disc_chunks']} chunks of {f['disc']['restarts']} classical",
              f"screened with {f['disc']['screen']} linear programs, the {f['disc']['finish']} best", f"refines the {f['disc_refine']} best"):
        assert s in " ".join(diff.split()), s
