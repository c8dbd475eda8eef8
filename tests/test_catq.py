"Tests of maspob_etal.catq (CAT-Q ternary post-training quantization): known values, limits, exactness, end to end."
import copy, math, pathlib, sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.catq import (CatQLinear, TernaryLinear, calibrate, capture_inputs, check_group_size, corpus, decoder_layers,
                              dequantize, export_model, gptq_quantize_, gptq_ternary, group_stats, hard_ternary, memory_report,
                              modulate, modulation, mse_codes, mse_quantize_, mse_ternary_params, pack_ternary, perplexity,
                              pydoc_text, read_text, rtn_codes, rtn_quantize_, rtn_ternary, sequence_nll, sharpness,
                              soft_ternary, ste_ternary, token_windows, unpack_ternary, window_starts, wrap_linears,
                              linear_layers)


@pytest.fixture(autouse=True)
def _one_thread():
    "One torch thread per test: these tiny models are thousands of small operations, slower with threads that wait on each other."
    n = torch.get_num_threads(); torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

def tiny_llama(n_layers=2, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return LlamaForCausalLM(cfg).eval()

def tiny_ids(n=8, T=16, seed=0):
    return torch.randint(0, 64, (n, T), generator=torch.Generator().manual_seed(seed))

def threshold_rule(x, delta):
    "Eq. 2 written as the three cases."
    return torch.where(x > delta, 1., torch.where(x < -delta, -1., 0.)).to(x.dtype)

def random_catq(lora_rank=0, seed=0, in_f=32, out_f=6, g=8):
    gen = torch.Generator().manual_seed(seed)
    lin = nn.Linear(in_f, out_f)
    lin.weight.data = torch.randn(out_f, in_f, generator=gen)
    q = CatQLinear(lin, group_size=g, lora_rank=lora_rank, generator=gen)
    with torch.no_grad():
        for p in (q.a, q.m, q.d): p.copy_(torch.randn(p.shape, generator=gen))
        if lora_rank: q.lora_B.copy_(torch.randn(q.lora_B.shape, generator=gen))
    return q, lin, gen


# --- per-group statistics and the hard ternarizer ---------------------------------------------------------------

def test_known_value_group():
    w = torch.tensor([[-3., -1., 0., 1., 3.]])
    mu0, alpha0 = group_stats(w, 5)
    assert mu0.item() == 0 and abs(alpha0.item() - 1.6) < 1e-5
    w_hat = (w - mu0) / alpha0
    torch.testing.assert_close(w_hat, torch.tensor([[-1.875, -0.625, 0., 0.625, 1.875]]))
    T = hard_ternary(w_hat, 0.5)
    assert T.tolist() == [[-1., -1., 0., 1., 1.]]
    torch.testing.assert_close(alpha0*T, torch.tensor([[-1.6, -1.6, 0., 1.6, 1.6]]))

@pytest.mark.parametrize("delta", [0.25, 0.5, 1.0])
def test_tie_rule_and_official_formula(delta):
    x = torch.arange(-256, 257, dtype=torch.float32) / 64          # dyadic grid: exact arithmetic, contains +-delta
    official = torch.clamp(torch.round(x*0.5/delta), -1, 1)
    assert torch.equal(hard_ternary(x, delta), official)
    assert torch.equal(hard_ternary(x, delta), threshold_rule(x, delta))
    assert hard_ternary(torch.tensor([delta, -delta]), delta).abs().sum() == 0        # ties map to 0
    r = torch.randn(10_000, generator=torch.Generator().manual_seed(1))*2
    assert torch.equal(hard_ternary(r, delta), torch.clamp(torch.round(r*0.5/delta), -1, 1))

def test_group_size_must_divide_width():
    for f in (lambda: group_stats(torch.randn(4, 576), 128), lambda: rtn_ternary(torch.randn(4, 576), 128),
              lambda: CatQLinear(nn.Linear(576, 8), group_size=128)):
        with pytest.raises(ValueError, match=r"group_size=128 does not divide in_features=576.*e\.g\."):
            f()
    assert check_group_size(576, 64) == 9
    with pytest.raises(ValueError, match="positive integer"): check_group_size(64, 0)


# --- learnable modulation and softened ternarization -------------------------------------------------------------

def test_identity_at_initialization():
    z = torch.zeros(3, 2)
    d_alpha, d_mu, d_delta = modulation(z, z, z)
    assert torch.equal(d_alpha, torch.ones(3, 2)) and torch.equal(d_mu, z) and torch.equal(d_delta, torch.ones(3, 2))
    lin = nn.Linear(16, 3)
    q = CatQLinear(lin, group_size=8)
    w_hat, mu, alpha, delta = q.quant_params(q.weight)
    mu0, alpha0 = group_stats(lin.weight, 8)
    assert torch.equal(mu, mu0) and torch.equal(alpha, alpha0) and torch.equal(delta, torch.full((3, 2), 0.5))
    mu2, alpha2, delta2 = modulate(mu0, alpha0, z, z, z, delta0=0.5)
    assert torch.equal(mu2, mu0) and torch.equal(alpha2, alpha0)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_st_limits(dtype):
    x = torch.linspace(-3, 3, 20001, dtype=dtype)
    assert (soft_ternary(x, 1e-4, 0.5) - x).abs().max() <= 1e-4
    far = (x.abs() - 0.5).abs() > 1e-3
    if dtype == torch.float32: assert torch.equal(soft_ternary(x, 1e4, 0.5)[far], hard_ternary(x, 0.5)[far])
    else: torch.testing.assert_close(soft_ternary(x, 1e4, 0.5)[far], hard_ternary(x, 0.5)[far], atol=1e-8, rtol=0)
    assert torch.equal(soft_ternary(x, 0.0, 0.5), x)

@settings(max_examples=40, deadline=None)
@given(s=st.floats(1e-3, 200.), delta=st.floats(0.05, 2.))
def test_st_odd_monotone_bounded(s, delta):
    x = torch.linspace(-5, 5, 2001, dtype=torch.float64)
    f = soft_ternary(x, s, delta)
    torch.testing.assert_close(soft_ternary(-x, s, delta), -f, atol=1e-12, rtol=0)
    assert (f.diff() >= -1e-15).all()
    assert f.abs().max() <= 1/math.tanh(s) + 1e-12

def test_schedule_and_hard_phase_ste():
    for t in (0.05, 0.4, 0.8):
        assert sharpness(t, 0.8, 30.0) == pytest.approx(t/0.8*30.0)
    for t in (0.8001, 0.9, 1.0): assert sharpness(t) is None
    with pytest.raises(ValueError, match=r"progress t must be in \[0, 1\]"): sharpness(-0.1)
    with pytest.raises(ValueError, match=r"gamma must be in \(0, 1\]"): sharpness(0.5, gamma=0.0)
    q, lin, gen = random_catq()
    q.set_progress(0.9)                                    # hard phase
    w_hat, _, alpha, delta = q.quant_params(q.weight)
    expect = (alpha[..., None]*hard_ternary(w_hat, delta[..., None])).reshape(q.weight.shape)
    assert torch.equal(q.quant_weight(), expect)           # forward is exactly alpha * Q
    q(torch.randn(5, 32, generator=gen)).pow(2).sum().backward()
    for p in (q.a, q.m, q.d): assert p.grad is not None and p.grad.abs().sum() > 0
    u = torch.randn(50, requires_grad=True)
    ste_ternary(u, 0.5).sum().backward()
    assert torch.equal(u.grad, torch.ones(50))

def test_soft_phase_follows_schedule():
    q, lin, gen = random_catq()
    q.set_progress(0.4)
    w_hat, _, alpha, delta = q.quant_params(q.weight)
    expect = (alpha[..., None]*soft_ternary(w_hat, 15.0, delta[..., None])).reshape(q.weight.shape)
    torch.testing.assert_close(q.quant_weight(), expect)
    q.use_st = False                                       # the ablation: hard from step 0
    assert torch.equal(q.quant_weight(), (alpha[..., None]*hard_ternary(w_hat, delta[..., None])).reshape(q.weight.shape))


# --- export, LoRA merge, RTN -------------------------------------------------------------------------------------

@pytest.mark.parametrize("lora_rank", [0, 3])
def test_export_is_exact(lora_rank):
    q, lin, gen = random_catq(lora_rank=lora_rank)
    q.set_progress(1.0)
    codes, scales = q.export()
    assert codes.dtype == torch.int8 and set(codes.unique().tolist()) <= {-1, 0, 1}
    deq = dequantize(codes, scales, 8)
    assert torch.equal(deq, q.quant_weight())              # bitwise in fp32
    for row, a in zip(deq.reshape(6, 4, 8), scales):       # each group holds at most {-alpha, 0, +alpha}
        for grp, ag in zip(row, a):
            assert set(grp.unique().tolist()) <= {-ag.item(), 0.0, ag.item()}
    x = torch.randn(4, 32, generator=gen)
    tl = TernaryLinear(codes, scales, lin.bias, 8)
    assert torch.equal(tl(x), q(x))

def test_lora_merge_equivalence():
    q, lin, gen = random_catq(lora_rank=4)
    q.set_progress(1.0)
    x = torch.randn(4, 32, generator=gen)
    before_w, before_y = q.quant_weight(), q(x)
    W_merged = lin.weight + q.scaling*(q.lora_B @ q.lora_A)
    q0 = CatQLinear(nn.Linear(32, 6), group_size=8)        # quantizing the merged weight directly...
    q0.weight.data, q0.bias.data = W_merged.detach().clone(), lin.bias.detach().clone()
    for p, p0 in ((q.a, q0.a), (q.m, q0.m), (q.d, q0.d)): p0.data = p.detach().clone()
    assert torch.equal(q0.quant_weight(), before_w)        # ...equals the calibration-time forward
    q.merge_lora()
    assert q.lora_rank == 0 and not hasattr(q, "lora_A")
    torch.testing.assert_close(q(x), before_y)
    # B = 0 at init: the first forward equals the no-LoRA path
    lin2 = nn.Linear(32, 6)
    a, b = CatQLinear(lin2, group_size=8, lora_rank=4, generator=gen), CatQLinear(lin2, group_size=8)
    for t in (0.1, 1.0):
        a.set_progress(t); b.set_progress(t)
        assert torch.equal(a(x), b(x))

def test_rtn_matches_bitnet_formula():
    W = torch.tensor([[0.2, -0.1, 0.05, -0.45, 1.0, 1.0, -1.0, 0.0]])
    torch.testing.assert_close(rtn_ternary(W, 4), torch.tensor([[0.2, 0., 0., -0.2, 0.75, 0.75, -0.75, 0.]]))
    def bitnet_weight_quant(w):                            # BitNet b1.58 reference (per tensor), applied per group
        scale = 1.0 / w.abs().mean().clamp_(min=1e-5)
        return (w*scale).round().clamp_(-1, 1) / scale
    R = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    ref = torch.cat([bitnet_weight_quant(R[i, j*16:(j+1)*16]) for i in range(8) for j in range(4)]).reshape(8, 64)
    torch.testing.assert_close(rtn_ternary(R, 16), ref)
    codes, alpha = rtn_codes(R, 16)
    assert codes.dtype == torch.int8 and alpha.shape == (8, 4)

@settings(max_examples=30, deadline=None)
@given(out=st.integers(1, 5), n=st.integers(1, 19), seed=st.integers(0, 1000))
def test_pack_roundtrip(out, n, seed):
    codes = torch.randint(-1, 2, (out, n), generator=torch.Generator().manual_seed(seed)).to(torch.int8)
    packed = pack_ternary(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (out, math.ceil(n/4))
    assert torch.equal(unpack_ternary(packed, n), codes)

def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"\{-1, 0, 1\}"): pack_ternary(torch.tensor([[2, 0]], dtype=torch.int8))
    with pytest.raises(TypeError, match="wraps an nn.Linear"): CatQLinear(nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="factor_act"): CatQLinear(nn.Linear(8, 2), group_size=8, factor_act="exp")
    with pytest.raises(ValueError, match="sharpness s must be"): soft_ternary(torch.zeros(2), -1.0, 0.5)
    with pytest.raises(ValueError, match="scales must have shape"): TernaryLinear(torch.zeros(2, 8, dtype=torch.int8), torch.ones(2, 3), group_size=4)
    with pytest.raises(FileNotFoundError, match="does not exist"): read_text("/no/such/corpus.txt")
    with pytest.raises(ValueError, match="split must be"): pydoc_text("train")
    with pytest.raises(ValueError, match="no TernaryLinear"): memory_report(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="could not find the decoder layers"): decoder_layers(nn.Linear(2, 2))
    q = CatQLinear(nn.Linear(8, 2), group_size=8); q.mode = "int4"
    with pytest.raises(ValueError, match="mode must be"): q(torch.zeros(1, 8))
    model, ids = tiny_llama(), tiny_ids()
    for calib_ids, kw, msg in [(ids.int(), {}, "2-D long tensor"), (ids[0], {}, "2-D long tensor"),
                               (ids, dict(layers=[0, 5]), "consecutive indices"), (ids, dict(layers=[]), "consecutive indices"),
                               (ids, dict(window=2, stride=3), r"stride \(3\) must be <= window"),
                               (ids, dict(loss="l1"), "loss must be"), (ids, dict(epochs=0), "epochs must be an integer"),
                               (ids, dict(lr_factor=-1.0), "learning rates must be"), (ids, dict(group_size=12), "does not divide"),
                               (ids, dict(eval_batch_size=0), "eval_batch_size must be an integer")]:
        kw = dict(dict(group_size=16, show_progress=False), **kw)
        with pytest.raises(ValueError, match=msg):
            calibrate(copy.deepcopy(model), calib_ids, **kw)


def test_layers_refuse_inputs_of_the_wrong_width():
    q = CatQLinear(nn.Linear(16, 4), group_size=8)
    assert q(torch.zeros(3, 5, 16)).shape == (3, 5, 4)
    for x in (torch.zeros(3, 12), torch.zeros(2, 16, 3), torch.zeros(())):
        with pytest.raises(ValueError, match=r"CatQLinear expects inputs of shape \(\.\.\., in_features\) = \(\.\.\., 16\)"):
            q(x)
    t = TernaryLinear(*q.export(), group_size=8)
    assert t(torch.zeros(2, 16)).shape == (2, 4)
    with pytest.raises(ValueError, match=r"TernaryLinear expects .* got shape \(2, 5, 15\): pass inputs whose last dimension is 16"):
        t(torch.zeros(2, 5, 15))

@pytest.mark.parametrize("delta", [0, 0.0, -0.5, float("nan"), torch.tensor(0.0), torch.tensor([[0.5], [0.0]]),
                                   torch.tensor([[0.5], [-1e-3]])])
def test_hard_ternary_refuses_a_threshold_that_is_not_positive(delta):
    w = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="delta is the dead-zone threshold and must be > 0"):
        hard_ternary(w, delta)
    assert torch.equal(hard_ternary(w, torch.tensor([[0.5], [1e-3]])), threshold_rule(w, torch.tensor([[0.5], [1e-3]])))

# --- windows, data, metrics --------------------------------------------------------------------------------------

def test_window_starts_cover_every_layer_twice_with_paper_windows():
    starts = window_starts(0, 30, 4, 2)
    count = [sum(s <= l < s + 4 for s in starts) for l in range(30)]
    assert starts[-1] + 4 == 30 and count[:2] == [1, 1] and all(c == 2 for c in count[2:-2]) and min(count) >= 1

def test_pydoc_split_is_disjoint_and_windows():
    import pydoc_data.topics as T
    cal, ev = pydoc_text("calib"), pydoc_text("eval")
    for i, k in enumerate(sorted(T.topics)):
        assert (T.topics[k] in cal) == (i % 10 < 7) and (T.topics[k] in ev) == (i % 10 >= 7)
    class CharTok:
        def __call__(self, text, add_special_tokens=False): return {"input_ids": [ord(c) % 251 for c in text]}
    ids = token_windows(CharTok(), "".join(chr(65 + i % 26) for i in range(1000)), 10, 7)
    starts = sorted((r[0].item() - 65) for r in ids)
    assert ids.shape == (7, 10) and ids.dtype == torch.long
    a = token_windows(CharTok(), ev, 32, 5, seed=4)
    assert torch.equal(a, token_windows(CharTok(), ev, 32, 5, seed=4)) and not torch.equal(a, token_windows(CharTok(), ev, 32, 5, seed=5))
    assert corpus(CharTok(), "eval", 16, 3).shape == (3, 16)
    with pytest.raises(ValueError, match="too few"): token_windows(CharTok(), "abc", 2, 5)

def test_memory_report_counts():
    m = nn.Sequential(nn.Linear(64, 8), nn.Linear(64, 4))
    rtn_quantize_(m, 32)
    r = memory_report(m)
    n, groups = 64*12, 12*2
    assert r["weights"] == n and r["fp16_bytes"] == 2*n
    assert r["packed_bytes"] == n//4 + 2*groups
    assert r["ideal_bytes"] == pytest.approx(n*math.log2(3)/8 + 2*groups)
    assert r["packed_bits_per_weight"] == pytest.approx(2 + 16/32)


# --- end to end ------------------------------------------------------------------------------------------------

def test_end_to_end_tiny_llama():
    model, ids = tiny_llama(), tiny_ids()
    ref = model(ids).logits
    log = calibrate(model, ids, window=2, stride=2, epochs=8, batch_size=4, group_size=16, lr_factor=3e-2, show_progress=False)
    (w,) = log["windows"]
    assert w["loss_final"] < w["loss_init"] and w["loss_final"] < w["loss_rtn"], w
    assert len(w["trace"]) == 8 and log["config"]["steps_per_window"] == 16
    assert sum(isinstance(m, CatQLinear) for m in model.modules()) == 14
    y_cal = model(ids).logits
    assert export_model(model) == 14 and not any(isinstance(m, (CatQLinear, nn.Linear)) and m is not model.lm_head
                                                 for m in decoder_layers(model).modules())
    y = model(ids).logits
    assert torch.isfinite(y).all() and y.shape == ref.shape
    torch.testing.assert_close(y, y_cal)                   # the exported model computes what the calibrated one did
    assert math.isfinite(perplexity(model, ids, batch_size=3))

def test_calibration_is_deterministic_and_ste_variant_runs():
    logs = []
    for use_st in (True, True, False):
        model = tiny_llama(seed=1)
        logs.append(calibrate(model, tiny_ids(seed=2), window=2, stride=2, epochs=6, batch_size=4, group_size=16,
                              lr_factor=3e-2, use_st=use_st, seed=7, show_progress=False))
    assert logs[0]["windows"] == logs[1]["windows"]        # same seed, same numbers
    w = logs[0]["windows"][0]
    assert w["loss_final"] < w["loss_init"]
    hard = logs[2]["windows"][0]                           # hard Q + STE from step 0: runs, finite, same budget
    assert len(hard["trace"]) == 6 and all(math.isfinite(x) for x in hard["trace"]) and logs[2]["config"]["use_st"] is False

def test_sliding_windows_with_overlap_and_lora():
    model, ids = tiny_llama(n_layers=4), tiny_ids()
    log = calibrate(model, ids, layers=range(1, 4), window=2, stride=1, epochs=3, batch_size=8, group_size=16,
                    lora_rank=2, lr_factor=3e-2, lr_lora=1e-2, show_progress=False)
    assert [(w["start"], w["stop"]) for w in log["windows"]] == [(1, 3), (2, 4)]
    blocks = decoder_layers(model)
    assert not any(isinstance(m, CatQLinear) for m in blocks[0].modules())          # layer 0 untouched
    qs = [m for m in model.modules() if isinstance(m, CatQLinear)]
    assert len(qs) == 21 and all(q.lora_rank == 2 and q.t == 1.0 and q.mode == "catq" for q in qs)
    assert any(q.lora_B.abs().sum() > 0 for q in qs)                                 # LoRA was trained
    assert not any(p.requires_grad for q in qs for p in (q.a, q.m, q.d, q.lora_A, q.lora_B))  # nothing left trainable
    y_cal = model(ids).logits
    assert export_model(model) == 21
    torch.testing.assert_close(model(ids).logits, y_cal)                             # LoRA merged before ternarizing

def test_no_lm_trains_nothing():
    model, ids = tiny_llama(), tiny_ids()
    log = calibrate(model, ids, window=2, stride=2, epochs=3, batch_size=4, group_size=16, lora_rank=4, use_lm=False, show_progress=False)
    w = log["windows"][0]
    assert w["trace"] == [] and w["loss_final"] == w["loss_init"] and log["config"]["lora_rank"] == 0
    assert all(q.a.abs().sum() == 0 for q in model.modules() if isinstance(q, CatQLinear))

class _ToyBlock(nn.Module):
    def __init__(self, d): super().__init__(); self.up, self.down = nn.Linear(d, 2*d), nn.Linear(2*d, d)
    def forward(self, h): return h + self.down(F.gelu(self.up(h)))

class _ToyLM(nn.Module):
    "A model that is not a transformers model: embedding, residual MLP blocks, head."
    def __init__(self, d=32, V=50, n=3):
        super().__init__()
        self.emb, self.blocks, self.head = nn.Embedding(V, d), nn.ModuleList(_ToyBlock(d) for _ in range(n)), nn.Linear(d, V)
    def forward(self, ids):
        h = self.emb(ids)
        for b in self.blocks: h = b(h)
        return self.head(h)

def test_any_model_built_from_linears():
    torch.manual_seed(0)
    model = _ToyLM()
    ids = torch.randint(0, 50, (6, 10), generator=torch.Generator().manual_seed(0))
    log = calibrate(model, ids, blocks=model.blocks, window=2, stride=1, epochs=10, batch_size=3, group_size=16,
                    lr_factor=3e-2, show_progress=False)
    assert all(w["loss_final"] < w["loss_init"] for w in log["windows"])
    assert export_model(model) == 6 and torch.isfinite(model(ids)).all()
    assert len(wrap_linears(nn.Sequential(nn.Linear(16, 4)), group_size=16)) == 1

@pytest.mark.parametrize("bs", [1, 2, 16])
def test_capture_inputs_any_batch_size(bs):
    from maspob_etal.catq import capture_inputs
    model, ids = tiny_llama(n_layers=3), tiny_ids(n=5)
    X, kw = capture_inputs(model, decoder_layers(model)[1], ids, bs)
    ref = model(ids, output_hidden_states=True).hidden_states[1]          # the input of layer 1
    assert X.shape == ref.shape
    torch.testing.assert_close(X, ref)
    assert "cache" not in kw and "past_key_values" not in kw


# --- known values on groups with a non-zero mean (the centring, its sign and the modulation) ----------------------

W_NZ = [0.5, 1.5, 2.0, -1.0, 3.0]        # mean 1.2, centred absmean (0.7 + 0.3 + 0.8 + 2.2 + 1.8) / 5 = 1.16

def nz_layer():
    "One group of 5 with a non-zero mean, and factors a = m = ln 3, d = -ln 3: delta_alpha = 1.5, delta_mu = 0.5, delta_Delta = 0.5."
    lin = nn.Linear(5, 1, bias=False); lin.weight.data = torch.tensor([W_NZ], dtype=torch.float64)
    q = CatQLinear(lin, group_size=5)
    with torch.no_grad(): q.a.fill_(math.log(3)); q.m.fill_(math.log(3)); q.d.fill_(-math.log(3))
    return q

def test_group_stats_nonzero_mean():
    mu0, alpha0 = group_stats(torch.tensor([W_NZ]), 5)
    assert mu0.item() == pytest.approx(1.2, abs=1e-6) and alpha0.item() == pytest.approx(1.16 + 1e-6, abs=1e-6)
    w_hat = (torch.tensor([W_NZ]) - mu0)/alpha0                  # at the priors, Delta = 0.5
    assert hard_ternary(w_hat, 0.5).tolist() == [[-1., 0., 1., -1., 1.]]   # (w - 1.2) / 1.16 = -0.62, 0.26, 0.69, -1.90, 1.55

def test_catq_weight_known_values_nonzero_mean():
    q = nz_layer()
    d_alpha, d_mu, d_delta = (float(v.detach()) for v in modulation(q.a, q.m, q.d))
    assert (d_alpha, d_mu, d_delta) == pytest.approx((1.5, 0.5, 0.5), abs=1e-12)
    mu, alpha, delta = 1.2 + 0.5*1.160001, 1.5*1.160001, 0.25                         # Eq. 4 by hand
    w_hat = [(w - mu)/alpha for w in W_NZ]                                           # -0.736, -0.161, 0.126, -1.598, 0.701
    w_hat_q, mu_q, alpha_q, delta_q = q.quant_params(q.weight)
    torch.testing.assert_close(w_hat_q.flatten(), torch.tensor(w_hat, dtype=torch.float64), atol=1e-9, rtol=0)
    assert (mu_q.item(), alpha_q.item(), delta_q.item()) == pytest.approx((mu, alpha, delta), abs=1e-9)
    q.set_progress(1.0)                                                              # hard: Q at Delta = 0.25
    torch.testing.assert_close(q.quant_weight().detach()[0], torch.tensor([-alpha, 0., 0., -alpha, alpha], dtype=torch.float64), atol=1e-9, rtol=0)
    codes, scales = q.export()
    assert codes.tolist() == [[-1, 0, 0, -1, 1]] and scales.item() == pytest.approx(alpha, abs=1e-9)
    q.set_progress(0.08)                                                             # soft: s = 0.08 / 0.8 * 30 = 3
    f = [(math.tanh(3*(x - delta)) + math.tanh(3*(x + delta)))/(2*math.tanh(3)) for x in w_hat]
    torch.testing.assert_close(q.quant_weight().detach()[0], torch.tensor([alpha*v for v in f], dtype=torch.float64), atol=1e-9, rtol=0)
    x = torch.tensor([[1.0, -2.0, 0.5, 3.0, -1.0]], dtype=torch.float64)              # the layer's forward uses that weight
    assert q(x).item() == pytest.approx(sum(a*b for a, b in zip(x[0].tolist(), [alpha*v for v in f])), abs=1e-9)


# --- the stronger post-training baselines ---------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), shift=st.floats(-1, 1))
def test_mse_codes_are_the_best_ternary_fit(seed, shift):
    import itertools
    w = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(seed)) + shift
    best = min((w - (c @ w)/(c @ c)*c).square().sum().item()
               for c in (torch.tensor(x, dtype=torch.float64) for x in itertools.product((-1, 0, 1), repeat=6)) if c.abs().sum() > 0)
    codes, alpha = mse_codes(w[None], 6)
    assert (w - alpha[0]*codes[0].double()).square().sum().item() == pytest.approx(best, abs=1e-10)

def test_mse_codes_known_value():
    codes, alpha = mse_codes(torch.tensor([[0.9, -0.2, 1.4, 0.1, -1.1, 2.0, 0.3, -0.3]]), 4)
    # group 1: |w| sorted 1.4, 0.9, 0.2, 0.1 -> c^2/k = 1.96, 2.645, 2.083, 1.69 -> keep 2, alpha 1.15
    # group 2: 2.0, 1.1, 0.3, 0.3 -> 4.0, 4.805, 3.853, 3.423 -> keep 2, alpha 1.55
    assert codes.tolist() == [[1, 0, 1, 0, -1, 1, 0, 0]]
    torch.testing.assert_close(alpha, torch.tensor([[1.15, 1.55]]))

def _obs_reference(W, H, group_size, damp=0.01):
    "GPTQ's update written the long way: after each rounded column, the OBS step with an explicit inverse of the remaining Hessian."
    W, H = W.double().clone(), H.double().clone(); n = W.shape[1]
    H += damp*torch.diag(H).mean()*torch.eye(n, dtype=H.dtype)
    codes, scales = torch.zeros_like(W), torch.zeros(W.shape[0], n//group_size, dtype=W.dtype)
    for i in range(n):
        Hinv = torch.linalg.inv(H[i:, i:])
        if i % group_size == 0:
            alpha, t = mse_ternary_params(W[:, i:i + group_size]); scales[:, i//group_size] = alpha
        codes[:, i] = torch.where(W[:, i].abs() >= t, torch.sign(W[:, i]), torch.zeros_like(t))
        W[:, i:] -= ((W[:, i] - alpha*codes[:, i])/Hinv[0, 0])[:, None]*Hinv[0][None, :]
    return codes, scales

@pytest.mark.parametrize("block", [8, 16])
def test_gptq_ternary_matches_the_obs_loop(block):
    g = torch.Generator().manual_seed(2)
    X = torch.randn(300, 16, dtype=torch.float64, generator=g) @ (torch.eye(16, dtype=torch.float64) + 0.4*torch.randn(16, 16, dtype=torch.float64, generator=g))
    W = torch.randn(6, 16, dtype=torch.float64, generator=g) + 0.3
    codes, scales = gptq_ternary(W, X.T @ X, 4, block=block)
    ref_c, ref_s = _obs_reference(W, X.T @ X, 4)
    assert torch.equal(codes.double(), ref_c)
    torch.testing.assert_close(scales, ref_s, atol=1e-10, rtol=0)

def test_gptq_lowers_output_error_and_handles_dead_inputs():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(800, 64, generator=g) @ (torch.eye(64) + 0.3*torch.randn(64, 64, generator=g))
    X[:, 5] = 0                                                                      # an input that is never active
    W = torch.randn(16, 64, generator=g)
    err = lambda c, s: (X @ (W - dequantize(c, s, 16)).T).square().sum()
    c, s = gptq_ternary(W, X.T @ X, 16)
    assert err(c, s) < err(*mse_codes(W, 16)) < err(*rtn_codes(W, 16))
    assert c[:, 5].abs().sum() == 0 and torch.isfinite(s).all()

def test_sequence_nll_prefix_and_perplexity():
    model, ids = tiny_llama(n_layers=3), tiny_ids(n=7)
    full = sequence_nll(model, ids, 3)
    pre = (2, *capture_inputs(model, decoder_layers(model)[2], ids, 3))
    assert torch.equal(sequence_nll(model, ids, 3, prefix=pre), full)
    logits = model(ids).logits                                                       # an independent NLL
    ref = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(7, -1).mean(1)
    torch.testing.assert_close(full, ref, atol=1e-6, rtol=0)
    assert perplexity(model, ids) == pytest.approx(math.exp(ref.double().mean()), rel=1e-6)

def test_gptq_and_mse_quantize_tiny_llama():
    model, ids = tiny_llama(n_layers=3), tiny_ids()
    assert gptq_quantize_(model, ids, [1, 2], 16, batch_size=3) == 14
    blocks = decoder_layers(model)
    assert not any(isinstance(m, TernaryLinear) for m in blocks[0].modules())
    assert sum(isinstance(m, TernaryLinear) for m in blocks[1:].modules()) == 14 and torch.isfinite(model(ids).logits).all()
    m2 = tiny_llama(n_layers=3)
    assert mse_quantize_(decoder_layers(m2)[0], 16) == 7
    with pytest.raises(ValueError, match="consecutive"): gptq_quantize_(tiny_llama(n_layers=3), ids, [0, 2], 16)

def test_same_numbers_with_one_and_two_threads():
    assert_thread_independent("""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        from maspob_etal.catq import calibrate, export_model, gptq_quantize_, sequence_nll
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, max_position_embeddings=32)
        ids = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0))
        torch.manual_seed(0); model = LlamaForCausalLM(cfg).eval()
        log = calibrate(model, ids, layers=[1], window=1, stride=1, epochs=2, batch_size=4, group_size=16, lora_rank=2, lr_factor=3e-2, show_progress=False)
        export_model(model)
        torch.manual_seed(0); m2 = LlamaForCausalLM(cfg).eval(); gptq_quantize_(m2, ids, [1], 16, batch_size=4)
        result = [log["windows"][0]["loss_final"], *sequence_nll(model, ids, 4).tolist(), *sequence_nll(m2, ids, 4).tolist()]
    """)

class _FeatureNet(nn.Module):
    "A model whose input is float features, not token ids: linear stem, two residual MLP blocks, linear head."
    def __init__(self, d_in=12, d=32):
        super().__init__()
        self.stem = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d)) for _ in range(2))
        self.head = nn.Linear(d, 3)
    def forward(self, x):
        h = self.stem(x)
        for b in self.blocks: h = h + b(h)
        return self.head(h)

def test_model_whose_input_is_not_tokens():
    torch.manual_seed(0)
    model = _FeatureNet()
    x = torch.randn(24, 5, 12, generator=torch.Generator().manual_seed(1))
    y_fp = model(x).detach()
    log = calibrate(model, x, blocks=model.blocks, window=1, stride=1, epochs=15, batch_size=8, group_size=16,
                    lr_factor=3e-2, show_progress=False)
    assert all(w["loss_final"] < w["loss_init"] for w in log["windows"])           # reconstruction improved every window
    assert export_model(model) == 4 and torch.isfinite(model(x)).all()               # 4 linears in the blocks became ternary
    assert (model(x) - y_fp).abs().mean() < y_fp.abs().mean()                        # and the output stays close
    with pytest.raises(ValueError, match="float input"): calibrate(_FeatureNet(), x[0, 0], blocks=model.blocks, show_progress=False)


# --- the annealing schedule, the separate ablations, GPT-2's Conv1D, the runner --------------------------------------

def test_calibrate_anneals_from_soft_to_hard(monkeypatch):
    "In every window the progress t runs 1/K, 2/K, ..., 1 over the K steps: soft with rising sharpness first, hard last."
    import maspob_etal.catq as C
    ts, ss = {}, []
    set_progress, soft = C.CatQLinear.set_progress, C.soft_ternary
    def spy(self, t): ts.setdefault(id(self), []).append(t); set_progress(self, t)
    def soft_spy(w_hat, s, delta): ss.append(s); return soft(w_hat, s, delta)
    monkeypatch.setattr(C.CatQLinear, "set_progress", spy)
    monkeypatch.setattr(C, "soft_ternary", soft_spy)
    model, ids = tiny_llama(n_layers=3), tiny_ids()
    log = calibrate(model, ids, layers=[1, 2], window=1, stride=1, epochs=5, batch_size=4, group_size=16, show_progress=False)
    K = log["config"]["steps_per_window"]
    assert K == 10 and len(ts) == 14                                   # 7 linears in each of the 2 windows
    sched = [k/K for k in range(1, K + 1)]
    for seq in ts.values():                                            # evaluations set t = 1; the K steps set k / K
        i = seq.index(sched[0])
        assert seq[i:i + K] == sched, seq
    steps = [s for j, s in enumerate(ss) if j == 0 or s != ss[j - 1]]  # one sharpness per soft step (7 linears share it)
    assert steps == 2*[t/0.8*30.0 for t in sched if t <= 0.8]          # rising to s0 = 30 in each window, then hard (gamma 0.8)

def test_factors_and_lora_are_ablated_separately_with_the_same_steps():
    ids = tiny_ids()
    for learn_factors, rank in ((False, 2), (True, 0), (True, 2)):
        model = tiny_llama()
        log = calibrate(model, ids, window=2, stride=2, epochs=3, batch_size=4, group_size=16, lora_rank=rank,
                        learn_factors=learn_factors, lr_factor=3e-2, lr_lora=1e-2, show_progress=False)
        qs = [m for m in model.modules() if isinstance(m, CatQLinear)]
        assert any(p.abs().sum() > 0 for q in qs for p in (q.a, q.m, q.d)) == learn_factors   # the factors move only if learned
        assert all(q.lora_rank == rank for q in qs)
        if rank: assert any(q.lora_B.abs().sum() > 0 for q in qs)                              # LoRA learns in both LoRA runs
        w = log["windows"][0]
        assert log["config"]["steps_per_window"] == 6 and len(w["trace"]) == 3 and w["loss_final"] != w["loss_init"]
        assert log["config"]["learn_factors"] == learn_factors

def test_calibrate_refuses_blocks_without_linear_layers():
    model, ids = tiny_llama(), tiny_ids()
    rtn_quantize_(decoder_layers(model)[1], 16)                        # block 1 is already ternary: no nn.Linear left
    with pytest.raises(ValueError, match=r"blocks \[1\] hold no nn.Linear \(or transformers Conv1D\)"):
        calibrate(model, ids, window=2, stride=2, epochs=1, group_size=16, show_progress=False)
    assert not any(p.requires_grad is False for p in decoder_layers(model)[0].parameters())   # refused before touching the model

def tiny_gpt2(n_layers=2, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=n_layers, n_head=4)).eval()

def test_gpt2_conv1d_layers_are_quantized():
    from transformers.pytorch_utils import Conv1D
    model, ids = tiny_gpt2(), tiny_ids()
    conv, x = decoder_layers(model)[0].mlp.c_fc, torch.randn(3, 5, 32, generator=torch.Generator().manual_seed(0))
    y = conv(x)
    block = copy.deepcopy(decoder_layers(model)[0])
    lins = linear_layers(block)
    assert sorted(lins) == ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"]
    assert not any(isinstance(m, Conv1D) for m in block.modules())
    torch.testing.assert_close(lins["mlp.c_fc"](x), y)                 # the same map as the Conv1D it replaced
    assert lins["mlp.c_fc"].weight.shape == (128, 32)                  # (out, in)
    ref = model(ids).logits
    log = calibrate(model, ids, window=2, stride=2, epochs=8, batch_size=4, group_size=16, lr_factor=3e-2, show_progress=False)
    (w,) = log["windows"]
    assert w["loss_final"] < w["loss_init"] and w["loss_final"] < w["loss_rtn"], w
    assert sum(isinstance(m, CatQLinear) for m in model.modules()) == 8
    assert export_model(model) == 8
    y = model(ids).logits
    assert torch.isfinite(y).all() and y.shape == ref.shape
    for quantize in (lambda m: gptq_quantize_(m, ids, [0, 1], 16, batch_size=4),
                     lambda m: sum(rtn_quantize_(b, 16) + mse_quantize_(b, 16) for b in decoder_layers(m))):
        m = tiny_gpt2()
        assert quantize(m) == 8 and torch.isfinite(m(ids).logits).all()

def test_run_seed_equals_separate_runs_and_restores_the_model():
    from maspob_etal.catq import Testbed, run_seed, run_quantizer
    model, ids, ev = tiny_llama(n_layers=3), tiny_ids(), tiny_ids(n=4, seed=5)
    fp_nll = sequence_nll(model, ev, 4)
    bed = Testbed(model, ev, first=1, eval_bs=4)
    common = dict(group_size=16, batch_size=4)
    cq = dict(kind="CAT-Q", window=2, stride=2, epochs=2, lr_factor=3e-2, lora_rank=2, seed=3, **common)
    runs = [dict(kind="GPTQ", layers=[2], **common), dict(cq, layers=[1, 2]), dict(cq, layers=[2], learn_factors=False)]
    res = run_seed(bed, ids, runs, 4)
    assert res["capture_cpu_s"] >= 0 and all(o["cpu_s"] > 0 for o in res["runs"])
    torch.testing.assert_close(torch.tensor(bed.held_out_nll()).float(), fp_nll)          # the model is back at full precision
    rev = run_seed(bed, ids, runs[::-1], 4)["runs"][::-1]                                  # order does not matter
    assert [o["nll"] for o in rev] == [o["nll"] for o in res["runs"]]
    for r, o in zip(runs, res["runs"]):                                                    # each run alone, on a fresh model
        m, r = tiny_llama(n_layers=3), dict(r)
        kind, layers = r.pop("kind"), r.pop("layers")
        if kind == "GPTQ": gptq_quantize_(m, ids, layers, 16, batch_size=4)
        else: calibrate(m, ids, layers=layers, show_progress=False, **r); export_model(m)
        torch.testing.assert_close(torch.tensor(o["nll"]).float(), sequence_nll(m, ev, 4), atol=1e-5, rtol=0)
    assert run_quantizer(bed, "FP", [1])["nll"] == bed.held_out_nll()
    with pytest.raises(ValueError, match="kind must be one of"): run_quantizer(bed, "AWQ", [1])
    with pytest.raises(ValueError, match="start before"): run_quantizer(bed, "RTN", [0, 1])
    with pytest.raises(ValueError, match="needs calib_ids"): run_quantizer(bed, "GPTQ", [1])

def test_run_seeds_same_numbers_in_workers_and_in_this_process(tmp_path):
    "run_seeds: two joblib workers (one thread each, loading the model from its folder) = the same seeds run here."
    from maspob_etal.catq import Testbed, run_seeds
    from maspob_etal.models import load_causal_lm, load_tokenizer
    tiny_llama(n_layers=3).save_pretrained(tmp_path); load_tokenizer().save_pretrained(tmp_path)
    model = load_causal_lm(str(tmp_path), device="cpu")[0]
    ev = tiny_ids(n=4, seed=5)
    common = dict(group_size=16, batch_size=4)
    runs = [dict(kind="RTN", layers=[2], **common),
            dict(kind="CAT-Q", layers=[1, 2], window=2, stride=2, epochs=1, lr_factor=3e-2, lora_rank=2, seed=3, **common)]
    tasks = [dict(calib_ids=tiny_ids(seed=s), runs=runs, batch_size=4, model_path=str(tmp_path), eval_ids=ev, first=1,
                  eval_bs=4) for s in (1, 2)]
    here = run_seeds(tasks, 1, bed=Testbed(model, ev, first=1, eval_bs=4))
    there = run_seeds(tasks, 2)
    assert [[o["nll"] for o in r["runs"]] for r in there] == [[o["nll"] for o in r["runs"]] for r in here]
    assert here[0]["runs"][1]["nll"] != here[1]["runs"][1]["nll"]            # the seeds' calibration data differ
    with pytest.raises(ValueError, match="pass bed="): run_seeds(tasks, 1)
