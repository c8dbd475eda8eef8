"Tests of maspob_etal.phenobrain: routing kernels, regulation, phenotype conditioning, equivariance, the generator, data loading, CV."
import sys, pathlib
import numpy as np
import pandas as pd
import pytest
import scipy.linalg
import torch
import torch.nn.functional as F
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.phenobrain import (BASELINES, PHENO_NAMES, PhenoBrainConfig, PhenoEncoder, RegulatedAttention, binary_metrics,
                                    connectomes_from_timeseries, count_params, cross_validate, gbt_features, gbt_fit_predict,
                                    heat_kernel, hop_powers, kl_regulation, load_connectomes, make_baseline, make_pheno_connectomes,
                                    multihop_kernel, neural_fit_predict, normalized_laplacian, path_strength, save_connectomes,
                                    simulate_timeseries, topk_mask, topk_transition, train_phenobrain)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

def _sym(n, R, seed=0):
    "Random symmetric couplings in (-1, 1) with a zero diagonal, all magnitudes distinct."
    g = torch.Generator().manual_seed(seed)
    A = torch.rand(n, R, R, generator=g)*2 - 1
    A = (A + A.transpose(1, 2))/2
    return A*(1 - torch.eye(R))

@pytest.fixture(scope="module")
def small():
    return make_pheno_connectomes(120, 16, 4, T=120, seed=11)

TCFG = PhenoBrainConfig(n_roi=16, d_pheno_in=len(PHENO_NAMES), d=8, d_p=4, heads=2, hops=3, topk=3, head_hidden=8, dropout=0.0)

# --- routing graph and kernels ------------------------------------------------------------------------------------

def test_topk_mask_keeps_k_strongest_off_diagonal():
    A = _sym(3, 10, 1)
    M = topk_mask(A, 4)
    assert (M.sum(-1) == 4).all() and not M.diagonal(dim1=-2, dim2=-1).any()
    for b in range(3):
        for i in range(10):
            others = [j for j in range(10) if j != i]
            top = sorted(others, key=lambda j: -abs(float(A[b, i, j])))[:4]
            assert set(torch.nonzero(M[b, i]).flatten().tolist()) == set(top)

def test_topk_transition_row_stochastic_with_abs_weights():
    A = _sym(4, 12, 2)
    P, M = topk_transition(A, 3), topk_mask(A, 3)
    sup = M | M.transpose(-1, -2)
    W = A.abs()*sup
    torch.testing.assert_close(P, W/W.sum(-1, keepdim=True))
    torch.testing.assert_close(P.sum(-1), torch.ones(4, 12))
    assert ((P > 0) == sup).all() and (P >= 0).all()

def test_multihop_kernel_one_hot_is_matrix_power_and_simplex_is_stochastic():
    A = _sym(3, 9, 3); P = topk_transition(A, 3)
    for h in range(4):
        torch.testing.assert_close(multihop_kernel(P, torch.eye(4)[h]), torch.linalg.matrix_power(P, h))
    alpha = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1], [0.0, 0.5, 0.0, 0.5]])
    K = multihop_kernel(P, alpha)
    ref = sum(alpha[:, h, None, None]*torch.linalg.matrix_power(P, h) for h in range(4))
    torch.testing.assert_close(K, ref)
    torch.testing.assert_close(K.sum(-1), torch.ones(3, 9))
    torch.testing.assert_close(torch.einsum("bh,bhij->bij", alpha, hop_powers(A, 3, 3)), K)

def test_heat_kernel_matches_scipy_expm():
    A = _sym(3, 8, 4).double(); M = topk_mask(A, 3)
    L = normalized_laplacian(A.abs()*(M | M.transpose(-1, -2)))
    d = (A.abs()*(M | M.transpose(-1, -2))).sum(-1)
    L_ref = torch.eye(8, dtype=torch.float64) - (A.abs()*(M | M.transpose(-1, -2)))/torch.sqrt(d[:, :, None]*d[:, None, :])
    torch.testing.assert_close(L, L_ref)
    tau = torch.tensor([0.2, 1.0, 3.0], dtype=torch.float64)
    H = heat_kernel(L, tau)
    for i in range(3): np.testing.assert_allclose(H[i].numpy(), scipy.linalg.expm(-tau[i].item()*L[i].numpy()), atol=1e-10)
    torch.testing.assert_close(heat_kernel(L, torch.zeros(3, dtype=torch.float64)), torch.eye(8, dtype=torch.float64).expand(3, 8, 8))

@pytest.mark.parametrize("H", [1, 2, 3, 5])
def test_long_range_reach_on_a_path_graph(H):
    path = torch.zeros(1, 8, 8); i = torch.arange(7); path[0, i, i + 1] = path[0, i + 1, i] = 0.5
    K = multihop_kernel(topk_transition(path, 2), torch.full((H + 1,), 1/(H + 1)))
    dist = (torch.arange(8)[:, None] - torch.arange(8)[None]).abs()
    assert ((K[0] > 0) == (dist <= H)).all()

# --- regulation and attention ------------------------------------------------------------------------------------

def test_kl_regulation_matches_torch_kl_div():
    g = torch.Generator().manual_seed(5)
    prior = torch.rand(2, 5, 5, generator=g).softmax(-1)
    prior = prior*(torch.rand(2, 5, 5, generator=g) > 0.3); prior = (prior + 1e-3*torch.eye(5))/(prior + 1e-3*torch.eye(5)).sum(-1, keepdim=True)  # zeros in the prior
    att = torch.rand(2, 3, 5, 5, generator=g).softmax(-1)
    ref = F.kl_div(att.log(), prior[:, None].expand_as(att), reduction="sum")/(2*3*5)
    torch.testing.assert_close(kl_regulation(prior, att), ref)
    assert float(kl_regulation(prior, prior[:, None].expand_as(att))) == pytest.approx(0.0, abs=1e-6)
    assert float(kl_regulation(prior, att)) > 0.01

def test_attention_with_zero_scores_equals_the_prior_and_beta_scales_it():
    g = torch.Generator().manual_seed(6)
    prior = torch.rand(2, 6, 6, generator=g).softmax(-1)
    ra = RegulatedAttention(8, heads=2, dropout=0.0, beta_init=1.0).eval()
    with torch.no_grad(): ra.qkv.weight[:16] = 0; ra.qkv.bias[:16] = 0
    _, att = ra(torch.randn(2, 6, 8, generator=g), prior)
    torch.testing.assert_close(att, prior[:, None].expand_as(att), atol=1e-5, rtol=1e-4)
    with torch.no_grad(): ra.beta.fill_(2.0)
    _, att2 = ra(torch.randn(2, 6, 8, generator=g), prior)
    sq = (prior + ra.eps)**2
    torch.testing.assert_close(att2, (sq/sq.sum(-1, keepdim=True))[:, None].expand_as(att2), atol=1e-5, rtol=1e-4)

# --- the model ---------------------------------------------------------------------------------------------------

def test_baselines_have_parameters_within_ten_percent():
    c = PhenoBrainConfig(n_roi=32, d_pheno_in=7, d=32, d_p=16, heads=2, hops=3, topk=3, head_hidden=32)
    n = {k: count_params(make_baseline(k, c)) for k in BASELINES}
    assert all(abs(v/n["phenobrain"] - 1) <= 0.10 for v in n.values()), n

def test_phenotype_conditioning_is_real(small):
    A = torch.tensor(small["A"][:1]).expand(2, -1, -1)
    p = torch.tensor(small["p"][:1]).repeat(2, 1); p[1, 0] += 2.0; p[1, 6] -= 1.0
    m = torch.ones_like(p)
    pb = make_baseline("phenobrain", TCFG, seed=1).eval()
    o = pb(A, p, m)
    assert not torch.allclose(o["alpha"][0], o["alpha"][1]) and not torch.allclose(o["logits"][0], o["logits"][1])
    lf = make_baseline("late_fusion", TCFG, seed=1).eval()(A, p, m)       # phenotype at the head only: same routing
    torch.testing.assert_close(lf["alpha"][0], lf["alpha"][1]); torch.testing.assert_close(lf["K"][0], lf["K"][1])
    assert not torch.allclose(lf["logits"][0], lf["logits"][1])
    nr = make_baseline("no_routing", TCFG, seed=1).eval()(A, p, m)        # routing shared, prior still phenotype-conditioned
    torch.testing.assert_close(nr["K"][0], nr["K"][1]); assert not torch.allclose(nr["prior"][0], nr["prior"][1])

def test_connectome_only_has_zero_gradient_wrt_phenotype(small):
    A, m = torch.tensor(small["A"][:4]), torch.tensor(small["mask"][:4])
    for kind, zero in (("connectome_only", True), ("phenobrain", False), ("late_fusion", False), ("early_fusion", False)):
        p = torch.tensor(small["p"][:4]).requires_grad_(True)
        make_baseline(kind, TCFG).eval()(A, p, m)["logits"].sum().backward()
        g = torch.zeros_like(p) if p.grad is None else p.grad
        assert (g.abs().sum() == 0) == zero, kind

def test_masked_phenotype_values_do_not_matter(small):
    A, p, m = (torch.tensor(small[k][:6]) for k in ("A", "p", "mask"))
    m = m.clone(); m[:, 0] = 0; m[2, 2:6] = 0
    p2 = p.clone(); p2[:, 0] = 50.0; p2[2, 2:6] = -7.0
    pb = make_baseline("phenobrain", TCFG, seed=2).eval()
    torch.testing.assert_close(pb(A, p, m)["logits"], pb(A, p2, m)["logits"], rtol=0, atol=0)
    enc = PhenoEncoder(7, 4)
    assert not torch.allclose(enc(p, torch.ones_like(p)), enc(p2, torch.ones_like(p)))

@pytest.mark.parametrize("kind", ["phenobrain", "early_fusion"])
def test_roi_permutation_equivariance(small, kind):
    A, p, m = (torch.tensor(small[k][:3]) for k in ("A", "p", "mask"))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(3))
    ref_model, perm_model = make_baseline(kind, TCFG, seed=4).eval(), make_baseline(kind, TCFG, seed=4).eval()
    with torch.no_grad():
        for lin in (perm_model.route.W0, perm_model.route.W1): lin.weight[:, :16] = lin.weight[:, perm]   # ROI-indexed input rows
    o, o_p = ref_model(A, p, m), perm_model(A[:, perm][:, :, perm], p, m)
    torch.testing.assert_close(o_p["H"], o["H"][:, perm], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(o_p["K"], o["K"][:, perm][:, :, perm], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(o_p["logits"], o["logits"], atol=1e-5, rtol=1e-4)

def test_heat_kernel_model_runs_and_tau_depends_on_phenotype(small):
    from dataclasses import replace
    pb = make_baseline("phenobrain", replace(TCFG, kernel="heat"), seed=0).eval()
    A, p, m = (torch.tensor(small[k][:3]) for k in ("A", "p", "mask"))
    o = pb(A, p, m)
    assert o["alpha"].shape == (3, 1) and o["logits"].shape == (3,) and len(set(o["alpha"][:, 0].tolist())) == 3

# --- training: the loss and one AdamW step computed another way ----------------------------------------------------

def test_one_training_step_matches_a_hand_written_step(small):
    idx = np.arange(24)
    c = PhenoBrainConfig(n_roi=16, d_pheno_in=7, d=8, d_p=4, heads=2, hops=3, topk=3, head_hidden=8, dropout=0.0, lambda_reg=0.7)
    trained = train_phenobrain(make_baseline("phenobrain", c, seed=3), small, idx, epochs=1, batch_size=24, lr=1e-2, wd=1e-3)
    ref = make_baseline("phenobrain", c, seed=3).train()
    order = idx[np.random.default_rng([0, 9]).permutation(24)]          # the harness's batch order (seed 0)
    A, p, m, y = (torch.tensor(small[k][order]) for k in ("A", "p", "mask", "y"))
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=1e-3)
    out = ref(A, p, m)                                                  # one batch of all 24 subjects
    loss = F.binary_cross_entropy_with_logits(out["logits"], y.float()) + 0.7*out["reg_loss"]
    opt.zero_grad(); loss.backward(); opt.step()
    for (k, a), b in zip(trained.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=k)

def test_regulation_weight_is_annealed_to_a_tenth(small, monkeypatch):
    "The gradient of the loss with respect to L_reg is lambda: lambda0 at the first epoch, lambda0/10 at the last, linear between."
    c = PhenoBrainConfig(n_roi=16, d_pheno_in=7, d=8, d_p=4, heads=2, hops=3, topk=3, head_hidden=8, dropout=0.0, lambda_reg=0.5)
    model, seen = make_baseline("phenobrain", c, seed=0), []
    orig_forward = model.forward
    def forward(*a, **k):
        o = orig_forward(*a, **k)
        probe = torch.ones((), requires_grad=True)                       # stands for L_reg; its gradient is lambda
        probe.register_hook(lambda g: seen.append(float(g)))
        o["reg_loss"] = probe*o["reg_loss"].detach()/o["reg_loss"].detach()
        return o
    monkeypatch.setattr(model, "forward", forward)
    train_phenobrain(model, small, np.arange(20), epochs=5, batch_size=20)
    np.testing.assert_allclose(seen, [0.5*(1 - 0.9*e/4) for e in range(5)], rtol=1e-6)

# --- generator ---------------------------------------------------------------------------------------------------

def test_simulated_covariance_matches_lyapunov():
    W = np.array([[0.0, 1.0, 0.3], [1.0, 0.0, 0.6], [0.3, 0.6, 0.0]])
    X = simulate_timeseries(np.repeat(W[None], 400, 0), T=300, a=0.8, seed=2)
    emp = np.einsum("nti,ntj->ij", X, X)/(400*300)
    Ah = 0.8*W/np.abs(np.linalg.eigvalsh(W)).max()
    np.testing.assert_allclose(emp, scipy.linalg.solve_discrete_lyapunov(Ah, np.eye(3)), atol=0.08)

@pytest.mark.filterwarnings("ignore:Maximum number of iterations")   # the tangent space's geometric mean on 3 tiny subjects
def test_connectomes_are_correlations(small):
    rng = np.random.default_rng(0)
    ts = [rng.standard_normal((50, 5)) @ rng.standard_normal((5, 5)) for _ in range(3)]
    A = connectomes_from_timeseries(ts, zero_diagonal=False)
    np.testing.assert_allclose(A, np.stack([np.corrcoef(t.T) for t in ts]), atol=1e-8)
    assert np.linalg.eigvalsh(A).min() > -1e-8
    T = connectomes_from_timeseries(ts, kind="tangent", zero_diagonal=False)
    np.testing.assert_allclose(T, T.transpose(0, 2, 1), atol=1e-10)
    Az = small["A"]
    np.testing.assert_allclose(Az, Az.transpose(0, 2, 1), atol=1e-6)
    assert (np.einsum("nii->ni", Az) == 0).all() and (np.abs(Az) <= 1 + 1e-6).all()

def test_generator_plants_the_interaction():
    d = make_pheno_connectomes(400, 32, 4, seed=0)                      # the notebook's smoke cohort
    y, c = d["y"], np.sign(d["age"] - np.median(d["age"]))
    signed = lambda f: roc_auc_score(y, c*(f - np.median(f)))
    true = d["meta"]["true_path"]; meas = path_strength(d["A"], d["meta"]["modules"])
    assert signed(true) >= 0.9 and abs(roc_auc_score(y, true) - 0.5) <= 0.1
    assert signed(meas) >= 0.8 and abs(roc_auc_score(y, meas) - 0.5) <= 0.1
    assert y.sum() == 200 and abs(np.corrcoef(y, d["age"])[0, 1]) < 0.15
    miss = 1 - d["mask"][:, [0, 1, 2, 6]].mean(0)
    assert ((miss > 0.05) & (miss < 0.15)).all() and (d["mask"][:, 2:6].std(1) == 0).all()   # a site is missing as a block

def test_path_strength_known_value():
    A = np.zeros((1, 8, 8)); mods = np.repeat(np.arange(4), 2)
    for (i, j), v in {(0, 1): 0.2, (1, 2): 0.4, (2, 3): 0.6, (0, 3): -0.3}.items():
        A[0, mods == i][:, mods == j] = 0
        A[0][np.ix_(mods == i, mods == j)] = v; A[0][np.ix_(mods == j, mods == i)] = v
    iu = np.triu_indices(8, 1)
    np.testing.assert_allclose(path_strength(A, mods), [(0.2 + 0.4 + 0.6)/3 - A[0][iu].mean()])

# --- own data and bad input --------------------------------------------------------------------------------------

def test_load_connectomes_round_trip_and_encoding(tmp_path, small):
    A = small["A"][:4]
    save_connectomes(tmp_path/"c.npz", A, ["a", "b", "c", "d"])
    pd.DataFrame({"subject_id": ["d", "c", "b", "a"], "label": [1, 0, 1, 0], "age": [10.0, 20.0, None, 40.0],
                  "site": [2, 1, 2, 2]}).to_csv(tmp_path/"p.csv", index=False)
    d = load_connectomes(tmp_path/"c.npz", tmp_path/"p.csv", categorical=["site"])
    np.testing.assert_allclose(d["A"], A)
    assert d["y"].tolist() == [0, 1, 0, 1] and d["meta"]["pheno_names"] == ("age", "site=1", "site=2")
    ages = np.array([40.0, np.nan, 20.0, 10.0]); z = (ages - np.nanmean(ages))/np.nanstd(ages)
    np.testing.assert_allclose(d["p"][:, 0], np.nan_to_num(z), rtol=1e-6)
    assert d["mask"][:, 0].tolist() == [1, 0, 1, 1] and d["p"][:, 1:].tolist() == [[0, 1], [0, 1], [1, 0], [0, 1]]

def test_bad_input_raises_clear_errors(tmp_path, small):
    pd.DataFrame({"label": [0, 1, 0], "age": [1.0, 2.0, 3.0]}).to_csv(tmp_path/"p.csv", index=False)
    np.savez(tmp_path/"nonsq.npz", connectomes=np.zeros((3, 4, 5)))
    with pytest.raises(ValueError, match="square"): load_connectomes(tmp_path/"nonsq.npz", tmp_path/"p.csv")
    asym = np.zeros((3, 4, 4)); asym[:, 0, 1] = 0.5
    np.savez(tmp_path/"asym.npz", connectomes=asym)
    with pytest.raises(ValueError, match="symmetric"): load_connectomes(tmp_path/"asym.npz", tmp_path/"p.csv")
    np.savez(tmp_path/"two.npz", connectomes=np.zeros((2, 4, 4)))
    with pytest.raises(ValueError, match="3 rows but"): load_connectomes(tmp_path/"two.npz", tmp_path/"p.csv")
    with pytest.raises(FileNotFoundError, match="does not exist"): load_connectomes(tmp_path/"nope.npz", tmp_path/"p.csv")
    A = torch.tensor(small["A"][:2])
    with pytest.raises(ValueError, match=r"k must be in \[1, n_roi - 1\]"): topk_transition(A, 16)
    with pytest.raises(ValueError, match="topk must be in"): PhenoBrainConfig(n_roi=16, d_pheno_in=7, topk=16)
    with pytest.raises(ValueError, match="kernel must be one of"): PhenoBrainConfig(n_roi=16, d_pheno_in=7, topk=3, kernel="rw")
    with pytest.raises(ValueError, match="kind must be one of"): make_baseline("gat", TCFG)
    pb = make_baseline("phenobrain", TCFG)
    with pytest.raises(ValueError, match="p must have shape"): pb(A, torch.tensor(small["p"][:3]), torch.tensor(small["mask"][:3]))
    with pytest.raises(ValueError, match="A must have shape"): pb(A[:, :, :15], torch.tensor(small["p"][:2]))
    with pytest.raises(ValueError, match="delta must be in"): make_pheno_connectomes(10, 16, 4, delta=1.5)

def test_bad_sizes_and_options_say_what_to_fix(small):
    with pytest.raises(ValueError, match="sizes must be positive"): PhenoBrainConfig(n_roi=16, d_pheno_in=7, d=0, topk=3)
    with pytest.raises(ValueError, match="sizes must be positive"): PhenoBrainConfig(n_roi=16, d_pheno_in=7, heads=0, topk=3)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\)"): PhenoBrainConfig(n_roi=16, d_pheno_in=7, topk=3, dropout=1.0)
    with pytest.raises(ValueError, match="n_subjects >= 2 and T >= 2"): make_pheno_connectomes(1, 16, 4)
    with pytest.raises(ValueError, match="equal length"): binary_metrics(np.array([0, 1, 1]), np.array([0.2, 0.8]))
    with pytest.raises(ValueError, match="max_folds must be"): cross_validate({}, small, n_folds=3, max_folds=0)

# --- evaluation --------------------------------------------------------------------------------------------------

def test_binary_metrics_known_values():
    m = binary_metrics(np.array([1, 1, 1, 0, 0, 0, 0]), np.array([0.9, 0.6, 0.3, 0.7, 0.2, 0.1, 0.55]))
    assert m == pytest.approx(dict(acc=4/7, auc=9/12, sens=2/3, spec=2/4))

def test_gbt_features_layout(small):
    X = gbt_features(small)
    assert X.shape == (120, 16*15//2 + 2*7)
    np.testing.assert_array_equal(X[:, 0], small["A"][:, 0, 1]); np.testing.assert_array_equal(X[:, -7:], small["mask"])

def test_cross_validation_is_deterministic_and_paired(small):
    models = {"phenobrain": neural_fit_predict("phenobrain", TCFG, epochs=1, batch_size=32), "gbt": gbt_fit_predict(max_iter=5)}
    r1 = cross_validate(models, small, n_folds=3, seed=2, max_folds=2)
    r2 = cross_validate(models, small, n_folds=3, seed=2, max_folds=2)
    pd.testing.assert_frame_equal(r1, r2)
    assert r1.groupby("fold").model.apply(set).tolist() == [{"phenobrain", "gbt"}]*2
    assert set(models["phenobrain"].models) == {200, 201}

def test_training_is_thread_independent():
    assert_thread_independent("""
import numpy as np
from maspob_etal.phenobrain import PhenoBrainConfig, make_pheno_connectomes, cross_validate, neural_fit_predict
d = make_pheno_connectomes(45, 16, 4, T=40, seed=1)
c = PhenoBrainConfig(n_roi=16, d_pheno_in=7, d=16, d_p=8, heads=2, hops=3, topk=3, head_hidden=16)
r = cross_validate({"pb": neural_fit_predict("phenobrain", c, epochs=2, batch_size=16)}, d, n_folds=3, seed=0, max_folds=1)
result = [float(v) for v in r[["acc", "auc", "sens", "spec"]].values.ravel()] + [float(d["A"].sum())]
""")

# --- the model routes each subject on its own (issue 38: a softmax over the batch passed every test) ----------------

@pytest.mark.parametrize("kind", BASELINES)
def test_hop_weights_on_the_simplex_kernel_stochastic_and_logits_independent_of_the_batch(small, kind):
    A, p, m = (torch.tensor(small[k][:10]) for k in ("A", "p", "mask"))
    model = make_baseline(kind, TCFG, seed=7).eval()
    with torch.no_grad():
        o = model(A, p, m)
        alpha, K = o["alpha"], o["K"]
        assert alpha.shape == (10, TCFG.hops + 1) and (alpha >= 0).all()
        torch.testing.assert_close(alpha.sum(-1), torch.ones(10))                    # each subject: a mixture over hops
        assert (K >= 0).all()
        torch.testing.assert_close(K.sum(-1), torch.ones(10, 16))                     # row-stochastic kernel
        torch.testing.assert_close(K, torch.einsum("bh,bhij->bij", alpha, hop_powers(A, TCFG.topk, TCFG.hops)))
        if o["prior"] is not None: torch.testing.assert_close(o["prior"].sum(-1), torch.ones(10, 16))
        perm = torch.randperm(10, generator=torch.Generator().manual_seed(0))
        o_perm = model(A[perm], p[perm], m[perm])
        torch.testing.assert_close(o_perm["logits"], o["logits"][perm])               # permuting the batch
        torch.testing.assert_close(o_perm["alpha"], alpha[perm])
        split = torch.cat([model(A[s], p[s], m[s])["logits"] for s in (slice(0, 1), slice(1, 4), slice(4, 10))])
        torch.testing.assert_close(split, o["logits"])                                # splitting it, a batch of one included
        torch.testing.assert_close(model(A, p, m, hop_powers(A, TCFG.topk, TCFG.hops))["logits"], o["logits"])
    if kind in ("phenobrain", "no_regulation"): assert alpha.std(0).max() > 1e-4      # hop weights differ between subjects
    else: torch.testing.assert_close(alpha, alpha[:1].expand_as(alpha))              # one shared mixture

def test_heat_kernel_model_is_independent_of_the_batch(small):
    from dataclasses import replace
    model = make_baseline("phenobrain", replace(TCFG, kernel="heat"), seed=1).eval()
    A, p, m = (torch.tensor(small[k][:6]) for k in ("A", "p", "mask"))
    with torch.no_grad():
        o = model(A, p, m)
        split = torch.cat([model(A[s], p[s], m[s])["logits"] for s in (slice(0, 1), slice(1, 6))])
    torch.testing.assert_close(split, o["logits"])

# --- the regime knob ---------------------------------------------------------------------------------------------

def test_regime_knob_moves_the_label_effect_from_the_connectome_to_the_interaction():
    d0, d5, d1 = (make_pheno_connectomes(300, 16, 4, T=100, seed=2, pheno_dependence=g) for g in (0.0, 0.5, 1.0))
    for d in (d5, d1):                                                # the same cohort at every gamma
        for k in ("y", "p", "mask", "age", "site"): np.testing.assert_array_equal(d[k], d0[k])
    y, c = d0["y"], np.sign(d0["age"] - np.median(d0["age"]))
    np.testing.assert_allclose(d0["meta"]["bridge_scale"], 1 + 0.7*(2*y - 1))
    np.testing.assert_allclose(d5["meta"]["bridge_scale"], 1 + 0.7*(2*y - 1)*(0.5 + 0.5*c))
    np.testing.assert_allclose(d1["meta"]["bridge_scale"], 1 + 0.7*(2*y - 1)*c)
    assert roc_auc_score(y, d0["meta"]["true_path"]) >= 0.9           # gamma 0: the connectome alone decides
    assert abs(roc_auc_score(y, d1["meta"]["true_path"]) - 0.5) <= 0.1  # gamma 1: alone it says nothing
    with pytest.raises(ValueError, match="pheno_dependence must be in"): make_pheno_connectomes(10, 16, 4, pheno_dependence=-0.1)

# --- tuning alike ------------------------------------------------------------------------------------------------

def test_every_model_gets_a_nine_point_grid_picked_on_validation(small):
    from maspob_etal.phenobrain import select_neural, select_gbt, select_logistic, select_best, split_indices, phenotype_features
    tr, va, te = split_indices(small, seed=1)
    assert len(set(tr) | set(va) | set(te)) == 120 and not (set(tr) & set(va) or set(tr) & set(te) or set(va) & set(te))
    assert (len(tr), len(va), len(te)) == (72, 24, 24) and small["y"][te].sum() == 12
    grids = [select_neural("late_fusion", TCFG, small, tr, va, te, budgets=(1, 2, 3), batch_size=72),
             select_gbt(small, tr, va, te, budgets=(2, 4, 6)), select_logistic(phenotype_features(small), small["y"], tr, va, te, "lr")]
    assert [len(g) for g in grids] == [9, 9, 9]
    for g in grids:
        best = select_best(g.assign(seed=0, gamma=1.0))
        assert len(best) == 1 and best.val_auc.iloc[0] == g.val_auc.max()
        assert best.index.equals(pd.RangeIndex(1)) and best.lr.iloc[0] == g.loc[g.val_auc.idxmax(), "lr"]

def test_checkpoints_do_not_change_the_trajectory(small):
    from maspob_etal.phenobrain import predict_proba
    seen = []
    a = train_phenobrain(make_baseline("phenobrain", TCFG, 2), small, np.arange(40), epochs=3, batch_size=16, lr=3e-3,
                         checkpoint=lambda ep, m: seen.append((ep, m.training)))
    b = train_phenobrain(make_baseline("phenobrain", TCFG, 2), small, np.arange(40), epochs=3, batch_size=16, lr=3e-3)
    assert seen == [(1, False), (2, False), (3, False)]
    np.testing.assert_array_equal(predict_proba(a, small, np.arange(40, 60)), predict_proba(b, small, np.arange(40, 60)))

def test_run_cohort_pairs_models_along_the_regime():
    from maspob_etal.phenobrain import run_cohort, select_best
    gen = dict(n_subjects=60, n_roi=16, n_networks=4, T=60)
    df = run_cohort(3, (0.0, 1.0), gen, TCFG, {0.0: ("phenobrain",), 1.0: ("phenobrain", "no_routing", "gbt")},
                    lrs=(3e-3,), budgets=(1, 2), gbt_lrs=(0.1,), gbt_budgets=(1, 2), Cs=(1.0,))
    best = select_best(df)
    assert sorted(map(tuple, best[["gamma", "model"]].values.tolist())) == sorted(
        [(0.0, "oracle_lr"), (0.0, "phenotype_lr"), (0.0, "phenobrain"),
         (1.0, "oracle_lr"), (1.0, "phenotype_lr"), (1.0, "phenobrain"), (1.0, "no_routing"), (1.0, "gbt")])
    assert (df.seed == 3).all() and df.groupby(["gamma", "model"]).size().max() == 2
