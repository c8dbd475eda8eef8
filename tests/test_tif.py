"Property and known-value tests of maspob_etal.tif (the method card's section 6 and issue 18)."
import math, pathlib, sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

import maspob_etal.tif as tif_mod
from maspob_etal.tif import (
    DECOYS, TOY, ThoughtODE, TiFController, TinyCausalLM, add_lora, attach_tif, batch_fn, changed_share, decoder_layers,
    finetune_copy, free_running_correct, inject, last_number, lm_loss, logit_lens_entropy, lora_rank_for, lora_targets,
    make_distance_task, make_running_sum_task, make_word_problems, n_params, ode_step_errors, rms_norm, solution_nll,
    toy_accuracy, train_tif, train_toy_variant, word_problem_batches)

pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: see conftest


def gen(seed=0): return torch.Generator().manual_seed(seed)


def ode_with(m=6, in_dim=4, lam_min=0.3, rho=0.5, seed=0, **kw):
    "A ThoughtODE whose Lambda is spread out (every coordinate decays at its own rate)."
    torch.manual_seed(seed)
    ode = ThoughtODE(m, in_dim, lam_min, rho, **kw)
    with torch.no_grad(): ode.lam_raw.copy_(torch.randn(m, generator=gen(seed + 1))); ode.b.copy_(0.3*torch.randn(m, generator=gen(seed + 2)))
    return ode


@pytest.fixture(scope="module")
def llama():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


# ---------------------------------------------------------------- the ODE
def test_closed_form_when_recurrence_input_and_bias_vanish():
    ode = ode_with(rho=0.0)                              # rho = 0 makes W_z = 0
    with torch.no_grad(): ode.U.zero_(); ode.b.zero_()
    z = torch.randn(3, 6, generator=gen(3))
    torch.testing.assert_close(ode.step(z, torch.randn(3, 4, generator=gen(4)), dt=0.7), torch.exp(-ode.lam()*0.7)*z, rtol=0, atol=1e-7)


def test_expeuler_is_exact_for_a_constant_drive():
    "With W_z = 0 the field is linear in z with a constant drive: z(t) = e^{-lam t} z0 + (1 - e^{-lam t})/lam tanh(U u + b)."
    ode = ode_with(rho=0.0)
    z0, u = torch.randn(2, 6, generator=gen(5)), torch.randn(2, 4, generator=gen(6))
    lam, a = ode.lam(), torch.tanh(u @ ode.U.T + ode.b)
    exact = torch.exp(-lam*2.5)*z0 + (1 - torch.exp(-lam*2.5))/lam*a
    torch.testing.assert_close(ode.step(z0, u, dt=2.5), exact, rtol=0, atol=1e-6)


def test_non_dissipative_ablation_is_a_plain_euler_rnn():
    ode = ode_with(dissipative=False)
    assert torch.equal(ode.lam(), torch.zeros(6)) and ode.bound() == math.inf
    z, u = torch.randn(2, 6, generator=gen(7)), torch.randn(2, 4, generator=gen(8))
    torch.testing.assert_close(ode.step(z, u, dt=0.4), z + 0.4*torch.tanh(z @ ode.W_raw.T + u @ ode.U.T + ode.b), rtol=0, atol=1e-6)


def test_expeuler_agrees_with_torchdiffeq_and_is_second_order():
    tde = pytest.importorskip("torchdiffeq")
    ode = ode_with(lam_min=0.1)
    z0, u = torch.randn(3, 6, generator=gen(9)).double(), torch.randn(3, 4, generator=gen(10)).double()
    ode = ode.double()
    def ref(dt): return tde.odeint(lambda t, z: ode.rhs(z, u), z0, torch.tensor([0.0, dt], dtype=torch.double), method="rk4",
                                   options=dict(step_size=1e-3))[-1]
    with torch.no_grad(): err = {dt: float((ode.step(z0, u, dt) - ref(dt)).abs().max()) for dt in (0.01, 0.02)}
    assert err[0.01] < 1e-4
    assert 3.0 < err[0.02]/err[0.01] < 5.0               # local error O(dt^2): doubling dt quadruples it


def test_rk4_substeps_agree_with_dopri5():
    tde = pytest.importorskip("torchdiffeq")
    ode = ode_with(lam_min=0.1, solver="rk4", n_sub=4).double()
    z0, u = torch.randn(3, 6, generator=gen(11)).double(), torch.randn(3, 4, generator=gen(12)).double()
    ref = tde.odeint(lambda t, z: ode.rhs(z, u), z0, torch.tensor([0.0, 0.1], dtype=torch.double), method="dopri5", rtol=1e-10, atol=1e-12)[-1]
    assert float((ode.step(z0, u, 0.1) - ref).abs().max()) < 1e-5


@pytest.mark.parametrize("solver,dt", [("expeuler", 1.0), ("rk4", 0.1)])
def test_dissipativity_under_huge_inputs(solver, dt):
    ode = ode_with(m=8, in_dim=5, lam_min=0.1, solver=solver)
    u = 1e6*torch.randn(1000, 4, 5, generator=gen(13))
    z, z_big = torch.zeros(4, 8), 50*torch.randn(4, 8, generator=gen(14))
    linf0 = float(z_big.abs().max())
    with torch.no_grad():
        for ut in u:
            z, z_big = ode.step(z, ut, dt), ode.step(z_big, ut, dt)
            assert float(z.norm(dim=-1).max()) <= ode.bound() + 1e-5                  # l2 ball from z0 = 0
            if solver == "expeuler": assert float(z_big.abs().max()) <= max(linf0, 1/ode.lam_min) + 1e-6


def test_non_dissipative_state_escapes_the_ball():
    ode = ode_with(m=8, in_dim=5, lam_min=0.1, dissipative=False)
    z = torch.zeros(1, 8)
    with torch.no_grad():
        for ut in torch.ones(400, 1, 5): z = ode.step(z, 100*ut)
    assert float(z.norm()) > math.sqrt(8)/0.1


def test_discrete_contraction_factor():
    ode = ode_with(m=8, in_dim=5, lam_min=0.1)
    q = ode.contraction_factor(1.0)
    assert q == pytest.approx(math.exp(-0.1) + 0.05) and q < 1
    za, zb = torch.randn(5, 8, generator=gen(15)), torch.randn(5, 8, generator=gen(16))
    d0 = (za - zb).norm(dim=-1)
    with torch.no_grad():
        for t, u in enumerate(torch.randn(200, 5, 5, generator=gen(17))):
            za, zb = ode.step(za, u), ode.step(zb, u)
            assert ((za - zb).norm(dim=-1) <= q**(t + 1)*d0*(1 + 1e-4)).all()


def test_continuous_contraction_rate_with_torchdiffeq():
    tde = pytest.importorskip("torchdiffeq")
    ode = ode_with(m=6, in_dim=4, lam_min=0.5).double()
    c = ode.contraction_rate()
    assert c >= (1 - 0.5)*0.5 - 1e-9
    z0 = torch.randn(2, 6, generator=gen(18)).double(); u = torch.randn(1, 4, generator=gen(19)).double()
    ts = torch.linspace(0, 4, 9, dtype=torch.double)
    sol = tde.odeint(lambda t, z: ode.rhs(z, u), z0, ts, method="dopri5", rtol=1e-10, atol=1e-12)   # (9, 2, 6)
    gap = (sol[:, 0] - sol[:, 1]).norm(dim=-1)
    assert (gap <= torch.exp(-c*ts)*gap[0]*(1 + 1e-6)).all()


def test_spectral_constraint_after_training_steps():
    ode = ode_with(m=10, in_dim=4, lam_min=0.2, rho=0.7)
    opt = torch.optim.Adam(ode.parameters(), lr=0.05)
    for i in range(100):
        z = torch.randn(8, 10, generator=gen(100 + i)); u = torch.randn(8, 4, generator=gen(200 + i))
        loss = -ode.step(z, u).pow(2).sum()                                # pushes the state to grow
        opt.zero_grad(); loss.backward(); opt.step()
    W = ode.W_z().detach()
    power = torch.randn(10, generator=gen(1))
    for _ in range(500): power = W.T @ (W @ power); power = power/power.norm()
    sigma_pi = float((W @ power).norm())                                   # power iteration
    assert sigma_pi == pytest.approx(float(torch.linalg.matrix_norm(W, ord=2)), rel=1e-3)
    assert sigma_pi <= 0.7*0.2*(1 + 1e-3)


# ---------------------------------------------------------------- injection and gates
def test_injection_known_value():
    h, d = torch.tensor([[3.0, 4.0]]), torch.tensor([[1.0, 0.0]])
    out = inject(h, d, torch.tensor([0.5]), 0.1)                       # ||h|| = 5; RMSNorm(d) = (sqrt 2, 0)
    torch.testing.assert_close(out, torch.tensor([[3.25, 4.0]]), rtol=0, atol=1e-5)


def test_injection_bounds():
    h = 3*torch.randn(64, 24, generator=gen(20)) + 1
    d = torch.randn(64, 24, generator=gen(21)); d[:4] = 0
    g = torch.rand(64, generator=gen(22)); g[4:8] = 1
    dh = (inject(h, d, g, 0.2) - h).norm(dim=-1)
    assert (dh <= 0.2*h.norm(dim=-1) + 1e-6).all()
    torch.testing.assert_close(dh[4:8], 0.2*h[4:8].norm(dim=-1), rtol=1e-4, atol=0)   # the bound is reached with an open gate
    hn = inject(h, d, g, 0.2, "postnorm").norm(dim=-1)
    torch.testing.assert_close(hn, h.norm(dim=-1), rtol=1e-5, atol=0)
    for inj in ("additive", "postnorm"): assert torch.equal(inject(h, d, torch.zeros(64), 0.2, inj), h)


def test_rms_norm_known_value():
    torch.testing.assert_close(rms_norm(torch.tensor([[1.0, -3.0]]), eps=0.0), torch.tensor([[1.0, -3.0]])/math.sqrt(5.0))


def test_scan_gates_by_hand():
    "g_t = sigmoid(k(D_t - theta_D)) sigmoid(w_s z + b_s) and d_t = sigmoid(W_r[z; u] + b_r) * W_o z, recomputed from the logs."
    torch.manual_seed(1)
    ctl = TiFController(12, m=5, kappa=0.3, k=7.0, theta_D=0.4, b_s=0.5)
    h, ent = 2*torch.randn(2, 6, 12, generator=gen(23)) + 0.5, torch.rand(2, 6, generator=gen(24))
    h2, logs = ctl.scan(h, ent)
    Z, u = logs["z"], ctl.P(rms_norm(h))
    g = torch.sigmoid(7.0*(ent - 0.4))*torch.sigmoid(Z @ ctl.w_s.weight[0] + ctl.w_s.bias)
    torch.testing.assert_close(logs["g"], g, rtol=0, atol=1e-6)
    d = torch.sigmoid(torch.cat([Z, u], -1) @ ctl.W_r.weight.T + ctl.W_r.bias)*(Z @ ctl.W_o.weight.T)
    torch.testing.assert_close(h2, h + g[..., None]*0.3*h.norm(dim=-1, keepdim=True)/math.sqrt(12)*rms_norm(d), rtol=0, atol=1e-5)
    z = torch.zeros(2, 5)
    for t in range(6): z = ctl.ode.step(z, u[:, t])
    torch.testing.assert_close(logs["z_last"], z, rtol=0, atol=1e-6)


def test_ungated_and_forced_gates():
    h, ent = torch.randn(1, 4, 8, generator=gen(25)), torch.rand(1, 4, generator=gen(26))
    assert torch.equal(TiFController(8, m=3, gated=False).scan(h, ent)[1]["g"], torch.ones(1, 4))
    ctl = TiFController(8, m=3); ctl.force_gate = 0.0
    assert torch.equal(ctl.scan(h, ent)[0], h)


def test_do_no_harm_initialisation():
    ctl = TiFController(8, m=3)
    g = ctl.scan(torch.randn(2, 5, 8, generator=gen(27)), torch.ones(2, 5))[1]["g"]
    assert float(g.max()) < 0.03                                           # b_s = -4: S about 0.018


# ---------------------------------------------------------------- entropy
def test_logit_lens_entropy_manual_and_extremes(llama):
    h = torch.randn(2, 5, 32, generator=gen(28))
    with torch.no_grad(): p = llama.lm_head(llama.model.norm(h)).softmax(-1)
    torch.testing.assert_close(logit_lens_entropy(llama, h), -(p*p.log()).sum(-1)/math.log(61), rtol=0, atol=1e-5)

    class Probe(torch.nn.Module):
        def __init__(self, W):
            super().__init__(); self.norm, self.head = torch.nn.Identity(), torch.nn.Linear(4, 6, bias=False); self.head.weight.data = W
        def get_output_embeddings(self): return self.head
    assert torch.allclose(logit_lens_entropy(Probe(torch.zeros(6, 4)), torch.randn(1, 3, 4)), torch.ones(1, 3), atol=1e-6)
    assert torch.allclose(logit_lens_entropy(Probe(1e4*torch.eye(6, 4)), torch.eye(4)[None, :2]), torch.zeros(1, 2), atol=1e-6)


# ---------------------------------------------------------------- the hook on a Hugging Face model
def test_do_no_harm_bitwise_on_tiny_llama(llama):
    ids = torch.randint(61, (2, 10), generator=gen(29))
    with torch.no_grad(): ref = llama(ids).logits
    ctl = TiFController(32, m=4); ctl.force_gate = 0.0
    hd = attach_tif(llama, 0, ctl)
    with torch.no_grad(): closed = llama(ids).logits
    ctl.force_gate = 1.0; hd.reset()
    with torch.no_grad(): opened = llama(ids).logits
    hd.remove()
    with torch.no_grad(): removed = llama(ids).logits
    assert torch.equal(closed, ref) and torch.equal(removed, ref)
    assert float((opened - ref).abs().max()) > 1e-4


def test_causality_of_state_and_logits(llama):
    ctl = TiFController(32, m=4); ctl.force_gate = 1.0
    hd = attach_tif(llama, 1, ctl)
    ids = torch.randint(61, (1, 12), generator=gen(30)); ids2 = ids.clone(); ids2[0, 9] = (ids2[0, 9] + 5) % 61
    with torch.no_grad():
        hd.reset(); a = llama(ids).logits; za = hd.logs["z"].clone()
        hd.reset(); b = llama(ids2).logits; zb = hd.logs["z"].clone()
    hd.remove()
    assert torch.equal(a[:, :9], b[:, :9]) and torch.equal(za[:, :9], zb[:, :9])
    assert not torch.equal(za[:, 9:], zb[:, 9:])


def test_kv_cache_consistency(llama):
    ctl = TiFController(32, m=4, kappa=0.3); ctl.force_gate = 1.0
    hd = attach_tif(llama, 0, ctl)
    ids = torch.randint(61, (2, 11), generator=gen(31))
    with torch.no_grad():
        hd.reset(); full = llama(ids).logits
        hd.reset(); out = llama(ids[:, :4], use_cache=True); parts = [out.logits]
        for t in range(4, 11):
            out = llama(ids[:, t:t+1], past_key_values=out.past_key_values, use_cache=True); parts.append(out.logits)
    hd.remove()
    assert float((torch.cat(parts, 1) - full).abs().max()) < 1e-4


def test_left_padding_leaves_the_state_alone(llama):
    ctl = TiFController(32, m=4, kappa=0.3); ctl.force_gate = 1.0
    hd = attach_tif(llama, 0, ctl)
    ids = torch.randint(1, 61, (1, 7), generator=gen(32))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], 1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 7, dtype=torch.long)], 1)
    with torch.no_grad():
        hd.reset(); a = llama(ids).logits; za = hd.z.clone()
        hd.reset(); b = llama(padded, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp_min(0)).logits; zb = hd.z.clone()
    hd.remove()
    torch.testing.assert_close(zb, za, rtol=0, atol=1e-5)
    torch.testing.assert_close(b[:, 3:], a, rtol=0, atol=1e-4)


def test_bad_input_is_refused(llama):
    with pytest.raises(ValueError, match="outside the model's 2 decoder layers"): attach_tif(llama, 2, TiFController(32, m=4))
    with pytest.raises(ValueError, match="outside the model's 2 decoder layers"): attach_tif(llama, -1, TiFController(32, m=4))
    with pytest.raises(ValueError, match="d_model=16 but the model's hidden size is 32"): attach_tif(llama, 0, TiFController(16, m=4))
    with pytest.raises(ValueError, match="kappa must be > 0"): TiFController(32, kappa=0.0)
    with pytest.raises(ValueError, match="kappa must be > 0"): TiFController(32, kappa=-1.0)
    with pytest.raises(ValueError, match="lam_min must be > 0"): TiFController(32, lam_min=0.0)
    with pytest.raises(ValueError, match="lam_min must be > 0"): ThoughtODE(lam_min=-0.1)
    with pytest.raises(ValueError, match="rho must be in"): ThoughtODE(rho=1.0)
    with pytest.raises(ValueError, match="injection must be"): TiFController(32, injection="pre")
    with pytest.raises(ValueError, match=r"h must be \(B, T, 32\)"): TiFController(32, m=4).scan(torch.zeros(1, 3, 8), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="entropy must be"): TiFController(32, m=4).scan(torch.zeros(1, 3, 32), torch.zeros(1, 4))
    with pytest.raises(ValueError, match="steps must be"): train_tif(llama, None, lambda i: {}, -1, params=[torch.zeros(1, requires_grad=True)])
    with pytest.raises(ValueError, match="pool must be"): make_running_sum_task(3, pool="dev")
    with pytest.raises(ValueError, match="pool must be"): make_word_problems(3, pool="dev")
    with pytest.raises(ValueError, match="n must be a positive integer"): make_running_sum_task(-2)
    with pytest.raises(ValueError, match="n must be a positive integer"): make_word_problems(0)


def test_batch_size_change_without_reset_is_refused(llama):
    hd = attach_tif(llama, 0, TiFController(32, m=4))
    with torch.no_grad():
        llama(torch.randint(61, (2, 4), generator=gen(33)))
        with pytest.raises(RuntimeError, match="call reset"): llama(torch.randint(61, (3, 4), generator=gen(34)))
    hd.remove()


# ---------------------------------------------------------------- training, data, baseline
def test_lm_loss_known_value():
    logits = torch.randn(2, 4, 7, generator=gen(35)); labels = torch.tensor([[-100, 3, -100, 1], [-100, -100, 6, 2]])
    manual = [-F.log_softmax(logits[b, t - 1], -1)[labels[b, t]] for b in range(2) for t in range(1, 4) if labels[b, t] != -100]
    torch.testing.assert_close(lm_loss(logits, labels), torch.stack(manual).mean())


def test_training_lowers_the_loss():
    torch.manual_seed(0)
    base = TinyCausalLM(TOY.vocab_size, 32, 2)
    for p in base.parameters(): p.requires_grad_(False)
    data = make_running_sum_task(300, (3, 5), 0.15, seed=1, modulus=2)
    hd = attach_tif(base, 0, TiFController(32, m=8, kappa=0.5))
    res = train_tif(base, hd, batch_fn(data, 32, 0), 50, lr=1e-2)
    hd.remove()
    assert res["steps"] == 50 and np.mean(res["losses"][-5:]) < np.mean(res["losses"][:5]) - 0.05


def test_train_tif_trains_only_the_controller():
    torch.manual_seed(0)
    base = TinyCausalLM(TOY.vocab_size, 16, 1, 2)
    for p in base.parameters(): p.requires_grad_(False)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    ctl = TiFController(16, m=4); c0 = {k: v.clone() for k, v in ctl.state_dict().items()}
    hd = attach_tif(base, 0, ctl)
    train_tif(base, hd, batch_fn(make_running_sum_task(50, 3, 0.2, seed=2), 8, 0), 3, lr=1e-2)
    hd.remove()
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in before.items())
    assert any(not torch.equal(v, ctl.state_dict()[k]) for k, v in c0.items())


def test_running_sum_targets_and_disjoint_pools():
    d = make_running_sum_task(40, (2, 6), 0.4, seed=3, pool="test", modulus=7)
    for row in d["input_ids"]:
        toks = [int(t) for t in row if t != TOY.PAD and not t >= TOY.NOISE0]
        r = toks[1] - TOY.DIGIT0
        for j in range(2, len(toks), 4):
            r = (r + (toks[j + 1] - TOY.DIGIT0)*(1 if toks[j] == TOY.PLUS else -1)) % 7
            assert toks[j + 3] - TOY.DIGIT0 == r
    tr = make_running_sum_task(40, 4, 0.4, seed=4)
    assert set(tr["input_ids"][tr["noise"]].tolist()).isdisjoint(d["input_ids"][d["noise"]].tolist())
    assert int((d["labels"] != -100).sum()) == int((d["input_ids"] == TOY.EQ).sum())


def test_word_problems_arithmetic_and_pools():
    import re
    for p in make_word_problems(100, (2, 4), seed=5):
        for a, op, b, c in re.findall(r"(\d+) ([+-]) (\d+) = (\d+)", p["solution"]):
            assert int(a) + (int(b) if op == "+" else -int(b)) == int(c)
        assert last_number(p["solution"]) == p["answer"]
    assert not set(DECOYS["train"]) & set(DECOYS["test"])
    assert last_number("no number") is None and last_number("3 then -4") == -4


def test_word_problem_batches_label_only_the_solution():
    tok = pytest.importorskip("maspob_etal.models").load_tokenizer()
    bt = word_problem_batches(tok, make_word_problems(4, seed=6), 2, seed=0)(0)
    lab, ids = bt["labels"], bt["input_ids"]
    txt = tok.decode(ids[0][lab[0] != -100])
    assert "The answer is" in txt and "Question" not in txt
    assert torch.equal(bt["attention_mask"].bool(), ids.ne(tok.pad_token_id) | (lab != -100))


def test_lora_is_parameter_matched_and_starts_at_the_base(llama):
    names = lora_targets(llama, 1)
    assert len(names) == 7 and all(n.startswith("model.layers.1.") for n in names)
    ctl = TiFController(32, m=16)
    r, cnt = lora_rank_for(llama, 1, n_params(ctl))
    m2, params = add_lora(llama, 1, r)
    assert sum(p.numel() for p in params) == cnt and abs(cnt - n_params(ctl)) <= 0.1*n_params(ctl)
    ids = torch.randint(61, (1, 6), generator=gen(36))
    with torch.no_grad(): assert torch.equal(m2(ids).logits, llama(ids).logits)
    assert not any("lora_" in n for n, _ in llama.named_parameters())


def test_decoder_layers_of_tiny_model():
    assert len(decoder_layers(TinyCausalLM(TOY.vocab_size, 16, 3, 2))) == 3


# ---------------------------------------------------------------- threads
def test_thread_count_changes_no_number():
    "The notebook pins one thread (the last bits of the state norms move with the thread count); pinned, no number moves."
    assert_thread_independent("""
from maspob_etal.core import cpu_threads
from maspob_etal.tif import run_toy_seed
with cpu_threads(1): r = run_toy_seed(0, variants=("TiF", "TiF non-dissipative"), n_train=200, n_test=40, base_steps=15, steps=8, batch_size=16,
                                      n_long=2, long_factor=2, length=(3, 5), n_items=5, distances=(0, 3))
result = [r["acc"][v]["dist"][k] for v in ("base", "TiF", "TiF non-dissipative") for k in (0, 3)] + [r["loss"]["TiF"],
          r["norms"]["TiF"][2]["zmax"], r["norms"]["TiF non-dissipative"][2]["zmax"]]
""")


# ---------------------------------------------------------------- the ODE step against the solver
def test_ode_step_errors_against_dopri5():
    "The table's numbers are |one step - dopri5|: exact for a constant drive, large for expeuler at dt = 1 with a recurrence."
    tde = pytest.importorskip("torchdiffeq")
    ode = ode_with(m=6, in_dim=4, lam_min=0.1, rho=0.5)
    z, u = 3*torch.randn(5, 6, generator=gen(40)), torch.randn(5, 4, generator=gen(41))
    rows = {(r["dt"], r["scheme"]): r for r in ode_step_errors(ode, z, u, dts=(0.01, 1.0))}
    o = ode.double()
    ref = tde.odeint(lambda t, y: o.rhs(y, u.double()), z.double(), torch.tensor([0.0, 1.0], dtype=torch.double), method="dopri5",
                     rtol=1e-10, atol=1e-12)[-1]
    with torch.no_grad(): direct = float((o.step(z.double(), u.double(), 1.0) - ref).abs().max())
    assert rows[(1.0, "expeuler")]["max_abs_error"] == pytest.approx(direct, rel=1e-5, abs=1e-9)
    assert rows[(1.0, "expeuler")]["max_abs_error"] > 1e-2                          # the operating step is not an ODE solve
    assert rows[(1.0, "rk4 x4")]["max_abs_error"] < 1e-3 and rows[(0.01, "expeuler")]["max_abs_error"] < 1e-4
    lin = ode_with(m=6, in_dim=4, lam_min=0.1, rho=0.0)                             # W_z = 0: a constant drive
    assert ode_step_errors(lin, z, u, dts=(1.0,), schemes=(("expeuler", 1),))[0]["max_abs_error"] < 1e-8


# ---------------------------------------------------------------- the regime: distance, free-running decoding, baselines
@pytest.mark.parametrize("k", [0, 1, 3])
def test_distance_task_puts_the_burst_k_items_before_the_answer(k):
    d = make_distance_task(20, 4, k=k, burst=3, seed=2)
    ids, nz = d["input_ids"], d["noise"]
    noise_cols = torch.nonzero(nz[0]).flatten().tolist()
    assert noise_cols == list(range(d["start"], d["start"] + 3)) and bool((nz == nz[:1]).all())
    eqs = torch.nonzero(ids[0] == TOY.EQ).flatten().tolist()                          # the four '=' tokens
    assert eqs[3 - k] == d["start"] + 3                                             # the burst sits right before item (4 - k)'s '='
    assert eqs[-1] - noise_cols[-1] == 4*k + 1
    clean = make_distance_task(20, 4, k=k, burst=0, seed=2)
    assert torch.equal(ids[~nz].view(20, -1), clean["input_ids"])                     # the same traces without the burst
    assert bool((ids[nz] >= TOY.NOISE0 + TOY.n_noise).all())                          # held-out pool
    with pytest.raises(ValueError, match="k must be"): make_distance_task(3, 4, k=4)


class _Echo(torch.nn.Module):
    "Predicts, at every position, the token four places back: after '=' that is the previous result."
    def __init__(self): super().__init__(); self.w = torch.nn.Parameter(torch.zeros(1))
    def forward(self, input_ids, **kw):
        from types import SimpleNamespace
        return SimpleNamespace(logits=F.one_hot(input_ids[:, -4:-3].expand(-1, input_ids.shape[1]), TOY.vocab_size).float())


def test_free_running_decodes_from_its_own_results():
    d = make_distance_task(40, 6, k=3, burst=0, seed=3)
    got = free_running_correct(_Echo(), d)
    before = d["input_ids"][:, d["start"] - 3]                                       # the last given result
    assert torch.equal(got, (before == d["labels"][:, -1]).float())                 # copied forward through every decoded result
    teacher = d["input_ids"][:, -5]                                                   # what teacher forcing would copy
    assert not torch.equal(got, (teacher == d["labels"][:, -1]).float())


def test_finetune_copy_trains_every_weight_and_leaves_the_base():
    torch.manual_seed(0)
    base = TinyCausalLM(TOY.vocab_size, 16, 1, 2)
    for p in base.parameters(): p.requires_grad_(False)
    ft, params = finetune_copy(base)
    assert len(params) == len(list(base.parameters())) and all(p.requires_grad for p in params)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    train_tif(ft, None, batch_fn(make_running_sum_task(50, 3, 0.2, seed=2), 8, 0), 3, lr=1e-2, params=params)
    assert all(torch.equal(v, base.state_dict()[k]) for k, v in before.items())
    assert not all(torch.equal(v, ft.state_dict()[k]) for k, v in before.items())


def test_every_variant_trains_on_the_same_batches(monkeypatch):
    "TiF, LoRA and FT draw the same noisy batches (equal data and steps)."
    seen = {}
    real = tif_mod.batch_fn
    def spy(data, batch_size, seed=0):
        get = real(data, batch_size, seed)
        def wrapped(i):
            out = get(i); seen.setdefault(cur[0], []).append(out["input_ids"].clone()); return out
        return wrapped
    monkeypatch.setattr(tif_mod, "batch_fn", spy)
    torch.manual_seed(0)
    base = TinyCausalLM(TOY.vocab_size, 16, 1, 2)
    for p in base.parameters(): p.requires_grad_(False)
    noisy = make_running_sum_task(60, (3, 4), 0.15, seed=5, modulus=2)
    cur = [None]
    for v in ("TiF", "LoRA", "FT"):
        cur[0] = v; r = train_toy_variant(base, v, 3, noisy, 3, 1e-2, batch_size=8, m=4)
        if r["handle"] is not None: r["handle"].remove()
    assert len(seen["TiF"]) == len(seen["LoRA"]) == len(seen["FT"]) == 3
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(seen["TiF"], seen["LoRA"], seen["FT"]))


def test_budget_checkpoints_read_the_model_after_that_many_steps():
    torch.manual_seed(0)
    base = TinyCausalLM(TOY.vocab_size, 16, 1, 2)
    data = make_running_sum_task(60, (3, 4), 0.0, seed=6, modulus=2)
    probe = make_running_sum_task(10, 4, 0.0, seed=7, modulus=2)["input_ids"]
    ref = TinyCausalLM(TOY.vocab_size, 16, 1, 2); ref.load_state_dict(base.state_dict())
    read = lambda mod: mod(input_ids=probe).logits.detach().clone()
    res = train_tif(base, None, batch_fn(data, 8, 0), 5, lr=1e-2, params=list(base.parameters()), eval_at=(0, 2, 5),
                    on_eval=lambda: read(base))
    assert sorted(res["evals"]) == [0, 2, 5]
    train_tif(ref, None, batch_fn(data, 8, 0), 2, lr=1e-2, params=list(ref.parameters()))
    torch.testing.assert_close(res["evals"][2], read(ref))
    torch.testing.assert_close(res["evals"][5], read(base))
    with pytest.raises(ValueError, match="eval_at needs on_eval"): train_tif(base, None, batch_fn(data, 8, 0), 1, params=list(base.parameters()), eval_at=(1,))


# ---------------------------------------------------------------- did the real-model arm move
def test_changed_share_known_value():
    assert changed_share([1, 2, None, 4], [1, 3, 7, 5]) == 0.75 and changed_share([None], [None]) == 0.0
    with pytest.raises(ValueError, match="pair up"): changed_share([1], [1, 2])


def test_solution_nll_is_the_loss_on_the_solution_tokens():
    transformers = pytest.importorskip("transformers")
    tok = pytest.importorskip("maspob_etal.models").load_tokenizer()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1, max_position_embeddings=256)
    model = transformers.LlamaForCausalLM(cfg).eval()
    probs = make_word_problems(3, seed=8)
    got = solution_nll(model, tok, probs, batch_size=2)
    for p, g in zip(probs, got):
        a = tok(tif_mod.word_prompt(p["question_distracted"]), add_special_tokens=False)["input_ids"]
        b = tok(" " + p["solution"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        ids = torch.tensor([a + b]); lab = torch.tensor([[-100]*len(a) + b])
        with torch.no_grad(): want = float(lm_loss(model(input_ids=ids).logits, lab))
        assert g == pytest.approx(want, rel=1e-4, abs=1e-5)
