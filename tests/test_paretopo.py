"Property and known-value tests of maspob_etal.paretopo (method card section 6 and issue 16)."
import itertools, pathlib, sys

import numpy as np
import pytest
import torch
from pymoo.indicators.hv import HV
from pymoo.util.nds.non_dominated_sorting import NonDominatedSorting

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.paretopo import (
    HVWeightScheduler, METHODS, NONCONVEX_TABLES, SHORTCUT, TUNING_GRIDS, ToolCallEnv, crowding_distance, front_distance,
    group_advantages, hypervolume, hypervolume_2d, linear_reach, logprob_grad, make_word_problems, method_scores, nondominated_ranks,
    nonconvex_env, nonconvex_instance, normalize_objectives, on_envelope, pareto_rank_scores, parse_answer, safe_eval, static_optimum,
    tool_objectives, train_tabular, true_front, tune)


# ---- hypervolume -------------------------------------------------------------------------------------------------
def test_hv_known_values():
    assert hypervolume_2d([[0.3, 0.7]], [0, 0]) == pytest.approx(0.21)
    assert hypervolume_2d([[1, 0.5], [0.5, 1]], [0, 0]) == pytest.approx(0.75)
    assert hypervolume_2d([[1, 0.5], [0.5, 1], [0.5, 0.5], [0.1, 0.2]], [0, 0]) == pytest.approx(0.75)   # dominated: no change
    assert hypervolume_2d([[0.5, 0.5]], [0.6, 0]) == 0.0                                                 # beyond the reference
    # three staircase points with a non-zero reference: every strip matters
    assert hypervolume_2d([[0.9, 0.2], [0.6, 0.5], [0.3, 0.8]], [0.1, 0.1]) == pytest.approx(0.8*0.1 + 0.5*0.3 + 0.2*0.3)


def test_hv_matches_pymoo_on_100_random_sets():
    rng = np.random.default_rng(0)
    for _ in range(100):
        P, r = rng.random((rng.integers(1, 40), 2)), rng.random(2)*0.3
        keep = (P > r).all(1)
        ref = HV(ref_point=-r)(-P[keep]) if keep.any() else 0.0
        assert abs(hypervolume_2d(P, r) - ref) < 1e-12
        if keep.any(): assert abs(hypervolume(P, r) - ref) < 1e-12


def test_hv_3d_inclusion_exclusion():
    P = np.array([[1, 0.5, 0.2], [0.5, 1, 0.4]])
    assert hypervolume(P, np.zeros(3)) == pytest.approx(0.1 + 0.2 - 0.05)


# ---- non-dominated sorting ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_nds_matches_pymoo_with_ties(seed):
    F = np.random.default_rng(seed).integers(0, 4, size=(50, 3)).astype(float)
    np.testing.assert_array_equal(nondominated_ranks(F), NonDominatedSorting().do(-F, return_rank=True)[1])


def test_nds_front_properties_and_invariance():
    F = np.random.default_rng(1).integers(0, 5, size=(60, 2)).astype(float)
    r = nondominated_ranks(F)
    dom = lambda a, b: (a >= b).all() and (a > b).any()
    f0 = F[r == 0]
    assert not any(dom(a, b) for a in f0 for b in f0)                                          # front 0 mutually non-dominated
    for k in range(1, r.max() + 1):
        assert all(any(dom(a, b) for a in F[r == k - 1]) for b in F[r == k])                  # front k dominated by front k-1
    G = np.c_[np.exp(F[:, 0]), 100*F[:, 1]]
    np.testing.assert_array_equal(nondominated_ranks(G), r)


def test_crowding_distance_hand_case():
    F = np.array([[0.0, 2.0], [0.2, 1.8], [0.5, 1.0], [1.5, 0.0], [0.1, 0.1]])   # spans 1.5 and 2: the normalisation matters
    cd = crowding_distance(F, nondominated_ranks(F))
    assert np.isinf(cd[[0, 3, 4]]).all()
    np.testing.assert_allclose(cd[1:3], [(0.5 - 0.0)/1.5 + (2.0 - 1.0)/2, (1.5 - 0.2)/1.5 + (1.8 - 0.0)/2])


# ---- scale invariance ----------------------------------------------------------------------------------------------
def test_rank_scores_scale_invariant_and_gate():
    rng = np.random.default_rng(2)
    Rn = np.stack([rng.integers(0, 2, (6, 8)), rng.integers(0, 7, (6, 8))/6], -1).astype(float)
    corr = Rn[..., 0] == 1
    s = pareto_rank_scores(Rn, corr)
    np.testing.assert_array_equal(pareto_rank_scores(Rn*[3.0, 0.25], corr), s)
    for b in range(6):
        if corr[b].any() and (~corr[b]).any(): assert s[b][corr[b]].min() > s[b][~corr[b]].max()
    with pytest.raises(ValueError, match="eta"): pareto_rank_scores(Rn, corr, eta=1.0)


def test_scheduler_scale_invariant_and_on_simplex():
    rng = np.random.default_rng(3)
    a, b = HVWeightScheduler(2), HVWeightScheduler(2)
    for _ in range(60):
        X = np.c_[rng.integers(0, 2, 16), -rng.integers(0, 5, 16)].astype(float)
        wa = a.update(normalize_objectives(X, [0, -4], [1, 0]))
        wb = b.update(normalize_objectives(X*[1, 10], [0, -40], [1, 0]))
        np.testing.assert_allclose(wa, wb, atol=1e-12)
        assert (wa >= 0).all() and abs(wa.sum() - 1) < 1e-12


def test_scheduler_first_step_and_fallback_values():
    s = HVWeightScheduler(2)
    np.testing.assert_allclose(s.update([[0.4, 0.1], [0.6, 0.3]]), 0.8*np.array([1, 0]) + 0.2*np.array([2, 5])/7, atol=1e-12)
    s = HVWeightScheduler(2, rho=1.0, ema=0.5)
    s.update([[0.9, 0.9]])
    np.testing.assert_allclose(s.update([[0.5, 0.0]]), np.array([0.2, 0.45])/0.65, atol=1e-6)
    assert s.fallbacks == 1
    s = HVWeightScheduler(2)                                             # EMA 0.9: x_bar = 0.9 x_1 + 0.1 x_2
    s.update([[0.2, 0.4]]); s.update([[0.6, 0.0]])
    np.testing.assert_allclose(s.x_bar, [0.24, 0.36], atol=1e-12)
    # accuracy at its bound: the finite-difference step is clipped at 1, so it gets no weight (unclipped: g = (0.3, 1))
    s = HVWeightScheduler(2, w0=[0.5, 0.5], rho=1.0)
    np.testing.assert_allclose(s.update([[1.0, 0.3]]), [0.0, 1.0], atol=1e-12)


def test_whole_tabular_run_scale_invariant():
    env = ToolCallEnv()
    r1, r10 = train_tabular("paretopo", env, steps=150, seed=3), train_tabular("paretopo", env, steps=150, seed=3, eff_scale=10.0)
    np.testing.assert_allclose(r1["theta"], r10["theta"], atol=1e-9)
    moved = [abs(s1["acc"] - s10["acc"]) for s1, s10 in
             ((train_tabular("static", env, steps=300, seed=sd, w=0.1, eff_scale=c) for c in (1.0, 10.0)) for sd in (3, 4, 5))]
    assert np.median(moved) > 0.1                     # the static baseline moves (seeds 3-5 measured 0.22, 0.14, 0.20)


# ---- GRPO --------------------------------------------------------------------------------------------------------
def test_group_advantages():
    s = np.array([[1.0, 2.0, 4.0, 5.0], [3.0, 3.0, 3.0, 3.0], [0.0, 1.0, 0.0, 1.0]])
    A = group_advantages(s)
    np.testing.assert_allclose(A[0], np.array([-2, -1, 1, 2])/(np.sqrt(2.5) + 1e-6), atol=1e-12)
    assert (A[1] == 0).all() and np.isfinite(A).all()
    np.testing.assert_allclose(A[2], [-1, 1, -1, 1], atol=1e-5)
    with pytest.raises(ValueError, match="at least 2"): group_advantages(np.ones((4, 1)))


def test_policy_gradient_is_the_gradient_of_the_exact_objective():
    env, w = ToolCallEnv((0.2, 0.5), (0.6, 0.5), 4), 0.12
    th = np.random.default_rng(0).normal(0, 1, (2, 4))
    def J(t): return float((env.call_distribution(t)*(env.P - w*np.arange(5))).sum(1).mean())
    num = np.zeros_like(th)
    for i, j in itertools.product(range(2), range(4)):
        e = np.zeros_like(th); e[i, j] = 1e-6; num[i, j] = (J(th + e) - J(th - e))/2e-6
    rng = np.random.default_rng(1); d = rng.integers(0, 2, 400_000)
    n, c = env.rollout(th, d, rng)
    np.testing.assert_allclose(logprob_grad(th, d, n, c - w*n), num, atol=1.5e-3)


# ---- environment -----------------------------------------------------------------------------------------------
def test_env_monte_carlo_and_monotone():
    env = ToolCallEnv()
    assert (np.diff(env.P, axis=1) > 0).all()
    th = np.random.default_rng(4).normal(0, 1.5, (4, 6))
    d = np.random.default_rng(5).integers(0, 4, 200_000)
    n, c = env.rollout(th, d, np.random.default_rng(6))
    acc, calls = env.exact_eval(th)
    assert abs(c.mean() - acc) < 3*c.std()/np.sqrt(len(d)) and abs(n.mean() - calls) < 3*n.std()/np.sqrt(len(d))


def test_true_front_equals_enumeration():
    env = ToolCallEnv()
    pts = np.array([(np.mean([env.P[d, n[d]] for d in range(4)]), np.mean(n)) for n in itertools.product(range(7), repeat=4)])
    assert len(pts) == 2401
    best = {}
    for a, c in pts: best[c] = max(best.get(c, -1), a)
    F = true_front(env)
    for a, c in F: assert a == pytest.approx(best[min(best, key=lambda k: abs(k - c))])
    assert (np.diff(F[:, 0]) > 0).all()                                                 # more calls never lowers the best accuracy
    assert float((F[:, 0]*(1 - F[:, 1]/6)).max()) == pytest.approx(0.437, abs=5e-4)
    assert front_distance(*F[3], F, 6) == pytest.approx(0, abs=1e-12)


def test_static_optimum_analytic_and_training():
    env = ToolCallEnv()
    for w in (0.03, 0.1, 0.3):
        ns = list(itertools.product(range(7), repeat=4))
        obj = [np.mean([env.P[d, n[d]] for d in range(4)]) - w*np.mean(n) for n in ns]
        a, c = static_optimum(env, w)
        assert a - w*c == pytest.approx(max(obj))
    a, c = static_optimum(env, 0.1)
    gaps = [(a - 0.1*c) - (r["acc"] - 0.1*r["calls"]) for r in (train_tabular("static", env, steps=1000, seed=sd, w=0.1)
                                                             for sd in (1, 2, 3))]
    assert min(gaps) >= 0                               # nothing beats the analytic optimum
    assert np.median(gaps) < 0.04                       # seeds 1-3 measured 0.017, 0.018, 0.005


# ---- scores and bad input ---------------------------------------------------------------------------------------
def test_method_scores_values():
    cor, cl = np.array([[1, 1, 0, 0]], bool), np.array([[2, 0, 0, 3]])
    R, lo, hi = tool_objectives(cor, cl, 6, eff_scale=2.0)
    np.testing.assert_allclose(method_scores("static", R, lo, hi, w_static=0.1), [[0.6, 1.0, 0.0, -0.6]])
    np.testing.assert_allclose(method_scores("otc", *tool_objectives(cor, cl, 6), w_static=0.1), [[0.8, 1.0, 0.0, 0.0]])
    np.testing.assert_allclose(method_scores("acc_only", R, lo, hi), [[1, 1, 0, 0]])


def test_method_scores_take_m_objectives():
    "Three objectives (accuracy, -calls, -tokens): every rule reads every column, with its own weight and bounds."
    R = np.array([[[1, -2, -10], [1, 0, -80], [0, 0, 0], [0, -3, -50], [1, -1, -60]]], float)   # (1, 5, 3)
    lo, hi = np.array([0, -6, -100.0]), np.array([1, 0, 0.0])
    np.testing.assert_allclose(method_scores("static", R, lo, hi, w_static=[0.1, 0.01]), [[0.7, 0.2, 0.0, -0.8, 0.3]])
    np.testing.assert_allclose(method_scores("otc", R, lo, hi, w_static=[0.1, 0.01]), [[0.7, 0.2, 0.0, 0.0, 0.3]])
    np.testing.assert_allclose(method_scores("static", R, lo, hi, w_static=0.01), [[1 - 0.12, 1 - 0.8, 0, -0.53, 1 - 0.61]])
    w = np.array([0.5, 0.3, 0.2])
    Rn = (R - lo)/(hi - lo)
    sch = HVWeightScheduler(3, w0=w)
    np.testing.assert_allclose(method_scores("stage1_only", R, lo, hi, sched=sch), Rn @ w)
    # Pareto ranks in 3-D: (1, -2, -10), (1, 0, -80) and (1, -1, -60) are mutually non-dominated; gated wrong answers last
    np.testing.assert_array_equal(method_scores("stage2_only", R, lo, hi), [[0, 0, -1, -1, 0]])
    np.testing.assert_array_equal(method_scores("stage2_only", R[..., :2], lo[:2], hi[:2]), [[-2, 0, -3, -3, -1]])
    with pytest.raises(ValueError, match="3 objectives|has 2 objectives"):
        method_scores("stage1_only", R, lo, hi, sched=HVWeightScheduler(2))
    with pytest.raises(ValueError, match="M >= 2"): method_scores("static", R[..., :1], lo[:1], hi[:1])


class _DuckEnv:
    "Not a ToolCallEnv: its own success table and its own rollout, drawing the random numbers ToolCallEnv draws."
    def __init__(self, P): self.P = np.atleast_2d(P); self.D, self.k_max = self.P.shape[0], self.P.shape[1] - 1
    def _pcall(self, theta): return 1/(1 + np.exp(-theta))
    def rollout(self, theta, d, rng):
        u = rng.random((len(d), self.k_max))
        n = np.cumprod(u < self._pcall(theta)[d], axis=1).sum(1)
        return n, rng.random(len(d)) < self.P[d, n]
    def exact_eval(self, theta):
        c = self._pcall(theta)
        reach = np.concatenate([np.ones((self.D, 1)), np.cumprod(c, 1)], 1)
        pn = reach*np.concatenate([1 - c, np.ones((self.D, 1))], 1)
        return float((pn*self.P).sum(1).mean()), float((pn*np.arange(self.k_max + 1)).sum(1).mean())


class _ThreeObjEnv(_DuckEnv):
    "A third objective: minus the calls beyond the first, bounded by k_max - 1."
    def objectives(self, calls, correct, eff_scale):
        R = np.c_[correct, -eff_scale*calls, -np.maximum(calls - 1, 0)].astype(float)
        return R, np.array([0, -eff_scale*self.k_max, 1.0 - self.k_max]), np.array([1.0, 0, 0])


def test_train_tabular_accepts_any_env():
    P = [[0.3, 0.45, 0.6, 0.76, 0.78], [0.1, 0.2, 0.5, 0.55, 0.6]]
    for m in ("paretopo", "static", "stage2_only"):
        a, b = train_tabular(m, _DuckEnv(P), steps=60, seed=4), train_tabular(m, ToolCallEnv.from_table(P), steps=60, seed=4)
        np.testing.assert_array_equal(a["theta"], b["theta"])                                  # same draws, same run
    r = train_tabular("paretopo", _ThreeObjEnv(P), steps=40, seed=1)
    assert r["weights"].shape == (40, 3) and np.allclose(np.nansum(r["weights"][:20], 1), 1)    # Stage 1 over 3 objectives
    assert not np.isnan(r["weights"][:20, 2]).any() and (r["weights"][1:20, 2] > 0).any()        # the third gets weight
    with pytest.raises(TypeError, match="exact_eval"): train_tabular("paretopo", type("E", (), {"D": 1, "k_max": 2})(), steps=2)


# ---- the regime: non-convex fronts -----------------------------------------------------------------------------
def test_nonconvex_levels_put_pareto_points_out_of_any_linear_weights_reach():
    gaps = []
    for level, table in enumerate(NONCONVEX_TABLES):
        env = nonconvex_env(level)
        pts = np.c_[env.P[0], np.arange(env.k_max + 1)]                  # the deterministic policies: (acc, calls) after k calls
        front = true_front(env)
        np.testing.assert_allclose(front, pts)                            # all 7 are Pareto-optimal (p rises with k)
        # brute force: the optimum of acc - w calls over every weight w >= 0 (w = inf: fewest calls)
        reached = {int(np.argmax(pts[:, 0] - w*pts[:, 1])) for w in np.r_[np.linspace(0, 1, 20001), 1e9]}
        missed = set(range(len(pts))) - reached
        assert missed == set(np.flatnonzero(~on_envelope(front)))         # exactly the points below the envelope
        hv = pts[:, 0]*(1 - pts[:, 1]/env.k_max)
        gaps.append(hv.max() - hv[sorted(reached)].max())
        if level == 0: assert not missed                                  # concave: every point is some weight's optimum
        else: assert 2 in missed and hv.argmax() == 2                     # the HV-best point is out of every weight's reach
        assert linear_reach(env)["gap"] == pytest.approx(gaps[-1], abs=1e-12)
    assert np.all(np.diff(gaps) > 0.01)                                   # the knob grows: 0, 0.02, 0.05, 0.083
    np.testing.assert_allclose(gaps, [0, 0.02, 0.05, 0.4 - 0.95/3], atol=1e-9)


def test_tuning_budget_is_equal_and_covers_every_scale():
    assert len(TUNING_GRIDS["static"]) == len(TUNING_GRIDS["paretopo"]) >= 3
    for c in (0.1, 1.0, 10.0):                                            # the card's weight 0.1 is reachable at every scale
        assert any(abs(kw["w"]*c - 0.1) < 1e-12 for kw in TUNING_GRIDS["static"])
    env, seeds = nonconvex_env(2), [5, 6]
    grid = {"static": (dict(w=0.03), dict(w=0.2), dict(w=1.0))}
    best, means = tune("static", env, seeds, 40, grid=grid)
    direct = [np.mean([train_tabular("static", env, steps=40, seed=s, **kw)["hv_greedy"] for s in seeds]) for kw in grid["static"]]
    np.testing.assert_allclose(means, direct)
    assert best == grid["static"][int(np.argmax(direct))]
    # at x10 the tuned static weight is not the untuned 0.1: its effective weight w c stays where scale 1 puts it
    best10, _ = tune("static", ToolCallEnv(), [0], 200, eff_scale=10.0, grid={"static": (dict(w=0.01), dict(w=0.1))})
    best1, _ = tune("static", ToolCallEnv(), [0], 200, eff_scale=1.0, grid={"static": (dict(w=0.1), dict(w=1.0))})
    assert best10["w"]*10 == pytest.approx(best1["w"])


def test_thesis_baseline_otc_is_tuned_like_paretopo_and_the_shortcut_is_cruder():
    assert len(TUNING_GRIDS["otc"]) == len(TUNING_GRIDS["paretopo"]) == len(TUNING_GRIDS["static"]) == 5
    ws = [kw["w"] for kw in TUNING_GRIDS["otc"]]
    assert any(abs(w - 1/6) < 1e-12 for w in ws)                        # the HV's own weight 1/K_max is in the grid
    assert min(ws) < 1/6 < max(ws) and max(ws)/min(ws) >= 100            # two decades around it
    m, kw = SHORTCUT                                                      # one fixed linear weight, never tuned
    assert m == "static" and kw == {"w": 0.1} and m != "otc"


def test_ablations_are_tuned_over_the_full_methods_grid():
    assert TUNING_GRIDS["stage1_only"] == TUNING_GRIDS["stage2_only"] == TUNING_GRIDS["paretopo"]
    env = nonconvex_instance(3, 1000)
    for m in ("stage1_only", "stage2_only"):                              # the grid's knob moves each ablation
        th = [train_tabular(m, env, steps=60, seed=1000, **kw)["theta"] for kw in (TUNING_GRIDS[m][0], TUNING_GRIDS[m][-1])]
        assert not np.array_equal(*th), m


def test_stage1_only_turns_stage2_off(monkeypatch):
    import maspob_etal.paretopo as pp
    def no_ranks(*a, **k): raise AssertionError("Stage 2 ran")
    monkeypatch.setattr(pp, "pareto_rank_scores", no_ranks)
    env, T = nonconvex_instance(2, 3), 40
    r = pp.train_tabular("stage1_only", env, steps=T, seed=3, switch_frac=0.5)    # never ranks
    W = r["weights"]
    assert not np.isnan(W).any()                                               # a linear score at every step
    assert not np.allclose(W[0], W[T//2 - 1])                                  # Stage 1 moves the weights before the switch
    np.testing.assert_array_equal(W[T//2:], np.broadcast_to(W[T//2], W[T//2:].shape))   # then they are held
    with pytest.raises(AssertionError, match="Stage 2 ran"):
        pp.train_tabular("paretopo", env, steps=T, seed=3, switch_frac=0.5)


def test_stage2_only_turns_stage1_off(monkeypatch):
    import maspob_etal.paretopo as pp
    env, T = nonconvex_instance(2, 3), 40
    r = pp.train_tabular("stage2_only", env, steps=T, seed=3, switch_frac=0.5)
    W = r["weights"]
    np.testing.assert_array_equal(W[:T//2], np.tile([1.0, 0.0], (T//2, 1)))   # the weights never leave w0
    assert np.isnan(W[T//2:]).all() and len(r["archive"]) == 0 and r["fallbacks"] == 0   # no Stage 1 update at all
    s = method_scores("stage2_only", *tool_objectives(np.array([[1, 0, 1]], bool), np.array([[0, 0, 5]]), 6),
                      stage1=True, sched=HVWeightScheduler(2))
    np.testing.assert_array_equal(s, [[1, 0, 1]])                              # before the switch: accuracy alone
    calls = []
    monkeypatch.setattr(pp, "pareto_rank_scores", lambda *a, **k: calls.append(1) or np.zeros(np.shape(a[0])[:-1]))
    pp.train_tabular("stage2_only", env, steps=T, seed=3, switch_frac=0.5)
    assert len(calls) == T - T//2                                              # after it: the ranks, every step


def test_each_seed_draws_its_own_instance_with_the_same_dents():
    for level in range(len(NONCONVEX_TABLES)):
        nominal = on_envelope(true_front(nonconvex_env(level)))
        envs = [nonconvex_instance(level, s) for s in range(8)]
        assert len({e.P[0].tobytes() for e in envs}) == 8                      # the units differ
        for e in envs:
            assert (np.diff(e.P[0]) >= 0).all() and e.P.max() <= 1
            np.testing.assert_array_equal(on_envelope(true_front(e)), nominal)   # the same points below the envelope
            assert linear_reach(e)["best_calls"] == 2                            # k = 2 stays the HV-best point
    for s in range(8):                                                          # per seed, the knob keeps its order
        g = [linear_reach(nonconvex_instance(l, s))["gap"] for l in range(4)]
        assert g[0] == pytest.approx(0, abs=1e-12) and np.all(np.diff(g) > 0.005)
    np.testing.assert_array_equal(nonconvex_instance(1, 5).P, nonconvex_instance(1, 5).P)   # reproducible


def test_tune_draws_one_instance_per_seed():
    from functools import partial
    grid, seeds = {"otc": (dict(w=0.05), dict(w=1/6))}, [7, 8]
    best, means = tune("otc", partial(nonconvex_instance, 3), seeds, 30, grid=grid)
    direct = [np.mean([train_tabular("otc", nonconvex_instance(3, s), steps=30, seed=s, **kw)["hv_greedy"] for s in seeds])
              for kw in grid["otc"]]
    np.testing.assert_allclose(means, direct)


def _smoke_ledger():
    import json, os
    root = pathlib.Path(os.environ.get("PARETOPO_LEDGER_DIR", pathlib.Path(__file__).resolve().parents[1]/"results"))
    f = root/"paretopo.smoke.json"
    if not f.exists(): pytest.skip("no smoke ledger")
    return json.loads(f.read_text())


def test_smoke_ledger_claims_design():
    d = _smoke_ledger()
    C, m = {c["id"]: c for c in d["claims"]}, d["metrics"]
    levels = sorted(int(i.split("@")[1]) for i in C if i.startswith("C1@"))
    assert len(levels) >= 3 and set(C) == {f"C1@{l}" for l in levels} | {"C2", "C3a", "C3b", "C4", "C5"}
    assert len(C) <= 9 and not any(i.startswith("C4@") for i in C)             # the scale claim is one claim
    top = max(levels)
    for l in levels:                                                           # the thesis: against tuned OTC
        c = C[f"C1@{l}"]
        assert c["baseline"] == pytest.approx(m[f"level {l}: otc hv"], abs=1e-12), l
        assert c["shortcut_mean"] == pytest.approx(m[f"level {l}: shortcut hv"], abs=1e-12), l
        assert not any(k.startswith(f"level {l}: tuned shortcut") for k in m)    # the shortcut is never tuned
        assert len(set(np.round(c["ours_values"], 12))) > 1 or len(set(np.round(c["baseline_values"], 12))) > 1   # units vary
    assert C["C3a"]["baseline"] == pytest.approx(m[f"level {top}: stage1_only hv"], abs=1e-12)
    assert C["C3b"]["baseline"] == pytest.approx(m[f"level {top}: stage2_only hv"], abs=1e-12)
    for a in ("paretopo", "otc", "stage1_only", "stage2_only"):               # every compared arm was tuned, alike
        assert f"level {top}: tuned {a} " + ("w" if a == "otc" else "switch_frac") in m, a


def test_greedy_evaluation_is_the_deterministic_policy():
    env = nonconvex_env(3)
    th = np.array([[2.0, 0.5, -0.1, 3.0, 3.0, 3.0]])                     # calls twice, then answers
    r = train_tabular("static", env, steps=1, seed=0)
    assert r["hv_greedy_curve"][0] == pytest.approx(0.3)                  # theta = 0: P(CALL) = 1/2 is not > 1/2, answer at once
    from maspob_etal.paretopo import greedy_theta
    acc, calls = env.exact_eval(greedy_theta(th))
    assert calls == pytest.approx(2) and acc == pytest.approx(0.6)


def test_recorded_claims_decide_something():
    "No claim is held on units that never differ (an effect of 0 with CI [0, 0] is inconclusive)."
    import json
    root = pathlib.Path(__file__).resolve().parents[1]/"results"
    for f in sorted(root.glob("paretopo.*.json")):
        for c in json.loads(f.read_text())["claims"]:
            if c.get("ci_low") is not None and c["ci_low"] == c["ci_high"] == 0:
                held = c.get("verdict") == "held" or (c.get("verdict") is None and c.get("holds"))
                assert not held, (f.name, c["id"])


def test_bad_input():
    env = ToolCallEnv()
    with pytest.raises(ValueError, match="unknown method"): train_tabular("paretoPO", env)
    with pytest.raises(ValueError, match="simplex"): HVWeightScheduler(2, w0=[0.5, 0.6])
    with pytest.raises(ValueError, match="simplex"): HVWeightScheduler(2, w0=[1.2, -0.2])
    with pytest.raises(ValueError, match="G >= 2"): train_tabular("paretopo", env, G=1)
    with pytest.raises(ValueError, match="at least 2"): group_advantages(np.array([1.0]))
    with pytest.raises(ValueError, match="theta"): env.exact_eval(np.zeros((3, 6)))
    with pytest.raises(ValueError, match="hi > lo"): normalize_objectives(np.zeros((2, 2)), [0, 0], [1, 0])
    with pytest.raises(ValueError, match="policy"): train_tabular("paretopo", env, policy="rnn")


def test_bad_shapes_and_sizes():
    env, rng = ToolCallEnv(), np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"correct must have shape \(4,\)"):
        pareto_rank_scores(np.ones((4, 2)), np.ones(3, bool))
    with pytest.raises(ValueError, match="correct and calls must have one shape"):
        tool_objectives(np.ones((2, 4), bool), np.ones((2, 3)), 6)
    with pytest.raises(ValueError, match="k_max must be >= 1"): tool_objectives(np.ones((2, 4), bool), np.ones((2, 4)), 0)
    with pytest.raises(ValueError, match=r"correct must be \(B, G\)"):
        method_scores("paretopo", *tool_objectives(np.ones((2, 4), bool), np.ones((2, 4)), 6), correct=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match=r"difficulties in 0\.\.3"): env.rollout(np.zeros((4, 6)), np.array([0, 5]), rng)
    with pytest.raises(ValueError, match="hidden >= 1"): train_tabular("paretopo", env, steps=1, policy="mlp", hidden=0)


def test_llm_tools():
    assert safe_eval("17*23-45") == 346.0 and safe_eval("(3+4)*2") == 14.0
    for bad in ("__import__('os').system('ls')", "2**100", "x+1", "1/0", "open('f')"):
        with pytest.raises(ValueError): safe_eval(bad)
    probs = make_word_problems(100, seed=1)
    assert probs == make_word_problems(100, seed=1) and all(isinstance(p["answer"], int) for p in probs)
    assert parse_answer("<calc>2*3</calc> Answer: 6") == 6.0 and parse_answer("six") is None


def test_thread_independent():
    assert_thread_independent("""
from maspob_etal.paretopo import ToolCallEnv, train_tabular
env = ToolCallEnv.large()
r = train_tabular("paretopo", env, steps=40, seed=2, policy="mlp")
t = train_tabular("paretopo", ToolCallEnv(), steps=60, seed=2)
result = [r["acc"], r["calls"], float(r["theta"].sum()), t["hv"]]
""")


# ---- the LLM agent loop, on a scripted model and a tiny random one ---------------------------------------------------
@pytest.fixture(scope="module")
def tok():
    from maspob_etal.models import load_tokenizer
    try: return load_tokenizer(None)
    except Exception as e: pytest.skip(f"SmolLM2 tokenizer not available offline: {e}")


class _Scripted(torch.nn.Module):
    "A stand-in LM whose `generate` replays scripted turns, to test the tool loop exactly."
    def __init__(self, tok, turns):
        super().__init__(); self.p = torch.nn.Parameter(torch.zeros(1)); self.tok, self.turns, self.i = tok, turns, 0
    def generate(self, input_ids, attention_mask, **kw):
        new = [self.tok(self.turns[self.i], add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id] for _ in range(len(input_ids))]
        self.i += 1
        T = max(map(len, new))
        new = torch.tensor([n + [self.tok.pad_token_id]*(T - len(n)) for n in new])
        return torch.cat([input_ids, new], 1)


def test_agent_rollout_tool_loop(tok):
    from maspob_etal.paretopo import agent_rollouts
    m = _Scripted(tok, ["Let me compute <calc>17*23-45</calc>", "So Answer: 346"])
    eps = agent_rollouts(m, tok, ["q1", "q2"], k_max=3, max_new_tokens=32)
    for e in eps:
        assert e["calls"] == 1 and e["answer"] == 346.0
        assert "<result>346</result>" in e["text"]
        tool = tok("\n<result>346</result>\n", add_special_tokens=False)["input_ids"]
        assert e["mask"].count(0) == len(tool) and len(e["mask"]) == len(e["gen"])     # tool tokens masked out of the loss


def test_grpo_loss_on_tiny_model(tok):
    from transformers import LlamaConfig, LlamaForCausalLM
    from maspob_etal.paretopo import grpo_loss
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=256)).double()
    eps = [dict(prompt=[1, 2, 3], gen=[4, 5, 6, 7], mask=[1, 1, 0, 1]), dict(prompt=[1, 2], gen=[8, 9], mask=[1, 1])]
    A = np.array([1.0, -1.0])
    loss = grpo_loss(model, eps, A, beta=0.0)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)                     # ratio 1: the surrogate's value is -mean(A) = 0
    loss.backward()
    g1 = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    # its gradient is that of -(1/N) sum_i A_i mean_{t in o_i} log p(t), tool tokens excluded
    logits = model(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6, 7]])).logits[0].float().log_softmax(-1)
    lp0 = torch.stack([logits[2, 4], logits[3, 5], logits[5, 7]]).mean()
    logits = model(input_ids=torch.tensor([[1, 2, 8, 9]])).logits[0].float().log_softmax(-1)
    lp1 = torch.stack([logits[1, 8], logits[2, 9]]).mean()
    (-(lp0 - lp1)/2).backward()
    for a, b in zip(g1, (p.grad for p in model.parameters())): torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-8)
    assert sum(float(g.abs().sum()) for g in g1) > 0
