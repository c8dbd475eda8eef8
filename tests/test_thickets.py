"Tests of maspob_etal.thickets (RandOpt / Neural Thickets): perturbations, selection, voting, ES, fine-tuning baselines, the 1D toy, LLM scoring, thread independence."
import numpy as np
import pytest
import scipy.stats
import torch
from hypothesis import given, settings, strategies as st
from torch import nn
import pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.thickets import (ChoiceTask, Curves, NoiseTable, SignalMLP, choice_predict, choice_reward, density_sweep,
                                  es_finetune, es_update_, evaluate_population, expert_density, finetune_choice,
                                  finetune_regression, fixed_answer, llm_experiment, llm_items, majority_vote,
                                  make_category_task, make_compare_task, make_signals, mean_ensemble, neg_mse, param_noise,
                                  perturb_, population_rollout, pretrain_levels, pretrain_signal_mlp, randopt,
                                  randopt_regression, restore_, rollout, rollout_predict, run_jobs, sample_population,
                                  pick_on_train, select_members, select_top_k, snapshot, specialization_index, tensor_seed,
                                  weight_rms)


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer
    from maspob_etal.models import _smollm2_cache, load_causal_lm
    if not (_smollm2_cache()/"config.json").exists(): load_causal_lm()   # converts the GGUF once
    t = AutoTokenizer.from_pretrained(_smollm2_cache(), local_files_only=True)
    t.pad_token = t.pad_token or t.eos_token
    return t

@pytest.fixture(scope="module")
def tiny_llama(tok):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=256, pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg).eval()

# --- perturbations -----------------------------------------------------------------------------------------------

def test_restore_is_bitwise_exact(tiny_llama):
    base = snapshot(tiny_llama)
    for s, sig in [(1, 1e-3), (2, 0.5), (3, 1e-7)]:
        perturb_(tiny_llama, s, sig)
        assert not all(torch.equal(p, base[k]) for k, p in tiny_llama.named_parameters())
        restore_(tiny_llama, base)
        assert all(torch.equal(p, base[k]) for k, p in tiny_llama.named_parameters())

def test_perturbation_is_deterministic_and_seed_dependent(tiny_llama):
    base = snapshot(tiny_llama)
    w = lambda: {k: p.detach().clone() for k, p in tiny_llama.named_parameters()}
    perturb_(tiny_llama, 5, 1e-2); a = w(); restore_(tiny_llama, base)
    perturb_(tiny_llama, 5, 1e-2); b = w(); restore_(tiny_llama, base)
    perturb_(tiny_llama, 6, 1e-2); c = w(); restore_(tiny_llama, base)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(not torch.equal(a[k], c[k]) for k in a)

def test_noise_independent_across_same_shaped_tensors_unless_official(tiny_llama):
    names = [n for n, _ in tiny_llama.named_parameters()]
    j0, j1 = names.index("model.layers.0.mlp.up_proj.weight"), names.index("model.layers.1.mlp.up_proj.weight")
    p = dict(tiny_llama.named_parameters())["model.layers.0.mlp.up_proj.weight"]
    e0, e1 = param_noise(p, 9, j0).flatten(), param_noise(p, 9, j1).flatten()
    assert abs(np.corrcoef(e0.numpy(), e1.numpy())[0, 1]) < 0.05
    assert torch.equal(param_noise(p, 9, j0, official_seeding=True), param_noise(p, 9, j1, official_seeding=True))
    # and through perturb_: the official quirk moves both layers identically
    base = snapshot(tiny_llama)
    perturb_(tiny_llama, 9, 0.1, official_seeding=True)
    q = dict(tiny_llama.named_parameters())
    d0 = q["model.layers.0.mlp.up_proj.weight"] - base["model.layers.0.mlp.up_proj.weight"]
    d1 = q["model.layers.1.mlp.up_proj.weight"] - base["model.layers.1.mlp.up_proj.weight"]
    assert torch.allclose(d0, d1, atol=1e-6)
    restore_(tiny_llama, base)

def test_noise_scale_is_sigma():
    lin = nn.Linear(1000, 1000)
    base = snapshot(lin)
    perturb_(lin, 3, 0.01)
    z = ((lin.weight - base["weight"])/0.01).detach()
    assert abs(z.std().item() - 1) < 0.01 and abs(z.mean().item()) < 0.01
    assert tensor_seed(3, 0) != tensor_seed(3, 1) and tensor_seed(3, 0, True) == tensor_seed(3, 1, True) == 3

def test_skip_prefixes_and_bad_sigma():
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    base = snapshot(m)
    perturb_(m, 1, 0.1, skip_prefixes=("0.",))
    assert torch.equal(m[0].weight, base["0.weight"]) and not torch.equal(m[1].weight, base["1.weight"])
    with pytest.raises(ValueError, match="sigma must be a finite number >= 0"): perturb_(m, 1, -0.1)
    with pytest.raises(ValueError, match="sigma must be"): perturb_(m, 1, float("nan"))
    with pytest.raises(ValueError, match="pass snapshot"): restore_(m, {})

# --- voting and selection ----------------------------------------------------------------------------------------

def test_majority_vote_known_values():
    assert majority_vote([["a", "b", "b"], ["a", "c", None]]) == ["a", "b", "b"]
    assert majority_vote([[None, ""], [None, None]]) == [None, None]
    assert majority_vote([["c"], ["d"], ["d"], ["c"]]) == ["c"]                       # 2-2 tie: first-ranked wins
    with pytest.raises(ValueError, match="answers is empty"): majority_vote([])

@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4).map(lambda h: 2*h + 1), st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_majority_vote_agrees_with_scipy_mode(K, V, s):
    X = np.random.default_rng(s).integers(0, V, size=(K, 60))
    cnt = np.stack([(X == v).sum(0) for v in range(V)])
    X = X[:, (cnt == cnt.max(0)).sum(0) == 1]                                          # tie-free items only
    if X.shape[1] == 0: return
    assert majority_vote(X.tolist()) == scipy.stats.mode(X, axis=0).mode.tolist()

def test_selection_is_sorted_and_stable():
    r = [0.3, 0.7, 0.7, 0.1, 0.7, 0.3]
    assert select_top_k(r).tolist() == [1, 2, 4, 0, 5, 3]
    assert select_top_k(r, 2).tolist() == [1, 2]
    with pytest.raises(ValueError, match="K must be between 1 and N=6"): select_top_k(r, 7)

def _lin_task():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(80, 4, generator=g); y = (X[:, 0] - X[:, 1] > 0).long()
    predict = lambda m, items: m(items[0]).argmax(1).tolist()
    reward = lambda preds, items: (torch.tensor(preds) == items[1]).float().numpy()
    return nn.Linear(4, 2), predict, reward, [X[:40], y[:40]], [X[40:], y[40:]]

def test_randopt_selection_topk_and_K_equals_N():
    m, predict, reward, tr, te = _lin_task()
    before = snapshot(m)
    r = randopt(m, predict, reward, tr, te, N=10, sigmas=[0.2, 0.5], top_k=[1, 4, 10], seed=3)
    assert all(torch.equal(p, before[k]) for k, p in m.named_parameters())               # left unchanged
    rew = [c.reward for c in r["candidates"]]
    assert rew == sorted(rew, reverse=True) and len(rew) == 10
    assert {c.seed for c in r["candidates"][:4]} <= set(r["seeds"].tolist())
    # K = N: the vote over every member, recomputed by hand
    answers = []
    for c in r["candidates"]:
        perturb_(m, c.seed, c.sigma); answers.append(predict(m, te)); restore_(m, before)
    assert r["ensemble_test"][10] == pytest.approx(reward(majority_vote(answers), te).mean())
    assert r["ensemble_test"][1] == r["top1_test"]
    assert set(r["sigma_mean"]) <= {0.2, 0.5} and r["best_sigma"] in r["sigma_mean"]


def test_signal_mlp_refuses_inputs_of_the_wrong_width_and_bad_sizes():
    net = SignalMLP(ctx=10, width=8, depth=3, seed=0)
    assert net(torch.zeros(4, 10)).shape == (4,)
    for x in (torch.zeros(4, 9), torch.zeros(10, 4), torch.zeros(())):
        with pytest.raises(ValueError, match=r"SignalMLP expects the last 10 values of each curve, inputs of shape \(\.\.\., 10\)"):
            net(x)
    for kw in (dict(ctx=0), dict(width=0), dict(width=-3)):
        with pytest.raises(ValueError, match="ctx and width must be >= 1"): SignalMLP(**kw)

def test_randopt_bad_input():
    m, predict, reward, tr, te = _lin_task()
    with pytest.raises(ValueError, match="between 1 and N=3"): randopt(m, predict, reward, tr, te, N=3, sigmas=[0.1], top_k=[5])
    with pytest.raises(ValueError, match="sigma must be"): randopt(m, predict, reward, tr, te, N=3, sigmas=[-1e-3], top_k=[1])
    with pytest.raises(ValueError, match="train is empty"): randopt(m, predict, reward, [], te, N=3, sigmas=[0.1], top_k=[1])
    with pytest.raises(ValueError, match="test is empty"): randopt(m, predict, reward, tr, [], N=3, sigmas=[0.1], top_k=[1])
    with pytest.raises(ValueError, match="ensemble must be"): randopt(m, predict, reward, tr, te, N=3, sigmas=[0.1], ensemble="max")
    with pytest.raises(ValueError, match="N must be"): sample_population(0, [0.1])

def test_sample_population_matches_official_recipe():
    seeds, sig = sample_population(50, [5e-4, 1e-3, 2e-3], seed=42)
    rng = np.random.default_rng(42)
    assert seeds.tolist() == rng.choice(2**31, size=50, replace=False).tolist()
    assert sig.tolist() == rng.choice([5e-4, 1e-3, 2e-3], size=50).tolist()

# --- LLM path on a tiny random Llama --------------------------------------------------------------------------------

def test_sigma_zero_ensemble_equals_base(tok, tiny_llama):
    tr = ChoiceTask(tok, make_compare_task(6, seed=1, shots=0)); te = ChoiceTask(tok, make_category_task(6, seed=2, split="test"))
    r = randopt(tiny_llama, choice_predict, choice_reward, tr, te, N=3, sigmas=[0.0], top_k=[1, 3])
    assert r["ensemble_test"] == {1: r["base_test"], 3: r["base_test"]}
    assert np.allclose(r["rewards"], r["base_train"])

def test_choice_scores_agree_with_loglik(tok, tiny_llama):
    from maspob_etal.models import loglik
    items = make_compare_task(3, seed=0, shots=1) + make_category_task(3, seed=0)
    task = ChoiceTask(tok, items, batch_size=4)
    first = lambda c: c[0] if c.isdigit() else c                                       # "37" -> "3": one token, as scored
    ll = loglik(tiny_llama, tok, [it["prompt"] for it in items for _ in it["choices"]], [first(c) for it in items for c in it["choices"]])
    assert torch.allclose(task.scores(tiny_llama).flatten(), torch.tensor(ll, dtype=torch.float32), atol=1e-4)
    preds = task.predict(tiny_llama)
    assert all(p in it["choices"] for p, it in zip(preds, items))
    assert task.reward([it["answer"] for it in items]).tolist() == [1.0]*6
    assert task.reward([None]*6).tolist() == [0.0]*6

def test_choice_task_with_varying_number_of_choices(tok, tiny_llama):
    items = [dict(prompt="Q: Is a cow an animal or a vehicle?\nA:", choices=[" animal", " vehicle"], answer=" animal"),
             dict(prompt="Q: Pick one.\nA:", choices=[" animal", " vehicle", " tram"], answer=" tram")]
    task = ChoiceTask(tok, items)
    s = task.scores(tiny_llama)
    assert [len(x) for x in s] == [2, 3]
    assert all(p in it["choices"] for p, it in zip(task.predict(tiny_llama), items))

def test_choice_task_bad_input(tok):
    with pytest.raises(ValueError, match="share their first token"):
        ChoiceTask(tok, [dict(prompt="Q: 12 or 17?\nA: ", choices=["12", "17"], answer="17")])
    with pytest.raises(ValueError, match="not one of its choices"):
        ChoiceTask(tok, [dict(prompt="Q:", choices=[" a", " b"], answer=" c")])
    with pytest.raises(ValueError, match="items is empty"): ChoiceTask(tok, [])
    with pytest.raises(ValueError, match="needs keys"): ChoiceTask(tok, [dict(prompt="x")])

def test_es_runs_on_a_causal_lm_and_restores(tok, tiny_llama):
    tr = ChoiceTask(tok, make_category_task(4, seed=3, split="train"))
    base = snapshot(tiny_llama)
    margin = lambda s, task: (s[:, 0] - s[:, 1]).numpy()          # a continuous reward, so the population's rewards differ
    h = es_finetune(tiny_llama, lambda m, task: task.scores(m), margin, tr, sigma=1e-2, alpha=1e-2, population=3, iterations=2, seed=1)
    assert h["n_evals"] == 6 and len(h["mean_reward"]) == 2
    assert not all(torch.equal(p, base[k]) for k, p in tiny_llama.named_parameters())  # ES moved the weights
    restore_(tiny_llama, base)

def test_task_generators():
    for it in make_compare_task(50, seed=4, shots=2):
        a, b = map(int, it["choices"])
        assert a//10 != b//10 and it["answer"] == str(max(a, b)) and it["prompt"].endswith("A: ")
    tr, te = make_category_task(200, seed=0, split="train"), make_category_task(200, seed=0, split="test")
    words = lambda items: {it["prompt"].split("Is ")[1].split(" ")[1] for it in items}
    assert words(tr).isdisjoint(words(te))
    with pytest.raises(ValueError, match="split must be"): make_category_task(3, split="valid")

# --- ES, density ---------------------------------------------------------------------------------------------------

def test_es_update_known_value():
    m = nn.Linear(5, 3); th0 = snapshot(m)
    R = np.array([1.0, 0.0]); z = (R - R.mean())/(R.std() + 1e-8)                      # (+1, -1) up to 1e-8
    es_update_(m, [101, 202], z, alpha=0.2)
    for j, (k, p) in enumerate(m.named_parameters()):
        want = th0[k] + 0.2/2*(param_noise(p, 101, j) - param_noise(p, 202, j))
        assert torch.allclose(p.detach(), want, atol=1e-6)
    with pytest.raises(ValueError, match="one coefficient per seed"): es_update_(m, [1, 2], [1.0], 0.1)

def test_expert_density_and_specialization():
    assert expert_density([0.25, 0.5, 0.75, 1.0], 0.5) == 0.75
    assert expert_density([0.25, 0.5, 0.75, 1.0], 0.5, margin=0.25) == 0.5               # 0.75 >= 0.5 + 0.25 counts (>=)
    assert expert_density([0.5], 0.5) == 1.0
    with pytest.raises(ValueError, match="rewards is empty"): expert_density([], 0.0)
    with pytest.raises(ValueError, match="margin must be"): expert_density([0.1], 0.0, margin=-0.1)
    assert specialization_index(np.outer([1.0, -2.0, 0.5], np.arange(5.0))) == pytest.approx(0.0, abs=1e-12)
    assert specialization_index(np.eye(3)) == pytest.approx(0.5)

# --- 1D toy --------------------------------------------------------------------------------------------------------

def test_make_signals_hand_checked():
    x = -2.5 + 0.1*np.arange(70)
    assert torch.allclose(make_signals("one_sinusoid", 1).ctx[0], torch.tensor(0.5*np.sin(4*x[:10]), dtype=torch.float32), atol=1e-6)
    assert torch.allclose(make_signals("one_line", 1).fut[0], torch.tensor(-0.25*x[10:], dtype=torch.float32), atol=1e-6)
    assert torch.allclose(make_signals("one_squarewave", 1).fut[0], torch.tensor(0.3*np.tanh(5*np.sin(4*x[10:])), dtype=torch.float32), atol=1e-6)
    c = make_signals("line", 100, rng=0)
    y = torch.cat([c.ctx, c.fut], 1)
    assert torch.allclose(y[:, 1:] - y[:, :-1], (y[:, 1] - y[:, 0])[:, None].expand(-1, 69), atol=1e-5)  # straight lines
    s = make_signals("sinusoid", 2000, rng=1)
    assert 1.2 < float(torch.cat([s.ctx, s.fut], 1).max()) <= 1.7                       # amp <= 1.2, offset <= 0.5
    with pytest.raises(ValueError, match="unknown signal family"): make_signals("noise", 2)
    with pytest.raises(ValueError, match="must be >= 1"): make_signals("line", 0)

def test_rollout_and_mean_ensemble():
    m = SignalMLP(width=16, seed=1)
    c = make_signals("sinusoid", 5, fut=7, rng=2)
    with torch.no_grad(): assert torch.allclose(rollout(m, c.ctx, 1)[:, 0], m(c.ctx))
    r = rollout(m, c.ctx, 3)
    with torch.no_grad():
        y1 = m(c.ctx); y2 = m(torch.cat([c.ctx[:, 1:], y1[:, None]], 1))
    assert torch.allclose(r[:, 1], y2)
    p = rollout_predict(m, c)
    assert torch.allclose(mean_ensemble([p, p, p]), p)
    assert np.allclose(neg_mse(c.fut, c), 0)

def test_population_rollout_matches_loop_and_randopt_regression():
    m = SignalMLP(width=32, seed=0)
    c = make_signals("mixed", 6, fut=12, rng=3)
    pop = [(1, 0.01), (2, 0.03), (1, 0.0)]
    for a, b in zip(evaluate_population(m, pop, c, rollout_predict), population_rollout(m, pop, c, chunk=2)):
        assert torch.allclose(a, b, atol=1e-5)
    post, test = make_signals("sinusoid", 8, fut=12, rng=4), make_signals("sinusoid", 8, fut=12, rng=5)
    fast = randopt_regression(m, post, test, N=5, K=[1, 3], sigma=0.02, seed=1)
    slow = randopt(m, rollout_predict, neg_mse, post, test, N=5, sigmas=[0.02], top_k=[1, 3], seed=1, ensemble="mean")
    assert [c.seed for c in fast["candidates"]] == [c.seed for c in slow["candidates"]]
    assert fast["ensemble_mse"][3] == pytest.approx(-slow["ensemble_test"][3], rel=1e-4)
    assert fast["ensemble_mse"][1] == pytest.approx(fast["top1_mse"])

def test_density_sweep_sigma_zero_and_types():
    m = SignalMLP(width=16, seed=0)
    c = make_signals("sinusoid", 4, fut=5, rng=0)
    d = density_sweep(m, rollout_predict, neg_mse, c, [0.0, 0.05], M=3, margin=0.1, relative=True)
    assert d["density"][0.0] == 0.0 and 0.0 <= d["density"][0.05] <= 1.0
    with pytest.raises(TypeError, match="needs a SignalMLP"): next(population_rollout(nn.Linear(10, 1), [(1, 0.1)], c))
    with pytest.raises(ValueError, match="init must be"): SignalMLP(init="zeros")

# --- fine-tuning baselines, ES trajectory, formulas pinned -------------------------------------------------------------

def _adam_by_hand(params, grads_fn, steps, lr, b1=0.9, b2=0.999, eps=1e-8):
    "Adam written from its update rule (Kingma & Ba), with gradients from `grads_fn()`."
    m = [torch.zeros_like(p) for p in params]; v = [torch.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        gs = grads_fn()
        with torch.no_grad():
            for p, g, mi, vi in zip(params, gs, m, v):
                mi.mul_(b1).add_((1 - b1)*g); vi.mul_(b2).add_((1 - b2)*g*g)
                p.sub_(lr*(mi/(1 - b1**t))/((vi/(1 - b2**t)).sqrt() + eps))

@pytest.mark.parametrize("objective", ["next_value", "rollout"])
def test_finetune_regression_equals_adam_by_hand(objective):
    base = SignalMLP(width=16, seed=3)
    post = make_signals("sinusoid", 6, fut=9, rng=7)
    ours = SignalMLP(width=16, seed=3); ours.load_state_dict(base.state_dict())
    h = finetune_regression(ours, post, steps=4, lr=3e-3, objective=objective)
    ref = SignalMLP(width=16, seed=3); ref.load_state_dict(base.state_dict())
    y = torch.cat([post.ctx, post.fut], 1)
    def loss_fn(net):
        if objective == "next_value":                                   # every window, written out one by one
            return sum((net(y[i:i+1, t:t+10])[0] - y[i, t+10])**2 for i in range(6) for t in range(9))/(6*9)
        ctx, ys = post.ctx, []
        for _ in range(9):                                              # the rollout, written out again
            yh = net(ctx); ys.append(yh); ctx = torch.cat([ctx[:, 1:], yh[:, None]], 1)
        return ((torch.stack(ys, 1) - post.fut)**2).sum()/(6*9)
    l0 = loss_fn(ref).item()
    _adam_by_hand(list(ref.parameters()), lambda: torch.autograd.grad(loss_fn(ref), list(ref.parameters())), 4, 3e-3)
    for a, b in zip(ours.parameters(), ref.parameters()): assert torch.allclose(a, b, atol=1e-6)
    assert h["rollout_evals"] == 12 and len(h["loss"]) == 4 and h["loss"][-1] < h["loss"][0]
    assert h["loss"][0] == pytest.approx(l0, rel=1e-5)
    with pytest.raises(ValueError, match="lr must be"): finetune_regression(ours, post, 1, lr=0.0)
    with pytest.raises(ValueError, match="objective must be"): finetune_regression(ours, post, 1, objective="bptt")

def test_finetune_choice_is_sft_on_the_answer_token(tok, tiny_llama):
    task = ChoiceTask(tok, make_category_task(6, seed=5, split="train"), batch_size=4)   # two batches: accumulation matters
    for it, a in zip(task.items, task.answer_tok):                      # the first token of the right answer
        P = tok(it["prompt"], add_special_tokens=False)["input_ids"]
        assert tok(it["prompt"] + it["answer"], add_special_tokens=False)["input_ids"][len(P)] == int(a)
    base = snapshot(tiny_llama)
    def full_loss(model):                                               # one prompt at a time, no padding, no batching
        ls = []
        for it, a in zip(task.items, task.answer_tok):
            ids = torch.tensor([tok(it["prompt"], add_special_tokens=False)["input_ids"]])
            ls.append(torch.nn.functional.cross_entropy(model(input_ids=ids).logits[0, -1][None], a[None]))
        return torch.stack(ls).mean()
    want0 = full_loss(tiny_llama).item()
    params = [p for p in tiny_llama.parameters()]
    _adam_by_hand(params, lambda: torch.autograd.grad(full_loss(tiny_llama), params), 2, 1e-3)
    ref = {k: p.detach().clone() for k, p in tiny_llama.named_parameters()}
    restore_(tiny_llama, base)
    h = finetune_choice(tiny_llama, task, steps=2, lr=1e-3)
    assert h["loss"][0] == pytest.approx(want0, rel=1e-4) and h["item_forwards"] == 36
    for k, p in tiny_llama.named_parameters(): assert torch.allclose(p, ref[k], atol=2e-5), k
    assert all(p.grad is None for p in tiny_llama.parameters())
    restore_(tiny_llama, base)

def test_es_finetune_trajectory_equals_eq6_by_hand():
    "Two ES iterations of es_finetune against Eq. 6 written out: population seeds, z-scored rewards, noise per tensor."
    X = torch.randn(40, 4, generator=torch.Generator().manual_seed(0)); y = (X[:, 1] > 0).long()
    predict = lambda m, items: m(items[0]).detach()
    reward = lambda preds, items: -torch.nn.functional.cross_entropy(preds, items[1], reduction="none").numpy()
    m = nn.Linear(4, 2); th0 = snapshot(m)
    h = es_finetune(m, predict, reward, [X, y], sigma=0.05, alpha=0.1, population=4, iterations=2, seed=9)
    ref = nn.Linear(4, 2); restore_(ref, th0)
    rng = np.random.default_rng(9)
    for _ in range(2):
        seeds = rng.choice(2**31, size=4, replace=False).tolist()
        R = []
        for s in seeds:
            with torch.no_grad():
                W = {k: p + 0.05*param_noise(p, s, j) for j, (k, p) in enumerate(ref.named_parameters())}
            R.append(np.mean(reward(torch.nn.functional.linear(X, W["weight"], W["bias"]), [X, y])))
        R = np.array(R); z = (R - R.mean())/(R.std() + 1e-8)
        with torch.no_grad():
            for j, p in enumerate(ref.parameters()): p.add_(0.1/4*sum(zi*param_noise(p, s, j) for zi, s in zip(z, seeds)))
    for a, b in zip(m.parameters(), ref.parameters()): assert torch.allclose(a, b, atol=1e-6)
    assert h["n_evals"] == 8

def test_formulas_pinned_where_every_term_matters():
    c = Curves(torch.tensor([[0.0]]).expand(2, 1), torch.tensor([[1.0, 2.0, 3.0], [0.5, -0.5, 1.5]]))
    preds = torch.tensor([[1.5, 2.0, 2.0], [0.0, 0.0, 0.0]])
    assert np.allclose(neg_mse(preds, c), [-(0.25 + 0 + 1)/3, -(0.25 + 0.25 + 2.25)/3])
    M = np.array([[2.0, 0.0], [0.0, 2.0], [0.0, 0.0]])               # centred Gram matrix has eigenvalues 4 and 4/3 (s1 != 1)
    assert specialization_index(M) == pytest.approx(1 - 4/(16/3))
    assert expert_density([0.1, 0.3, 0.35, 0.6], base=0.2, margin=0.15) == 0.5
    m = nn.Linear(3, 2); th0 = snapshot(m)
    perturb_(m, 4, 0.3)
    for j, (k, p) in enumerate(m.named_parameters()): assert torch.allclose(p, th0[k] + 0.3*param_noise(p, 4, j))

def test_toy_randopt_and_finetuning_do_not_depend_on_the_thread_count():
    assert_thread_independent("""
import torch
torch.set_num_threads(1)          # as the notebook does on a CPU
from maspob_etal.thickets import SignalMLP, pretrain_signal_mlp, make_signals, randopt_regression, finetune_regression, rollout_predict, neg_mse
net = pretrain_signal_mlp(SignalMLP(seed=0), "mixed", iters=20, seed=0)
post, test = make_signals("sinusoid", 16, rng=1), make_signals("sinusoid", 16, rng=2)
r = randopt_regression(net, post, test, N=16, K=[1, 5], sigma=0.002, seed=0)
finetune_regression(net, post, steps=3)
result = [r["base_mse"], r["ensemble_mse"][5], r["top1_mse"], float(-neg_mse(rollout_predict(net, test), test).mean())]
""")


# --- the shared noise table ------------------------------------------------------------------------------------------

def test_noise_table_is_a_slice_per_member_and_is_never_written():
    m = SignalMLP(width=16, seed=0)
    tab = NoiseTable(m, slack=1000, seed=4); t0 = tab.table.clone()
    sizes = [p.numel() for p in m.parameters()]
    for j, p in enumerate(m.parameters()):                            # tensor j of member 7 starts at offset + sizes before j
        o = tab.offset(7) + sum(sizes[:j])
        assert torch.equal(param_noise(p, 7, j, noise_table=tab), tab.table[o:o + p.numel()].view(p.shape))
    assert tab.offset(7) != tab.offset(8) and 0 <= tab.offset(7) < 1000
    base = snapshot(m)
    perturb_(m, 7, 0.2, noise_table=tab)
    for j, (k, p) in enumerate(m.named_parameters()):
        assert torch.allclose(p, base[k] + 0.2*param_noise(p, 7, j, noise_table=tab), atol=1e-7)
    restore_(m, base)
    es_update_(m, [7, 8], [1.0, -1.0], alpha=0.1, noise_table=tab); restore_(m, base)
    c = make_signals("sinusoid", 3, fut=4, rng=0)
    loop = list(evaluate_population(m, [(7, 0.2), (8, 0.1)], c, rollout_predict, noise_table=tab))
    fast = list(population_rollout(m, [(7, 0.2), (8, 0.1)], c, noise_table=tab))
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(loop, fast))
    assert torch.equal(tab.table, t0)                                  # reading members never changes the table
    with pytest.raises(ValueError, match="build the NoiseTable from this same model"):
        param_noise(torch.zeros(5), 7, 0, noise_table=tab)
    big = NoiseTable(nn.Linear(300, 300), slack=10, seed=0)
    assert abs(big.table.std().item() - 1) < 0.01

# --- sigma picked on the training items, budgets, members without selection, changed answers -------------------------

def test_select_members_picks_sigma_by_eq_2b_within_the_budget():
    R = [0.9, 0.7, 0.1, 0.7, 0.2, 0.6, 0.95, 0.0]
    s = [1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]
    order, star = select_members(R, s, 2)
    assert star is None and order.tolist() == [6, 0, 1, 3, 5, 4, 2, 7]           # the official mixed pool
    order, star = select_members(R, s, 2, pick_sigma=True, n=6)                   # top-2 means 0.55 (sigma 1), 0.70 (sigma 2)
    assert star == 2.0 and order.tolist() == [1, 3, 5]
    order, star = select_members(R, s, 2, pick_sigma=True)                        # member 6 joins: 0.925 (sigma 1) wins
    assert star == 1.0 and order.tolist() == [6, 0, 4, 2]
    assert select_members(R, s, 3, pick_sigma=True, n=6)[1] == 2.0                # top-3 means 0.40 vs 0.67
    with pytest.raises(ValueError, match="no sigma has K=4"): select_members(R, s, 4, pick_sigma=True, n=6)
    with pytest.raises(ValueError, match="must be equal 1-D"): select_members(R, s[:3], 2)

def test_randopt_with_sigma_picked_budgets_unselected_and_changed():
    m, predict, reward, tr, te = _lin_task()
    before = snapshot(m)
    r = randopt(m, predict, reward, tr, te, N=12, sigmas=[0.05, 0.6], top_k=[1, 3], seed=5, pick_sigma=True, balanced=True,
                budgets=[6])
    assert r["sigmas"].tolist() == [0.05, 0.6]*6
    base_train = predict(m, tr)
    preds = []
    for sd, sg in zip(r["seeds"], r["sigmas"]):                                   # every member by hand
        perturb_(m, int(sd), float(sg)); preds.append((predict(m, tr), predict(m, te))); restore_(m, before)
    R = np.array([reward(p, tr).mean() for p, _ in preds])
    assert np.allclose(r["rewards"], R)
    assert np.allclose(r["changed"], [np.mean([a != b for a, b in zip(p, base_train)]) for p, _ in preds])
    for n in (6, 12):                                                             # sigma* and the vote, recomputed
        cand = {}
        for sg in (0.05, 0.6):
            idx = [i for i in range(n) if r["sigmas"][i] == sg]
            idx = sorted(idx, key=lambda i: -R[i])                                # stable: ties keep sampling order
            cand[sg] = (R[idx[:3]].mean(), idx)
        star = max(cand, key=lambda sg: (cand[sg][0], -sg))
        assert r["budget"][n]["sigma_star"] == star
        vote = majority_vote([preds[i][1] for i in cand[star][1][:3]])
        assert r["budget"][n]["ensemble_test"][3] == pytest.approx(reward(vote, te).mean())
    first3 = [i for i in range(12) if r["sigmas"][i] == r["sigma_star"]][:3]      # no selection: the first 3 of sigma*
    assert r["unselected"].tolist() == first3
    assert r["unselected_test"][3] == pytest.approx(reward(majority_vote([preds[i][1] for i in first3]), te).mean())
    assert all(torch.equal(p, before[k]) for k, p in m.named_parameters())

def test_budgets_are_prefixes_of_one_population():
    m, predict, reward, tr, te = _lin_task()
    full = randopt(m, predict, reward, tr, te, N=10, sigmas=[0.3], top_k=[2], seed=2, budgets=[4])
    small = randopt(m, predict, reward, tr, te, N=10, sigmas=[0.3], top_k=[2], seed=2)
    assert np.array_equal(full["rewards"], small["rewards"])
    order4 = select_top_k(full["rewards"][:4])                                    # only the first 4 members compete
    assert full["budget"][4]["order"].tolist() == order4.tolist()
    with pytest.raises(ValueError, match="every budget must be between"):
        randopt(m, predict, reward, tr, te, N=10, sigmas=[0.3], top_k=[2], budgets=[11])

# --- the LLM protocol on a tiny model ------------------------------------------------------------------------------------

def test_llm_experiment_on_a_tiny_llama(tok, tiny_llama):
    base = snapshot(tiny_llama)
    r = llm_experiment("category", seed=1, n_train=6, n_test=5, sigma_rel=(0.01, 0.3), B=3, K=(1, 2), budgets=(2,),
                       es_alphas=(1e-3, 1e-2), es_pop=3, ft_lrs=(1e-4, 1e-3), amp=False, model=tiny_llama, tok=tok)
    rms = weight_rms(tiny_llama)
    assert r["sigma_grid"] == pytest.approx([0.01*rms, 0.3*rms]) and r["sigma_star"] in r["sigma_grid"]   # scaled to the weights
    assert sorted(r["budget"]) == [2, 3] and len(r["rewards"]) == 6
    assert r["es_pick"] == max(r["es"], key=lambda a: r["es"][a]["train"])                  # picked on the training items
    assert r["ft_pick"] == max(r["ft"], key=lambda lr: r["ft"][lr]["train"])
    assert r["n_test"] == 5 and len(r["fixed_test_items"]) == 5
    assert all(torch.equal(p, base[k]) for k, p in tiny_llama.named_parameters())         # restored
    assert r["changed"].shape == (6,) and ((0 <= r["changed"]) & (r["changed"] <= 1)).all()

def test_bf16_autocast_runs_on_cpu(tok, tiny_llama):
    items = make_category_task(6, seed=2)
    s32, s16 = ChoiceTask(tok, items).scores(tiny_llama), ChoiceTask(tok, items, amp=True).scores(tiny_llama)
    assert not torch.equal(s32, s16) and torch.allclose(s32, s16, atol=0.1)      # bf16 numerics, not fp32

def test_weight_rms_fixed_answer_items_and_workers():
    lin = nn.Linear(2, 1)
    with torch.no_grad(): lin.weight.copy_(torch.tensor([[3.0, -4.0]])); lin.bias.fill_(1.0)
    assert weight_rms(lin) == pytest.approx(np.sqrt(26/3))
    tr = [dict(prompt="a", choices=[" x", " y"], answer=" y"), dict(prompt="b", choices=[" y", " x"], answer=" y"),
          dict(prompt="c", choices=[" x", " y"], answer=" y")]
    te = [dict(prompt="d", choices=[" x", " y"], answer=" x"), dict(prompt="e", choices=[" y", " x"], answer=" y")]
    name, items = fixed_answer(tr, te)
    assert name == "always 'y'" and items.tolist() == [0.0, 1.0]
    q = make_category_task(80, seed=3, split="train", unique=True)
    assert len({it["prompt"] for it in q}) == 80 and len(llm_items("category", 200, 0, "test")) == 80
    assert make_category_task(5, seed=0) == make_category_task(5, seed=0, unique=False)
    assert run_jobs(dict, [dict(a=1), dict(b=2), dict(c=3)], n_jobs=2) == [dict(a=1), dict(b=2), dict(c=3)]
    assert pick_on_train({"a": dict(train=0.5), "b": dict(train=0.75), "c": dict(train=0.75), "d": dict(train=0.25)}) == "b"
    with pytest.raises(ValueError, match="results is empty"): pick_on_train({})

# --- pretraining levels and fine-tuning budgets --------------------------------------------------------------------------

def test_pretrain_levels_are_copies_of_one_run():
    lv = pretrain_levels(SignalMLP(width=8, seed=2), [0, 3, 7], seed=5)
    solo = pretrain_signal_mlp(SignalMLP(width=8, seed=2), iters=7, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(lv[7].parameters(), solo.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(lv[0].parameters(), SignalMLP(width=8, seed=2).parameters()))
    seen = {}
    pretrain_signal_mlp(SignalMLP(width=8, seed=2), iters=7, seed=5, callback=lambda t, net: seen.setdefault(t, [q.clone() for q in net.parameters()]))
    assert all(torch.equal(a, b) for a, b in zip(lv[3].parameters(), seen[3]))
    with pytest.raises(ValueError, match="levels must be"): pretrain_levels(SignalMLP(width=8), [-1])

@pytest.mark.parametrize("objective", ["next_value", "rollout"])
def test_finetune_callback_gives_the_smaller_budgets(objective):
    post = make_signals("sinusoid", 5, fut=6, rng=1)
    a, b = SignalMLP(width=8, seed=1), SignalMLP(width=8, seed=1)
    seen = {}
    finetune_regression(a, post, steps=4, lr=1e-3, objective=objective,
                        callback=lambda t, m: seen.__setitem__(t, [q.detach().clone() for q in m.parameters()]))
    finetune_regression(b, post, steps=2, lr=1e-3, objective=objective)
    assert sorted(seen) == [1, 2, 3, 4] and all(torch.equal(x, y) for x, y in zip(seen[2], b.parameters()))
