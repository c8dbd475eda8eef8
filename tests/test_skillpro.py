"Known-value, property and bad-input tests of maspob_etal.skillpro (Skill-Pro); the real-LLM tests load SmolLM2-135M once."
import math, sys, pathlib
import numpy as np, pytest, torch
from collections import Counter
from maspob_etal.skillpro import *
from maspob_etal.skillpro import _rows

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

ENV, POL = HigherLower(32, 8), SimLLM()

def mk(name, init="IF this is the first turn", policy=("Think carefully before answering.",), **kw):
    return Skill(name, init, list(policy), **kw)

# ---- credit, LCB, priority, schedule ------------------------------------------------------------
def test_update_stats_known_value():
    s = mk("A"); s.update_stats(1.0, 0.4, 3, 2)
    assert math.isclose(s.total_gain, 0.4) and s.frequency == 2 and math.isclose(s.avg_gain, 0.2)
    s.update_stats(0.1, 0.4, 2, 1)                          # -0.15 for one more call
    assert math.isclose(s.total_gain, 0.25) and s.frequency == 3 and math.isclose(s.avg_gain, 0.25/3)

def test_lcb_and_priority_known_values():
    a = mk("A", frequency=40, avg_gain=0.3, maturity=5)
    assert math.isclose(lcb(a, 7), 0.3 - 0.2*math.sqrt(math.log(8)/40))
    assert math.isclose(lcb(a, 7, c=0.5), 0.3 - 0.5*math.sqrt(math.log(8)/40))
    b = mk("B", frequency=20, avg_gain=0.1, maturity=4)
    pool = [a, b, mk("C", frequency=5, avg_gain=0.9)]
    assert math.isclose(evolution_priority(b, pool, 10), (1 - math.exp(-20/50))*(1 - math.exp(-20/30))*0.2*math.exp(-0.5))
    assert evolution_priority(a, pool, 10) == 0.0 and evolution_priority(pool[2], pool, 10) == 0.0
    b.last_evolved_iter = 8; assert evolution_priority(b, pool, 10) == -0.01
    b.last_evolved_iter = 7; assert evolution_priority(b, pool, 10) > 0

def test_epsilon_schedule():
    assert [epsilon_schedule(t) for t in (0, 50, 100, 250)] == pytest.approx([0.3, 0.175, 0.05, 0.05])
    with pytest.raises(ValueError, match="t must be"): epsilon_schedule(-1)

# ---- the gate -------------------------------------------------------------------------------------
R, T = np.array([1.0, 0.2, 0.7]), np.array([2, 3, 1])

def test_gate_identity_is_mean_advantage_not_zero():
    z = np.zeros(6)
    assert ppo_gate_score(z, z, R, 0.4, T) == pytest.approx((R - 0.4).sum()/6)
    assert ppo_gate_score(z + 0.3, z + 0.3, R, [0.4, 0.1, 0.9], T) == pytest.approx((R - [0.4, 0.1, 0.9]).sum()/6)

def test_gate_clipping_branches():
    z = np.zeros(6); pos, neg = np.array([1.0, 0.5, 0.9]), np.array([0.1, 0.0, 0.3])
    Ap, An = np.repeat((pos - 0.4)/T, T), np.repeat((neg - 0.4)/T, T)
    assert ppo_gate_score(z + 1, z, pos, 0.4, T) == pytest.approx(1.2*Ap.mean())
    assert ppo_gate_score(z - 1, z, pos, 0.4, T) == pytest.approx(math.exp(-1)*Ap.mean())
    assert ppo_gate_score(z - 1, z, neg, 0.4, T) == pytest.approx(0.8*An.mean())
    assert ppo_gate_score(z + 1, z, neg, 0.4, T) == pytest.approx(math.e*An.mean())
    assert ppo_gate_score(z + 1, z, pos, 0.4, T, eps=0.1) == pytest.approx(1.1*Ap.mean())
    assert ppo_gate_score(z + 30, z, neg, 0.4, T) == pytest.approx(math.exp(10)*An.mean())        # log-ratio clipped first
    mixed = np.array([0.2, -0.1, 0.05, 0.4, -0.3, 0.0])
    A = np.repeat((R - 0.4)/T, T); r = np.exp(mixed)
    assert ppo_gate_score(mixed, z, R, 0.4, T) == pytest.approx(np.minimum(r*A, np.clip(r, 0.8, 1.2)*A).mean())

def test_gate_bad_input():
    z = np.zeros(6)
    assert ppo_gate_score(z + np.inf, z, R, 0.4, T) == -1e9
    with pytest.raises(ValueError, match="sum\\(lengths\\)"): ppo_gate_score(z, z, R, 0.4, [2, 2, 1])
    with pytest.raises(ValueError, match="one shape"): ppo_gate_score(z, z[:5], R, 0.4, T)
    with pytest.raises(ValueError, match="eps"): ppo_gate_score(z, z, R, 0.4, T, eps=1.5)

# ---- batch builder, maintenance --------------------------------------------------------------------
def _eps(rets): return [Episode({}, np.zeros(1), [None], r, []) for r in rets]

def test_success_failure_batch():
    b = success_failure_batch(_eps([0.5, 0.1, 0.9, 0.3, 0.7, 0.0, 0.2, 0.8]), 6)
    assert [e.ret for e in b] == [0.0, 0.1, 0.2, 0.7, 0.8, 0.9]
    assert [e.ret for e in success_failure_batch(_eps([0.5, 0.1, 0.9, 0.3, 0.7, 0.0, 0.2, 0.8]), 4)] == [0.0, 0.1, 0.8, 0.9]
    assert len(success_failure_batch(_eps([0.3]*6), 6)) == 6

toy = lambda texts: np.array([[1.0, 0.0] if "first turn" in t else [0.0, 1.0] for t in texts])

def test_maintenance_cases():
    p = SkillPool(seeds=[mk("A", frequency=30, avg_gain=0.2, maturity=5), mk("B", frequency=30, avg_gain=0.1, maturity=5),
                         mk("Newborn", frequency=1, avg_gain=-0.5, maturity=2), mk("O", "IF the last feedback was lower", maturity=5)])
    p.maintain(toy); assert p.names() == ["A", "Newborn", "O"]
    # same-name skills can only come from a pool edited by hand (add() renames): the repo's step (2) still handles them
    p = SkillPool(max_size=2, seeds=[mk("X", frequency=30, avg_gain=0.0, maturity=1), mk("Y", "IF the last feedback was lower", frequency=30, avg_gain=0.1, maturity=1)])
    p.skills.insert(1, mk("X", frequency=30, avg_gain=0.3, maturity=1))
    p.maintain(None); assert [(s.name, s.avg_gain) for s in p.skills] == [("X", 0.3), ("Y", 0.1)]
    p = SkillPool(max_size=5, seeds=[mk("X", frequency=30, avg_gain=0.0)]); p.skills.append(mk("X", frequency=30, avg_gain=0.3))
    p.maintain(None); assert len(p) == 2                    # same name under capacity: both stay (repo)
    v = SkillPool(max_size=2, seeds=[mk("Base_v1", "IF a", frequency=30, avg_gain=0.1, maturity=4), mk("Base_v2", "IF b", frequency=30, avg_gain=0.2, maturity=4),
                                     mk("Other", "IF c", frequency=30, avg_gain=0.05, maturity=4)])
    v.maintain(None); assert v.names() == ["Base_v2", "Other"]        # outdated version removed
    f = SkillPool(max_size=2, seeds=[mk(n) for n in "PQRS"]); log = f.maintain_fifo()
    assert f.names() == ["R", "S"] and [l["name"] for l in log] == ["P", "Q"]

def test_pool_never_exceeds_capacity_after_maintenance():
    rng = np.random.default_rng(0)
    for trial in range(30):
        n, cap = rng.integers(1, 25), int(rng.integers(1, 11))
        skills = [Skill(f"S{rng.integers(0, 8)}_v{rng.integers(0, 3)}", f"IF {PRED_TEXT[rng.integers(len(PRED_TEXT))]}", ["Stay calm and focused."],
                        frequency=int(rng.integers(0, 120)), avg_gain=float(rng.normal(0, 0.2)), maturity=int(rng.integers(0, 8))) for _ in range(n)]
        p = SkillPool(max_size=cap, seeds=[])
        for sk in skills: p.add(sk)                         # repeated names become the next free version
        p.maintain(lambda ts: np.array([[hash(t) % 7 == k for k in range(7)] for t in ts], float) + 1e-3)
        assert len(p) <= cap

def test_bad_input():
    with pytest.raises(ValueError, match="empty policy"): Skill("E", "IF x", [])
    with pytest.raises(ValueError, match="empty policy"): Skill("E", "IF x", ["  "])
    with pytest.raises(ValueError, match="unknown ablation"): SkillEvolution(SimCritic(), None, ablation="wo_all")
    with pytest.raises(ValueError, match="max_size"): SkillPool(max_size=0)
    with pytest.raises(ValueError, match="mode"): run_skill_mdp(ENV, POL, SkillPool(), mode="X")
    with pytest.raises(ValueError, match="tau"): SimLLM(tau=0)
    with pytest.raises(ValueError, match="N >= 2"): HigherLower(1)

def test_bad_shapes_and_ranges():
    S = ENV.reset(np.array([3, 5]))
    with pytest.raises(ValueError, match=r"one guess per episode, shape \(2,\)"): ENV.step(S, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"guesses must lie in 1\.\.32"): ENV.step(S, np.array([0, 40]))
    with pytest.raises(ValueError, match=r"actions must be \(2,\) guesses in 1\.\.32"): POL.logprob(S, None, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match=r"actions must be \(2,\) guesses in 1\.\.32"): POL.logprob(S, None, np.array([0, 33]))
    with pytest.raises(ValueError, match="n must be >= 1"): exact_return(ENV, POL, None, n=0)

# ---- SimLLM, determinism ---------------------------------------------------------------------------
def test_simllm_sanity():
    S = ENV.step(ENV.reset(np.array([20, 7, 30, 3])), np.array([16, 9, 31, 3]))
    for skill in (None, mk("R", policy=INSTRUCTIONS[:5])):
        P = POL.probs(S, skill); assert np.allclose(P.sum(1), 1)
        a = np.array([1, 2, 30, 4]); assert np.allclose(POL.logprob(S, skill, a), np.log(P[np.arange(4), a - 1]))
    v = skill_value(ENV, POL, n=600)
    base = exact_return(ENV, POL, None, n=600)
    assert v(mk("h", policy=[instruction("middle", 1)])) > base + 0.2
    assert v(mk("h", policy=[instruction("interval", 1)])) > base + 0.1
    assert v(mk("b", policy=[instruction("same", 1)])) < base - 0.05
    assert v(mk("n", policy=["Stay calm and focused."])) == pytest.approx(base)

def _run(seed):
    pool = SkillPool(); truth = skill_value(ENV, POL, n=200)
    evo = SkillEvolution(SimCritic(seed=seed), POL.logprob, truth_fn=truth, seed=seed)
    out = run_skill_mdp(ENV, POL, pool, evo, iters=10, episodes_per_iter=5, embed_fn=toy, seed=seed,
                        eval_fn=lambda p: exact_return(ENV, POL, p, n=200))
    return pool.snapshot(), [r["exact"] for r in out["history"]], [(l["candidate"], l["J"], l["accepted"]) for r in out["history"] for l in r["evolution"]]

def test_determinism():
    a, b = _run(4), _run(4)
    assert a == b and len(a[2]) > 0
    assert _run(5)[1] != a[1]

def test_thread_independent():
    assert_thread_independent("""
import numpy as np
from maspob_etal.skillpro import *
env, pol = HigherLower(32, 8), SimLLM()
pool = SkillPool()
evo = SkillEvolution(SimCritic(seed=1), pol.logprob, truth_fn=skill_value(env, pol, n=200), seed=1)
out = run_skill_mdp(env, pol, pool, evo, iters=5, episodes_per_iter=5, seed=1, eval_fn=lambda p: exact_return(env, pol, p, n=200),
                    embed_fn=lambda ts: np.array([[len(t) % 5 == k for k in range(5)] for t in ts], float) + 1e-3)
result = [r["exact"] for r in out["history"]] + [l["J"] for r in out["history"] for l in r["evolution"]]
""")

def test_evolution_gate_decisions():
    pool = SkillPool(); truth = skill_value(ENV, POL, n=200)
    _, _, _, eps = play(ENV, POL, pool, make_streams(ENV, 40, 2), eps=0.3, record=True)
    for e in eps:
        for s, c in e.calls: s.update_stats(e.ret, 0.3, sum(x for _, x in e.calls), c)
    n0 = len(pool)
    evo = SkillEvolution(SimCritic(seed=2), POL.logprob, truth_fn=truth, seed=2)
    logs = evo.step(pool, eps, 0.3, t=5)
    assert len(logs) == 2 and len(pool) == n0 + sum(l["accepted"] for l in logs)
    assert [l["accepted"] for l in logs] == [l["J"] > 0 for l in logs]
    for l in logs:                                           # the logged J is the gate on the recorded batch
        parent = next(s for s in pool.skills if s.name == l["parent"])
        if l["accepted"]: assert parent.buffer == [] and parent.last_evolved_iter == 5
        else: assert len(parent.buffer) == 3
    strict = SkillEvolution(SimCritic(seed=2), POL.logprob, margin=1e9, seed=2)   # rejects everything
    pool2 = SkillPool(); _, _, _, eps2 = play(ENV, POL, pool2, make_streams(ENV, 40, 2), eps=0.3, record=True)
    logs2 = strict.step(pool2, eps2, 0.3, t=5)
    assert len(logs2) == 2 and not any(l["accepted"] for l in logs2) and len(pool2) == 6
    for l in logs2:                                          # a rejected parent keeps its newest threshold // 2 episodes
        parent = next(s for s in pool2.skills if s.name == l["parent"])
        assert len(parent.buffer) == 3 and parent.buffer[-1] is [e for e in eps2 if any(s is parent for s, _ in e.calls)][-1]

# ---- the defects a user meets: free text, names, argument order ------------------------------------
def test_free_text_step_warns_and_has_no_effect():
    import warnings
    with pytest.warns(SkillStepWarning, match="no effect"):
        v = rule_vector(mk("F", policy=["Bisect the range like a binary search (test_free_text)."]))
    assert not v.any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")                       # understood steps and generic advice are silent
        assert rule_vector(mk("G", policy=[instruction("middle", 1), "Stay calm and focused."])).tolist() == \
            [0, 1, 0, 0, 0, 0, 0, 0, 0]
    assert parse_step("2. Never guess at the edges of the range") == ("edges", -1)
    assert parse_step("Do not make guesses equal to your last guess") == ("same", -1)

def test_pool_names_stay_unique():
    pool = SkillPool(seeds=[mk("Bisect")])
    assert [pool.add(mk("Bisect_v1", version=1)).name for _ in range(3)] == ["Bisect_v1", "Bisect_v2", "Bisect_v3"]
    assert pool.add(mk("Other")).name == "Other" and pool.add(mk("Other")).name == "Other_v1"
    with pytest.raises(ValueError, match="unique"): SkillPool(seeds=[mk("A"), mk("A")])
    # end to end: every candidate accepted, so repeated refinements of one parent would share a name without add()
    pool = SkillPool(); evo = SkillEvolution(SimCritic(seed=3), POL.logprob, ablation="wo_ppo", seed=3)
    out = run_skill_mdp(ENV, POL, pool, evo, iters=12, episodes_per_iter=5, maintenance="none", seed=3)
    accepted = [l["candidate"] for r in out["history"] for l in r["evolution"]]
    assert len(accepted) >= 6 and len(set(accepted)) == len(accepted) and len(set(pool.names())) == len(pool)

def test_logprob_argument_order_is_one():
    import inspect
    assert list(inspect.signature(SimLLM.logprob).parameters)[1:] == list(inspect.signature(SmolPolicy.logprob).parameters)[1:]
    pool = SkillPool(); _, _, _, eps = play(ENV, POL, pool, make_streams(ENV, 40, 2), eps=0.3, record=True)
    seen = []
    def lp(S, skill, a):                                     # the documented order: (states, skill, actions)
        assert isinstance(S, dict) and isinstance(skill, Skill) and np.asarray(a).ndim == 1
        seen.append(skill.name); return POL.logprob(S, skill, a)
    logs = SkillEvolution(SimCritic(seed=2), lp, seed=2).step(pool, eps, 0.3, t=5)
    assert len(logs) == 2 and len(seen) == 2*(1 + 3)         # parent + 3 candidates per evolved parent
    logs2 = SkillEvolution(SimCritic(seed=2), POL.logprob, seed=2).step(SkillPool(), eps, 0.3, t=5)   # a policy's logprob as it is
    assert isinstance(logs2, list)

# ---- the critic does not know which instructions help (C1 is not built in) ------------------------------
def test_simllm_follows_prefer_and_avoid_alike():
    S = ENV.step(ENV.step(ENV.reset(np.array([20, 7, 30])), np.array([16, 9, 31])), np.array([24, 5, 28]))
    base = POL.logits(S, np.zeros((3, len(FEATURE_KEY))))
    for i, k in enumerate(FEATURE_KEY):
        up, down = (POL.logits(S, _rows(mk("x", policy=[instruction(k, p)]), 3)) - base for p in (1, -1))
        assert np.allclose(up, -down) and np.abs(up).max() > 0, k       # no instruction is favoured by the agent itself

def _trace(actions, h=20, active="Demo"):
    S, seq = ENV.reset(np.array([h])), []
    for a in actions: seq.append(S); S = ENV.step(S, np.array([a]))
    return Episode(cat_states(seq), np.array(actions), [active]*len(actions), float(S["ret"][0]), [])

def test_trace_salience_known_value():
    ep = _trace([16, 10, 16])                                # step 2 repeats the first guess, after two feedbacks
    D, z = trace_salience(ep)
    r = FEATURE_KEY.index("repeat")
    z_rep = [0.0, (0 - 1/32)/np.sqrt(1/32*31/32), (1 - 2/32)/np.sqrt(2/32*30/32)]   # past guesses: none, {16}, {16, 10}
    assert np.allclose(z[r], z_rep) and D[r] == pytest.approx(np.mean(z_rep))
    i = FEATURE_KEY.index("interval")                        # inside [17, 32] is half the guesses after "higher"
    assert np.allclose(z[i], [0.0, -1.0, -1.0])

def test_critic_writes_the_helpful_edit_of_the_most_salient_wrong_feature():
    ep = _trace([16, 10, 16])
    c = lambda: SimCritic(q=1.0, p_remove=0.0, p_cond=0.0, seed=0)
    sk = mk("Demo", policy=(instruction("repeat", 1), "Think carefully before answering."))
    for b in (0.5, -1.0):                                    # the helpful edit does not depend on the outcome
        g = c().gradient(sk, ep, baseline=b)
        assert (g["add"], g["remove"]) == (instruction("repeat", -1), instruction("repeat", 1))
    good = mk("Demo", policy=[instruction(k, v) for k, v in HELPFUL.items()])
    assert helpful_edit(good, trace_salience(ep)[0]) == ("", "", None)      # nothing to fix: a random edit
    D = np.zeros(len(FEATURE_KEY)); D[FEATURE_KEY.index("far")] = 5.0
    assert helpful_edit(mk("F", policy=(instruction("far", 1),)), D) == ("", instruction("far", 1), FEATURE_KEY.index("far"))
    assert helpful_edit(mk("F"), D)[0] in {instruction(k, v) for k, v in HELPFUL.items()}  # far is right: next feature
    assert all(v > 0 for v in (lambda t: [t(mk("o", "", [instruction(k, v)])) - exact_return(ENV, POL, None, n=400)
                                          for k, v in HELPFUL.items()])(skill_value(ENV, POL, n=400)))   # each helps alone
    crit = SimCritic(q=0.0, seed=1)                          # q = 0: uniform over all 18 instructions
    adds = Counter(crit.gradient(mk("Demo"), ep)["add"] for _ in range(1800))
    assert set(adds) == set(INSTRUCTIONS) and max(adds.values()) < 2*min(adds.values())

def _realised_accuracy(q, sd, truth, n_eps=40, n_cand=5):
    "The notebook's measure: share of single candidates (no gate) on fixed seed-pool batches with a true gain."
    p = SkillPool()
    eps_ = play(ENV, POL, p, make_streams(ENV, n_eps, 777_000 + sd), eps=0.3, record=True)[3]
    b, evo, gains = float(np.mean([e.ret for e in eps_])), SkillEvolution(SimCritic(q=q, seed=sd), POL.logprob, seed=sd), []
    for s in p.skills:
        mine = [e for e in eps_ if any(x is s for x, _ in e.calls)]
        if len(mine) >= 6:
            batch = success_failure_batch(mine, 6)
            gains += [truth(evo.candidate(s, batch, b)[0]) - truth(s) for _ in range(n_cand)]
    return float((np.array(gains) > 0).mean())

def test_realised_accuracy_rises_with_the_knob_and_spans_the_regime():
    truth = skill_value(ENV, POL, n=400)
    acc = [np.mean([_realised_accuracy(q, sd, truth) for sd in (0, 1)]) for q in (0.0, 0.5, 1.0)]
    assert np.all(np.diff(acc) > 0), acc                    # rises with q
    assert acc[-1] - acc[0] >= 0.3 and acc[0] < 0.5 and acc[-1] > 0.9, acc   # from near chance to near 1

NB = pathlib.Path(__file__).parents[1] / "nbs" / "07_skillpro.ipynb"

def _nb_source():
    import json
    return "\n".join("".join(c["source"]) for c in json.loads(NB.read_text())["cells"] if c["cell_type"] == "code")

def test_transfer_shortcut_is_c1s_shortcut():
    src = _nb_source()
    assert 'wo_sd = runs["wo_ppo", cfg.qs[0], sd]["pool"]' in src      # C1's shortcut arm: wo_ppo at q = qs[0]
    assert 'B_wo=exact_return(env, polB, wo_sd' in src and 'N64_wo=exact_return(env64, pol, wo_sd' in src
    assert 'shortcut=rand_sc + ", transferred the same way", shortcut_values=two("wo")' in src
    assert 'rand_sc = "wo_ppo at q=0' in src

def test_claims_are_merged():
    import json
    led = json.loads((pathlib.Path(__file__).parents[1] / "results" / "skillpro.smoke.json").read_text())
    ids = [c["id"] for c in led["claims"]]
    assert ids == ["C1@0", "C1@0.5", "C1@1", "C2", "C7", "C3", "C4", "C5", "C6"], ids
    src = _nb_source()
    assert "q_claims = list(dict.fromkeys((cfg.qs[0], cfg.qs[len(cfg.qs)//2], cfg.qs[-1])))" in src
    assert "for q in q_claims:" in src and "for b in cfg.budgets[:1]:" in src
    assert 'claims.append(Claim("C5",' in src and "C5a" not in src and "C5b" not in src

# ---- Track B: real LLM log-probs ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol():
    from maspob_etal.models import load_causal_lm
    torch.set_num_threads(2)
    m, t = load_causal_lm(None)
    return SmolPolicy(model=m, tok=t)

def _manual(model, tok, prompt, action):
    x, y = tok(prompt, add_special_tokens=False)["input_ids"], tok(action, add_special_tokens=False)["input_ids"]
    with torch.no_grad(): logits = model(input_ids=torch.tensor([x + y])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return float(np.mean([lp[len(x) - 1 + j, y[j]].item() for j in range(len(y))])), len(y)

def test_action_logprobs_match_manual_gather_and_transition_scores(smol):
    prompts = ["Guess a number from 1 to 16. Last guess 3 was too low. My guess is ",   # short raw prompts keep this test fast
               "Hidden number game, range 1-16. Answer:"]
    actions = ["12 because it is the middle", "7"]                       # a multi-token and a one-token action, padded together
    got = action_logprobs(smol.model, smol.tok, prompts, actions)
    for g, p, a in zip(got, prompts, actions):
        want, n_tok = _manual(smol.model, smol.tok, p, a)
        assert abs(g - want) < 1e-4
    assert _manual(smol.model, smol.tok, prompts[0], actions[0])[1] > 3
    x = smol.tok(prompts[0], add_special_tokens=False)["input_ids"]; y = smol.tok(actions[0], add_special_tokens=False)["input_ids"]
    out = smol.model.generate(input_ids=torch.tensor([x]), attention_mask=torch.ones(1, len(x), dtype=torch.long), max_new_tokens=len(y),
                              do_sample=False, prefix_allowed_tokens_fn=lambda b, ids: [y[len(ids) - len(x)]], output_logits=True,
                              return_dict_in_generate=True, pad_token_id=smol.tok.pad_token_id, temperature=None, top_p=None, top_k=None)
    assert out.sequences[0, len(x):].tolist() == y
    ts = smol.model.compute_transition_scores(out.sequences, out.logits, normalize_logits=True)
    assert abs(ts[0].float().mean().item() - got[0]) < 1e-3      # incremental decoding with a KV cache: float noise only
    acts = ["12 because it is the middle", "7", "13"]
    assert np.allclose(shared_prompt_logprobs(smol.model, smol.tok, prompts[0], acts), action_logprobs(smol.model, smol.tok, [prompts[0]]*3, acts), atol=1e-4)

def test_real_llm_gate_sanity(smol):
    env = HigherLower(16, 5)
    s0 = env.reset(np.array([7])); s1 = env.step(s0, np.array([3])); s2 = env.step(s1, np.array([12]))
    S, a = cat_states([s0, s1, s2]), np.array([7, 7, 7])
    parent = mk("Careful", "IF you are playing the number guessing game")
    lp = {k: smol.logprob(S, parent.copy(policy=[k]) if k else parent, a) for k in (None, "Always answer 7.", "Never answer 7.")}
    J = {k: ppo_gate_score(v, lp[None], [1.0]*3, 0.3, [1]*3) for k, v in lp.items()}
    assert J["Always answer 7."] > J[None]
    assert lp["Always answer 7."].mean() > lp[None].mean()
    # "Never answer 7." > unchanged is what SmolLM2-135M does (it is primed by the number): recorded in the notebook, not asserted

# ---- one of the paper's games through TextArena (optional package) ------------------------------------
def test_mastermind_pegs_and_agent():
    assert mastermind_pegs([1, 2, 3, 4], [4, 6, 1, 2]) == (0, 3) and mastermind_pegs([4, 6, 2, 1], [4, 6, 1, 2]) == (2, 2)
    obs = "[GAME] Submitted [1 2 3 4]. Feedback: 0 black peg(s), 3 white peg(s).\n[GAME] Submitted [2 1 4 5]. Feedback: 0 black peg(s), 3 white peg(s)."
    rng = np.random.default_rng(0)
    for _ in range(20):                                      # the skill only ever proposes codes that fit what it read
        g = [int(x) for x in mastermind_agent(obs, rng, consistent=True).strip("[]").split()]
        assert mastermind_pegs([1, 2, 3, 4], g) == (0, 3) and mastermind_pegs([2, 1, 4, 5], g) == (0, 3)

def test_textarena_mastermind_runs_offline():
    pytest.importorskip("textarena")
    res = play_textarena(lambda o, r: mastermind_agent(o, r, consistent=True), 2, seed=0)
    assert all(reward == 1.0 and turns <= 20 for reward, turns in res)
