"Properties of the social-choice rules that a wrong implementation would break (spec section 6)."
import itertools
import numpy as np
import pytest
from scipy.special import expit, logit

from maspob_etal.social_choice import (Rule, RULE_KINDS, bt_reward, borda_scores, check_clones, check_condorcet,
    check_monotonicity, check_neutrality, check_pareto, check_reinforcement, condorcet_winner, exploitability,
    maximal_lottery, maximal_lottery_lp, nash_md_tabular, preference_matrix, random_profile, rlhf_policy, rlhf_tabular,
    smith_set, vnw_path, vnw_policy, _same_outcome_P)

def profiles(k, n_choices=(3, 5, 7, 9), m=4, seed=0, kind="ic"):
    rng = np.random.default_rng(seed)
    return [random_profile(int(rng.choice(n_choices)), m, kind, rng=rng) for _ in range(k)]

def softmax(x): z = np.exp(x - x.max()); return z / z.sum()

# --- P invariants ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["ic", "mallows", "mixture"])
def test_P_invariants(kind):
    for r in profiles(20, kind=kind, m=5):
        P = preference_matrix(r)
        assert np.allclose(P + P.T, 1) and np.allclose(np.diag(P), 0.5) and ((P >= 0) & (P <= 1)).all()
    P = preference_matrix(np.array([[2, 0, 1]] * 4))          # unanimous profile: 0/1 entries
    assert set(np.unique(P[~np.eye(3, dtype=bool)])) == {0.0, 1.0}

# --- m = 2 closed forms --------------------------------------------------------------------------------------
@pytest.mark.parametrize("p,beta", [(0.7, 0.3), (0.55, 0.05), (0.2, 2.0)])
def test_two_alternatives_closed_forms(p, beta):
    P = np.array([[0.5, p], [1 - p, 0.5]])
    assert vnw_policy(P, beta)[0] == pytest.approx(expit((p - 0.5) / beta), abs=1e-10)
    assert rlhf_policy(P, beta, reward="borda")[0] == pytest.approx(expit((p - 0.5) / beta), abs=1e-10)
    assert rlhf_policy(P, beta, reward="bt")[0] == pytest.approx(expit(logit(p) / beta), abs=1e-6)

# --- maximal lottery -------------------------------------------------------------------------------------------
def regret_matching(M, iters=100_000):
    "Average strategy of regret matching+ self-play on the symmetric zero-sum game M (row player maximizes)."
    m = len(M); R = np.zeros(m); avg = np.zeros(m)
    for t in range(1, iters + 1):
        s = np.maximum(R, 0); s = s / s.sum() if s.sum() > 0 else np.full(m, 1 / m)
        u = M @ s                                       # payoff of each pure strategy against itself-play s
        R = np.maximum(R + u - s @ u, 0); avg += t * s
    return avg / avg.sum()

def test_maximal_lottery_facts():
    assert np.allclose(maximal_lottery(preference_matrix([[0, 1, 2], [1, 2, 0], [2, 0, 1]])), 1 / 3)
    for r in profiles(60, m=5):
        P = preference_matrix(r); ml = maximal_lottery(P)
        assert ml @ P @ np.ones(5) / 5 >= 0 and (ml @ P).min() == pytest.approx(0.5, abs=1e-9)   # value 1/2
        c = condorcet_winner(P)
        if c is not None: assert ml[c] == pytest.approx(1.0)
        assert np.allclose(ml, maximal_lottery_lp(P), atol=1e-7)
        assert set(np.nonzero(ml > 1e-12)[0]) <= set(smith_set(P))

def test_maximal_lottery_matches_regret_matching():
    n_checked = 0
    for r in profiles(30, n_choices=(5, 7), m=4, seed=3):
        P = preference_matrix(r)
        if condorcet_winner(P) is not None: continue
        rm = regret_matching(P - 0.5, 20_000)
        assert np.abs(rm - maximal_lottery(P)).sum() < 1e-2
        n_checked += 1
    assert n_checked >= 3

# --- regularized von Neumann winner -----------------------------------------------------------------------------
def extragradient(P, beta, ref, eta=0.2, iters=3_000):
    "Independent solver: mirror-prox (extragradient) on the regularized min-max game."
    x = y = np.log(ref)
    for _ in range(iters):
        p, q = softmax(x), softmax(y)
        xh = (1 - eta * beta) * x + eta * beta * np.log(ref) + eta * P @ q
        yh = (1 - eta * beta) * y + eta * beta * np.log(ref) - eta * P.T @ p
        ph, qh = softmax(xh), softmax(yh)
        x = (1 - eta * beta) * x + eta * beta * np.log(ref) + eta * P @ qh
        y = (1 - eta * beta) * y + eta * beta * np.log(ref) - eta * P.T @ ph
    return softmax(x)

def test_vnw_fixed_point_exploitability_and_extragradient():
    rng = np.random.default_rng(7)
    for i, r in enumerate(profiles(5, m=5, seed=5)):
        P, ref = preference_matrix(r), rng.dirichlet(2 * np.ones(5))
        for beta in [0.02, 0.3, 3.0]:
            pi = vnw_policy(P, beta, ref)
            assert np.abs(np.log(pi) - np.log(ref) - P @ pi / beta - np.mean(np.log(pi) - np.log(ref) - P @ pi / beta)).max() < 1e-10
            assert exploitability(P, pi, beta, ref) < 1e-9
        if i < 2: assert np.abs(extragradient(P, 0.3, ref) - vnw_policy(P, 0.3, ref)).max() < 1e-6

def test_vnw_limits():
    for r in profiles(40, n_choices=(5, 7, 9), m=4, seed=11):
        P = preference_matrix(r); B = borda_scores(P)
        big = vnw_policy(P, 50.0)
        assert np.abs(big - 0.25).max() < 0.01                                             # beta -> inf: pi_ref
        if np.min(np.abs(B[:, None] - B[None, :])[~np.eye(4, dtype=bool)]) > 1e-9:
            assert (np.argsort(vnw_policy(P, 10.0)) == np.argsort(B)).all()                # large beta: Borda order
        assert np.abs(vnw_policy(P, 1e-3) - maximal_lottery(P)).sum() < 1e-2               # beta -> 0: maximal lottery

def test_vnw_path_equals_single_solves():
    Ps = np.stack([preference_matrix(r) for r in profiles(10, m=4)])
    path = vnw_path(Ps, [0.5, 0.05, 0.0])
    for b in [0.5, 0.05]: assert np.allclose(path[b], np.stack([vnw_policy(P, b) for P in Ps]), atol=1e-10)
    assert np.allclose(path[0.0], maximal_lottery(Ps))

# --- Borda and BT ------------------------------------------------------------------------------------------------
def test_bt_orders_like_borda_on_tie_free_profiles():
    n_done = 0
    for r in profiles(1000, m=5, seed=2):
        P = preference_matrix(r); B = borda_scores(P)
        if np.min(np.abs(B[:, None] - B[None, :])[~np.eye(5, dtype=bool)]) < 1e-9: continue
        assert (np.argsort(bt_reward(P)) == np.argsort(B)).all()
        n_done += 1
        if n_done == 200: break
    assert n_done == 200

def test_bt_first_order_condition():
    for r in profiles(10, m=4):
        P = preference_matrix(r); rhat = bt_reward(P, l2=1e-6)
        s = expit(rhat[:, None] - rhat[None, :]); off = 1 - np.eye(4)
        assert np.allclose((off * (P - s)).sum(1), 2e-6 * rhat, atol=1e-9)

# --- exact axiom properties --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", RULE_KINDS)
@pytest.mark.parametrize("beta", [0.0, 0.05, 1.0])
def test_pareto_neutrality_reinforcement_hold_exactly(kind, beta):
    rule, sample = Rule(kind, beta), profiles(40, m=4, seed=4, kind="mallows")
    assert check_pareto(rule, sample) == []
    assert check_neutrality(rule, sample, rng=0) == []
    Ps = np.stack([preference_matrix(r) for r in sample]); pis = rule(Ps)
    rng = np.random.default_rng(0)
    P2 = np.stack([_same_outcome_P(P, pi, kind, rng) for P, pi in zip(Ps, pis)])
    assert np.abs(rule(P2) - pis).max() < 1e-8 and np.abs(P2 - Ps).max() > 1e-4    # a genuinely different electorate
    assert check_reinforcement(rule, Ps, P2, 0.3) == []

# --- checker self-tests -------------------------------------------------------------------------------------------
FROZEN_ML_NONMONOTONE = np.array([[1, 2, 0, 3], [0, 3, 1, 2], [2, 0, 1, 3], [3, 1, 2, 0], [2, 3, 0, 1]])

def test_frozen_maximal_lottery_monotonicity_counterexample():
    v = check_monotonicity(Rule("vnw", 0.0), [FROZEN_ML_NONMONOTONE])
    assert any(x.witness == {"voter": 2, "raised": 3, "over": 1} and x.magnitude == pytest.approx(2 / 15) for x in v)

def test_checkers_catch_bad_rules_and_pass_good_ones():
    sample = profiles(80, m=4, seed=9)
    def cw_rule(P, ref=None):
        P = P[None] if P.ndim == 2 else P
        return np.stack([np.eye(4)[condorcet_winner(p)] if condorcet_winner(p) is not None else np.full(4, .25) for p in P])
    def loser(P, ref=None):
        P = P[None] if P.ndim == 2 else P
        B = -borda_scores(P); top = B >= B.max(1, keepdims=True) - 1e-12; return top / top.sum(1, keepdims=True)
    assert check_condorcet(cw_rule, sample) == [] and len(check_condorcet(loser, sample)) > 0
    assert len(check_monotonicity(loser, sample)) > 0 and len(check_pareto(loser, sample)) > 0
    assert len(check_condorcet(Rule("rlhf_borda", 0.1), sample)) == len(check_condorcet(Rule("rlhf_borda", 0.0), sample))

def test_clone_check_flags_borda():
    sample = profiles(30, m=3, seed=12)
    assert len(check_clones(Rule("rlhf_borda", 0.0), sample, a=0)) > 0

# --- learning dynamics ------------------------------------------------------------------------------------------------
def test_learning_dynamics_reach_closed_forms():
    r = random_profile(9, 4, rng=11); P = preference_matrix(r)
    for beta in [0.1, 1.0]:
        assert np.abs(nash_md_tabular(P, beta, eta=0.5, steps=20_000) - vnw_policy(P, beta)).sum() < 1e-3
    assert np.abs(rlhf_tabular(r, 1.0, n_comparisons=200_000) - rlhf_policy(P, 1.0, reward="bt")).sum() < 2e-2

# --- bad input --------------------------------------------------------------------------------------------------------
def test_errors_are_clear():
    with pytest.raises(ValueError, match="not a permutation"): preference_matrix([[0, 0, 1], [0, 1, 2]])
    with pytest.raises(ValueError, match="beta must be"): vnw_policy(np.full((3, 3), .5), -0.1)
    with pytest.raises(ValueError, match="zero entry"): rlhf_policy(np.full((3, 3), .5), 0.1, ref=[.5, .5, 0])
    with pytest.raises(ValueError, match="P \\+ P.T"): maximal_lottery(np.ones((3, 3)))
    with pytest.raises(ValueError, match="reward must be"): rlhf_policy(np.full((2, 2), .5), 1.0, reward="dpo")
    with pytest.raises(ValueError, match="weights"): preference_matrix([[0, 1]], weights=[-1])

def test_audit_is_the_same_with_worker_processes():
    from maspob_etal.social_choice import axiom_audit
    kw = dict(betas=[0.0, 0.1], n_profiles=15, m_values=[3, 4], n_values=[5], axioms=["A1", "A3"], seed=3)
    a, b = axiom_audit(**kw), axiom_audit(**kw, n_jobs=2)
    assert a.equals(b) and a.violations.sum() > 0

# --- issue 14: by-construction facts, counterexample searches, non-uniform reference, bounded solver -----------------
import math, sys, pathlib, time
from maspob_etal.social_choice import (all_rankings, ranking_matrices, profile_counts, enumerate_profiles, axiom_scores,
    is_violation, smallest_counterexamples, adversarial_search, check_monotonicity as _check_mono)

def test_rlhf_condorcet_failures_do_not_depend_on_beta_or_reference():
    "Regularized RLHF's ratio pi/pi_ref is a monotone function of the reward: its A1 count is the same at every beta and reference."
    sample, rng = profiles(120, m=4, seed=21), np.random.default_rng(0)
    for kind in ("rlhf_bt", "rlhf_borda"):
        counts = {len(check_condorcet(Rule(kind, b), sample, ref)) for b in (0.0, 0.03, 0.3, 3.0)
                  for ref in (None, rng.dirichlet(2 * np.ones(4)))}
        assert len(counts) == 1 and counts.pop() > 0

def test_rlhf_policy_with_a_reference_closed_form():
    P = np.array([[.5, .7, .2], [.3, .5, .6], [.8, .4, .5]]); ref = np.array([.5, .3, .2]); beta = 0.4
    B = P.mean(1); want = ref * np.exp(B / beta); want /= want.sum()
    assert np.allclose(rlhf_policy(P, beta, ref, reward="borda"), want, atol=1e-12)

@pytest.mark.parametrize("kind", RULE_KINDS)
def test_pareto_and_reinforcement_with_a_non_uniform_reference(kind):
    rng = np.random.default_rng(3); ref = rng.dirichlet(2 * np.ones(4))
    rule, sample = Rule(kind, 0.1), profiles(30, m=4, seed=8, kind="mallows")
    assert check_pareto(rule, sample, ref) == []
    Ps = np.stack([preference_matrix(r) for r in sample]); pis = rule(Ps, ref)
    P2 = np.stack([_same_outcome_P(P, pi, kind, rng) for P, pi in zip(Ps, pis)])
    assert check_reinforcement(rule, Ps, P2, 0.4, ref) == []
    assert np.abs(vnw_policy(Ps[0], 0.1, ref) - vnw_policy(Ps[0], 0.1)).max() > 1e-3   # the reference matters

def test_profile_counts_and_enumeration():
    R = all_rankings(3); assert (R[0] == [0, 1, 2]).all() and len(R) == 6
    r = np.array([[2, 0, 1], [0, 1, 2], [2, 0, 1]])
    c = profile_counts(r); assert c.sum() == 3 and c[0] == 1 and c[[i for i, x in enumerate(R) if list(x) == [2, 0, 1]][0]] == 2
    assert np.allclose(np.einsum("r,rab->ab", c / 3, ranking_matrices(3)), preference_matrix(r))
    full, neut = enumerate_profiles(3, 4, neutral=False), enumerate_profiles(3, 4)
    assert len(full) == math.comb(4 + 5, 5)
    # every profile is a relabelling of one holding the identity ranking
    perms = [np.array(p) for p in itertools.permutations(range(3))]
    reps = {tuple(x) for x in neut.tolist()}
    for cnt in full:
        prof = np.repeat(R, cnt.astype(int), axis=0)
        assert any(tuple(profile_counts(p[prof])) in reps for p in perms)

def test_axiom_scores_pinned_values():
    cw_not_borda = np.array([[0, 1, 2, 3]] * 3 + [[1, 2, 3, 0]] * 2)   # 0 beats everyone 3:2, 1 has the top Borda score
    P = preference_matrix(cw_not_borda); ref = np.array([.1, .2, .3, .4]); beta = 0.5
    pi = ref * np.exp(P.mean(1) / beta); pi /= pi.sum(); ratio = pi / ref
    d = axiom_scores(profile_counts(cw_not_borda)[None], ["rlhf_borda"], [beta], ref=ref)[("rlhf_borda", beta)]
    assert d["A1"][0] == pytest.approx(ratio[1:].max() - ratio[0], abs=1e-12) and is_violation(d["A1"], "A1")[0]
    # A3: the worst drop equals the worst of the voter-by-voter checker on the frozen maximal-lottery counterexample
    d = axiom_scores(profile_counts(FROZEN_ML_NONMONOTONE)[None], ["vnw"], [0.0])[("vnw", 0.0)]
    worst = max(v.magnitude for v in _check_mono(Rule("vnw", 0.0), [FROZEN_ML_NONMONOTONE]))
    assert d["A3"][0] == pytest.approx(worst, abs=1e-12) and worst >= 2 / 15 - 1e-12
    # weights instead of counts: the same scores when one swap moves 1/n of the electorate
    w = profile_counts(FROZEN_ML_NONMONOTONE)[None] / 5
    assert axiom_scores(w, ["vnw"], [0.0], swap_mass=0.2)[("vnw", 0.0)]["A3"][0] == pytest.approx(d["A3"][0], abs=1e-12)
    with pytest.raises(ValueError, match="m!"): axiom_scores(np.ones((2, 5)), ["vnw"], [0.1])

def test_axiom_scores_agree_with_the_checkers():
    sample = profiles(25, n_choices=(3, 5, 7), m=4, seed=31)
    Cs = np.stack([profile_counts(r) for r in sample]); ref = np.array([.4, .3, .2, .1])
    for (kind, b), d in axiom_scores(Cs, ["vnw", "rlhf_bt"], [0.0, 0.03], ref=ref).items():
        rule = Rule(kind, b)
        assert set(np.nonzero(is_violation(d["A1"], "A1"))[0]) == {v.profile for v in check_condorcet(rule, sample, ref)}
        assert set(np.nonzero(is_violation(d["A3"], "A3"))[0]) == {v.profile for v in _check_mono(rule, sample, ref)}

def test_smallest_counterexamples_pinned():
    ex, found = smallest_counterexamples(3, [3, 5], ["vnw"], [0.0, 0.1])
    assert ex.query("beta == 0 and axiom == 'A3'").violations.tolist() == [0, 4]
    assert ex.query("beta == 0.1").violations.sum() == 0
    c = found[("vnw", 0.0, "A3")]; assert sum(c["counts"]) == 5 and len(c["swap"]) == 3

def test_adversarial_search_finds_known_failures_only():
    assert adversarial_search("vnw", 0.0, "A3", 3, pop=24, generations=10)["score"] > 0.02       # the maximal lottery
    assert adversarial_search("rlhf_borda", 0.1, "A1", 3, pop=24, generations=10)["score"] > 0   # Borda vs a Condorcet winner
    assert adversarial_search("rlhf_borda", 0.1, "A3", 3, pop=16, generations=6)["score"] <= 1e-12   # Borda is monotone

def test_vnw_solver_ends_or_raises_promptly():
    P = preference_matrix(random_profile(9, 5, rng=1))
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="did not converge"): vnw_path(P, [1e-3], max_iter=1, max_time=0.0)
    with pytest.raises(RuntimeError, match="did not converge"): vnw_path(P, [1e-4], max_iter=1)   # bisection depth bound
    assert time.monotonic() - t < 30

def test_thread_count_changes_no_number():
    sys.path.insert(0, str(pathlib.Path(__file__).parent)); from _threads import assert_thread_independent
    assert_thread_independent("""
import itertools
import numpy as np
from maspob_etal.social_choice import enumerate_profiles, axiom_scores
d = axiom_scores(enumerate_profiles(3, 5), ["vnw", "rlhf_bt"], [0.0, 0.05, 0.5])
result = [float(np.nan_to_num(v[ax], neginf=-9).sum()) for v in d.values() for ax in ("A1", "A3")]
""")

def test_condorcet_winner_ignores_rounding_on_the_diagonal():
    "A diagonal of 1/2 + 1 ulp (as a weighted sum of ranking matrices gives) must not count as a win."
    P = np.array([[0.5 + 1e-16, 0.6, 0.45], [0.4, 0.5, 0.55], [0.55, 0.45, 0.5]])
    assert condorcet_winner(P) is None
    d = axiom_scores(enumerate_profiles(3, 11), ["vnw"], [0.0], axioms=("A1",))[("vnw", 0.0)]
    assert not is_violation(d["A1"], "A1").any()      # the maximal lottery is Condorcet-consistent by construction

def test_rule_policies_equal_the_rules():
    "The batched policies used by the searches equal the rules themselves, ties and a non-uniform reference included."
    from maspob_etal.social_choice import rule_policies
    Ps = np.stack([preference_matrix(r) for r in profiles(40, n_choices=(2, 4, 5), m=4, seed=41)])   # even n: Borda ties
    ref = np.array([.4, .3, .2, .1])
    for kind in RULE_KINDS:
        pol = rule_policies(kind, Ps, [0.0, 0.07], ref)
        for b in (0.0, 0.07): assert np.allclose(pol[b], Rule(kind, b)(Ps, ref), atol=1e-10), (kind, b)


# --- pairwise ties, an independent game solver, the shortcut rule and the clean window -----------------------
def test_condorcet_winner_needs_strict_majorities_against_everyone():
    # 4 voters: a beats c 3-1 and ties b 2-2, so a is no Condorcet winner; neither are b (loses to a? no: ties) or c
    tie = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0]])
    P = preference_matrix(tie)
    assert P[0, 1] == 0.5 and P[0, 2] == 0.75
    assert condorcet_winner(P) is None
    # adding one a > b > c voter breaks the tie: now a beats b 3-2 and c 4-1
    assert condorcet_winner(preference_matrix(np.vstack([tie, [[0, 1, 2]]]))) == 0
    # b and c tie with each other, a beats both strictly: a is the winner whatever the tie between the others
    assert condorcet_winner(preference_matrix(np.array([[0, 1, 2], [0, 2, 1]]))) == 0
    # two voters with opposite rankings: every pair ties, nobody wins, the Smith set is everyone
    P2 = preference_matrix(np.array([[0, 1, 2], [2, 1, 0]]))
    assert condorcet_winner(P2) is None and sorted(smith_set(P2)) == [0, 1, 2]


def test_maximal_lottery_matches_nashpy_support_enumeration():
    # the maximal lottery is the equilibrium of the symmetric zero-sum game P - P^T; nashpy solves it by support
    # enumeration, an algorithm unrelated to our LP and to our support-enumeration code path
    nashpy = pytest.importorskip("nashpy")
    checked = 0
    for i, r in enumerate(profiles(40, n_choices=(5, 7, 9, 11), m=5, seed=21)):
        P = preference_matrix(r)
        eqs = list(nashpy.Game(P - P.T).support_enumeration())
        assert eqs, "a zero-sum game always has an equilibrium"
        ours = maximal_lottery(P)
        assert min(np.abs(ours - e[0]).max() for e in eqs) < 1e-9, (i, ours, eqs)
        checked += 1
    assert checked == 40


def test_black_rule_satisfies_a1_and_a3_even_on_weighted_electorates():
    from maspob_etal.social_choice import axiom_scores, is_violation, black_reward
    rng = np.random.default_rng(4)
    W = rng.exponential(size=(300, 24)) * (rng.random((300, 24)) < 0.5)       # sparse random weights, m = 4
    W[W.sum(1) == 0, 0] = 1.0
    for b in (0.0, 0.01, 0.1, 2.0):
        for mass in (None, 0.02):
            d = axiom_scores(W, ["black"], [b], swap_mass=mass)[("black", b)]
            assert not is_violation(d["A1"], "A1").any() and not is_violation(d["A3"], "A3").any()
    # the VNW at small beta does fail A3 on the same electorates: the check can fail
    d = axiom_scores(W, ["vnw"], [0.0], swap_mass=0.02)[("vnw", 0.0)]
    assert is_violation(d["A3"], "A3").any()
    # the reward: Borda plus one for the Condorcet winner, nothing else
    P = preference_matrix(np.array([[2, 0, 1], [2, 1, 0], [0, 2, 1]]))
    assert np.allclose(black_reward(P), borda_scores(P) + np.array([0, 0, 1]))


def test_black_rule_breaks_reinforcement_where_vnw_cannot():
    E1 = np.array([[.5, .55, .3], [.45, .5, .55], [.7, .45, .5]])
    E2 = np.array([[.5, .3, .55], [.7, .5, .3], [.45, .7, .5]])
    assert condorcet_winner(E1) is None and condorcet_winner(E2) is None and condorcet_winner((E1 + E2) / 2) == 2
    assert np.allclose(borda_scores(E1), borda_scores(E2))
    assert len(check_reinforcement(Rule("black", 0.1), E1, E2)) == 1
    assert check_reinforcement(Rule("vnw", 0.1), E1, E2) == []


def test_vnw_window_brackets_the_thresholds():
    from maspob_etal.social_choice import axiom_scores, enumerate_profiles, is_violation, vnw_window
    C = enumerate_profiles(3, 7)
    w = vnw_window(C, iters=12)
    assert w["open"] and w["beta_mono"] < w["beta_cc"]
    inside = np.geomspace(w["beta_mono"] * 1.01, w["beta_cc"] / 1.01, 4)
    sc = axiom_scores(C, ["vnw"], list(inside) + [w["beta_mono"] * 0.97, w["beta_cc"] * 1.03])
    for b in inside:                                         # clean inside the window
        d = sc[("vnw", float(b))]
        assert not is_violation(d["A1"], "A1").any() and not is_violation(d["A3"], "A3").any()
    assert is_violation(sc[("vnw", float(w["beta_mono"] * 0.97))]["A3"], "A3").any()   # just below: non-monotone
    assert is_violation(sc[("vnw", float(w["beta_cc"] * 1.03))]["A1"], "A1").any()     # just above: not Condorcet
    # a window that closes: at n = 17 (m = 3) the reviewer's profile breaks A1 at beta = 0.12
    c17 = np.zeros(6); R = [tuple(r) for r in itertools.permutations(range(3))]
    for k, rk in [(6, (0, 1, 2)), (1, (0, 2, 1)), (1, (1, 0, 2)), (1, (1, 2, 0)), (6, (2, 0, 1)), (2, (2, 1, 0))]:
        c17[R.index(rk)] = k
    d = axiom_scores(c17[None], ["vnw"], [0.12])[("vnw", 0.12)]
    assert is_violation(d["A1"], "A1")[0]
    with pytest.raises(ValueError, match="0 < lo < hi"): vnw_window(C, lo=2.0, hi=1.0)


def test_vnw_sees_beta_relative_to_the_margins():
    # shrinking every margin by eps is the same as raising beta by 1/eps: VNW_beta(1/2 + eps (P - 1/2)) = VNW_{beta/eps}(P)
    for i, r in enumerate(profiles(20, m=4, seed=8)):
        P = preference_matrix(r); ref = np.random.default_rng(i).dirichlet(2 * np.ones(4))
        for eps, beta in [(0.1, 0.05), (0.01, 0.002), (0.5, 0.3)]:
            assert np.abs(vnw_policy(0.5 + eps * (P - 0.5), beta, ref) - vnw_policy(P, beta / eps, ref)).max() < 1e-9


def test_ties_that_rounding_breaks_are_still_ties():
    from maspob_etal.social_choice import all_rankings, black_reward
    counts = [0, 2, 2, 1, 0, 1, 0, 1, 2, 0, 1, 0, 1, 1, 0, 0, 1, 2, 1, 2, 0, 2, 2, 0]   # m = 4, n = 22
    R = all_rankings(4)
    P = preference_matrix(np.repeat(R, counts, axis=0))
    assert abs(P[0, 3] - 0.5) < 1e-12                      # an exact 11-11 tie, possibly computed as 1/2 + 1 ulp
    assert condorcet_winner(P) is None                     # 0 ties with 3, so nobody beats everyone strictly
    assert (black_reward(P) - borda_scores(P)).max() == 0  # and nobody gets the Condorcet bonus
