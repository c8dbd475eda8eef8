"Tests of maspob_etal.lora_convergence: the stacked algebra, an independent peft LoRA step, Lemmas 3.3, 3.4 and 3.6, constants, schedules, trajectories against an autograd reference, the certificate (Theorem 3.5), thread and worker independence, errors, the LLM path at tiny size, the |V0| knob, and the notebook's presets and prose."
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import pathlib, sys
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.lora_convergence import (
    SCHEDULES, J_and_grad, LeastSquaresLoss, SoftmaxLoss, add_lora, autograd_loss_grad, block_stack, certificate, column_blocks,
    descent_rhs, digits_data, extraction, first_lora_layer, first_step_alpha, grad_J_sym, init_V, least_squares_problem,
    lm_batch_loss, lm_loss, lora_gd, lora_gd_multi, lora_layers, lora_llm_schedules, lora_product, lora_sgd, lora_sgd_arms,
    multi_J_and_grad, prefix_states, pydoc_text, reset_lora, run_llm_tasks, softmax_regression_problem, stack, step_size,
    step_size_from_norms, text_batches, theory_L, unstack)

f64 = torch.float64
pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny products: a second thread only spins

def quad_problem(m, n, seed=0):
    "L(X) = 1/2 |X - X*|^2, smoothness constant 1."
    X_star = torch.randn(m, n, dtype=f64, generator=torch.Generator().manual_seed(seed))
    return autograd_loss_grad(lambda X: 0.5*((X - X_star)**2).sum((-2, -1))), X_star

def small_softmax(seed=0, N=200, d=12, k=5):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(N, d, dtype=f64, generator=g)
    y = torch.randint(0, k, (N,), generator=g)
    return softmax_regression_problem(X, y)

# --- algebra ---------------------------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 7), n=st.integers(1, 7), r=st.integers(1, 4), batch=st.integers(0, 3), seed=st.integers(0, 10**6))
def test_stacked_identities(m, n, r, batch, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (batch,) if batch else ()
    B, A = torch.randn(*shape, m, r, dtype=f64, generator=g), torch.randn(*shape, r, n, dtype=f64, generator=g)
    V = stack(B, A)
    assert V.shape == (*shape, m + n, r)
    B2, A2 = unstack(V, m)
    assert torch.equal(B2, B) and torch.equal(A2, A)                 # exact roundtrip
    E1, E2 = extraction(m, n)
    assert torch.allclose(E1 @ V @ V.transpose(-1, -2) @ E2, B @ A, atol=1e-12)
    assert torch.allclose(lora_product(V, m), B @ A, atol=1e-12)

def test_gradient_closed_forms_equal_autograd():
    g = torch.Generator().manual_seed(1)
    m, n, r = 5, 7, 3
    loss_grad, X_star = quad_problem(m, n)
    for V in torch.randn(20, m + n, r, dtype=f64, generator=g):
        J, gJ, G = J_and_grad(V, m, loss_grad)
        Vr = V.clone().requires_grad_(True)
        E1, E2 = extraction(m, n)
        gJ_auto, = torch.autograd.grad(0.5*((E1 @ Vr @ Vr.T @ E2 - X_star)**2).sum(), Vr)
        assert torch.allclose(gJ, gJ_auto, atol=1e-10, rtol=0)
        assert torch.allclose(grad_J_sym(V, m, G), gJ, atol=1e-10, rtol=0)

def test_softmax_closed_form_gradient_equals_autograd():
    loss, _ = small_softmax()
    W = torch.randn(3, 5, 12, dtype=f64, generator=torch.Generator().manual_seed(2))
    J, G = loss(W)
    J_ref = torch.stack([torch.nn.functional.cross_entropy(loss.X @ w.T, loss.Yt.argmax(0)) for w in W])
    G_ref = autograd_loss_grad(lambda W: torch.stack([torch.nn.functional.cross_entropy(loss.X @ w.T, loss.Yt.argmax(0)) for w in W]))(W)[1]
    assert torch.allclose(J, J_ref, atol=1e-12) and torch.allclose(G, G_ref, atol=1e-12)

# --- independent library: one peft LoRA SGD step ---------------------------------------------------------------

def test_one_V_space_step_equals_one_peft_sgd_step():
    from peft import LoraConfig, get_peft_model

    class Net(torch.nn.Module):
        def __init__(self, n, m):
            super().__init__(); self.lin = torch.nn.Linear(n, m, bias=False)
        def forward(self, x): return self.lin(x)

    torch.manual_seed(0)
    N, m, n, r, eta = 64, 6, 9, 3, 0.05
    g = torch.Generator().manual_seed(3)
    Xin, Y = torch.randn(N, n, dtype=f64, generator=g), torch.randn(N, m, dtype=f64, generator=g)
    W0 = torch.randn(m, n, dtype=f64, generator=g)
    B0, A0 = 0.5*torch.randn(m, r, dtype=f64, generator=g), 0.5*torch.randn(r, n, dtype=f64, generator=g)

    net = get_peft_model(Net(n, m), LoraConfig(r=r, lora_alpha=r, lora_dropout=0.0, target_modules=["lin"])).double()
    (A_w, B_w, base_w), = lora_layers(net)
    with torch.no_grad(): base_w.copy_(W0); A_w.copy_(A0); B_w.copy_(B0)
    base_w.requires_grad_(True)                                       # to compare grad_W0 with grad_{BA}
    opt = torch.optim.SGD([A_w, B_w], lr=eta, momentum=0.0)
    loss = 0.5*((net(Xin) - Y)**2).sum()/N
    loss.backward()
    G_base = base_w.grad.clone()
    opt.step()

    # ours: W0 absorbed into L, one GD step on V = [B; A^T]
    loss_grad = autograd_loss_grad(lambda D: 0.5*((Xin @ (W0 + D).transpose(-1, -2) - Y)**2).sum((-2, -1))/N)
    V = stack(B0, A0)
    J, gJ, G = J_and_grad(V, m, loss_grad)
    B1, A1 = unstack(V - eta*gJ, m)
    assert abs(J.item() - loss.item()) < 1e-10
    assert torch.allclose(B_w.detach(), B1, atol=1e-10, rtol=0)
    assert torch.allclose(A_w.detach(), A1, atol=1e-10, rtol=0)
    assert torch.allclose(G_base, G, atol=1e-10, rtol=0)             # grad wrt the base weight is grad_W L

# --- stationary origin -----------------------------------------------------------------------------------------

def test_origin_is_stationary():
    loss_grad, _ = quad_problem(4, 6)
    _, gJ, _ = J_and_grad(torch.zeros(10, 2, dtype=f64), 4, loss_grad)
    assert gJ.abs().max().item() == 0.0
    for sched, kw in (("constant", dict(alpha=0.7)), ("theory", dict(L=1.0)), ("normalized", dict(alpha=0.06))):
        h = lora_gd(loss_grad, 4, 6, 2, T=100, schedule=sched, init="zeros", **kw)
        assert h["V"].abs().max().item() == 0.0 and not h["diverged"].any()

# --- Lemma 3.3 and Lemma 3.4 -----------------------------------------------------------------------------------

def _random_pairs(n_pairs, m, n, r, seed):
    g = torch.Generator().manual_seed(seed)
    def scaled(): 
        Z = torch.randn(n_pairs, m + n, r, dtype=f64, generator=g)
        target = 10**(4*torch.rand(n_pairs, dtype=f64, generator=g) - 2)          # norms spanning 1e-2 .. 1e2
        return Z*(target/Z.flatten(1).norm(dim=1))[:, None, None]
    V1 = scaled()
    return V1, V1 + scaled()

@pytest.mark.parametrize("problem", ["quadratic", "softmax"])
def test_lemma_3_3_on_5000_random_pairs(problem):
    if problem == "quadratic":
        m, n, r = 4, 6, 3
        loss_grad, _ = quad_problem(m, n); L = 1.0
    else:
        loss_grad, L = small_softmax(); m, n, r = 5, 12, 3
    V1, V2 = _random_pairs(5000, m, n, r, seed=7)
    assert V1.flatten(1).norm(dim=1).min() < 0.02 and V1.flatten(1).norm(dim=1).max() > 50
    J1, gJ1, G1 = J_and_grad(V1, m, loss_grad)
    J2 = J_and_grad(V2, m, loss_grad)[0]
    for constants in ("paper", "conservative"):
        rhs = descent_rhs(J1, gJ1, V1, V2, G1, L, constants)
        assert torch.isfinite(rhs).all()
        viol = J2 > rhs + 1e-10*rhs.abs().clamp_min(1)
        assert int(viol.sum()) == 0, f"{problem}/{constants}: {int(viol.sum())} violations"

@pytest.mark.parametrize("problem", ["quadratic", "softmax"])
def test_lemma_3_4_one_theory_step_on_3000_points(problem):
    if problem == "quadratic":
        m, n, r = 4, 6, 3
        loss_grad, _ = quad_problem(m, n, seed=1); L = 1.0
    else:
        loss_grad, L = small_softmax(seed=1); m, n, r = 5, 12, 3
    V = _random_pairs(3000, m, n, r, seed=8)[0]
    J, gJ, G = J_and_grad(V, m, loss_grad)
    eta = step_size("theory", V=V, G=G, L=L)
    J_next = J_and_grad(V - eta[:, None, None]*gJ, m, loss_grad)[0]
    decrease, required = J - J_next, eta/4*(gJ**2).sum((-2, -1))
    assert (decrease >= required - 1e-12*J.abs().clamp_min(1)).all()
    ratio = (decrease/required)[required > 1e-14]
    assert ratio.min() >= 1.0

def test_theory_gd_is_monotone_and_certificate_holds():
    loss, L, L_star = least_squares_problem(seed=1)
    h = lora_gd(loss, 8, 20, 2, T=300, schedule="theory", L=L, init="gaussian", seed=[0, 1, 2])
    assert (h["slack"] >= -1e-10*h["J"][:-1].abs().clamp_min(1)).all()
    assert (h["J"][1:] <= h["J"][:-1]).all()
    c = certificate(h, L_star=L_star)
    assert c["holds"].all() and (c["bound"] > 0).all()
    h_cl = lora_gd(loss, 8, 20, 2, T=300, schedule="constant", alpha=1/L, init="gaussian", seed=[0, 1, 2])
    assert h_cl["diverged"].all()                                   # the classical step from a large start blows up

def test_batched_run_equals_single_runs_and_is_reproducible():
    loss, L, _ = least_squares_problem(N=100, seed=2)
    hb = lora_gd(loss, 8, 20, 2, T=50, schedule="theory", L=L, seed=[3, 4])
    for i, s in enumerate((3, 4)):
        h = lora_gd(loss, 8, 20, 2, T=50, schedule="theory", L=L, seed=s)
        assert torch.allclose(hb["J"][:, i], h["J"], atol=1e-12, rtol=0)
        assert torch.allclose(hb["V"][i], h["V"], atol=1e-12, rtol=0)
    assert torch.equal(lora_gd(loss, 8, 20, 2, T=50, schedule="theory", L=L, seed=[3, 4])["V"], hb["V"])   # same seeds, same numbers

@pytest.mark.parametrize("problem", ["least squares", "digits"])
def test_certificate_of_theorem_3_5_holds_in_every_theory_run(problem):
    "Theorem 3.5 (the former claim C2): min_t |grad J|^2 <= 4 (J0 - L*) / sum eta, from both starts, several seeds."
    if problem == "least squares":
        loss, L, L_star = least_squares_problem(seed=3); m, n, r = 8, 20, 2
        L_stars = (0.0, loss.rank_r_min(r))
    else:
        X, y = digits_data(); loss, L = softmax_regression_problem(X[:200], y[:200]); m, n, r = 10, 64, 4
        L_stars = (0.0,)
    V0 = torch.stack([init_V(m, n, r, "gaussian", [0, 1, 2]), init_V(m, n, r, "kaiming_B0", [0, 1, 2])])
    h = lora_gd(loss, m, n, r, T=120, schedule="theory", L=L, V0=V0)
    assert (h["J"][1:] <= h["J"][:-1] + 1e-12).all()                 # Lemma 3.4 makes every step a descent step
    for Ls in L_stars:
        c = certificate(h, L_star=Ls)
        assert c["holds"].all() and (c["min_grad_sq"] > 0).all() and (c["bound"] < np.inf).all()
        assert (c["running_min"] <= c["running_bound"]).all()           # at every T, not only the last

# --- lora_gd against an independent implementation ---------------------------------------------------------------

def _reference_lora_gd(loss_fn, B0, A0, T, schedule, alpha=None, L=None, cap=1.0):
    "Simultaneous LoRA GD on (B, A) written from scratch: autograd gradients in float64, each step size from its formula."
    B, A, Js = B0.clone(), A0.clone(), []
    for t in range(T + 1):
        Bv, Av = B.clone().requires_grad_(True), A.clone().requires_grad_(True)
        X = Bv @ Av
        J = loss_fn(X)
        gB, gA, G = torch.autograd.grad(J, (Bv, Av, X))
        Js.append(J.item())
        if t == T: break
        v_sq = (B**2).sum() + (A**2).sum()                              # |V|^2 = |B|^2 + |A|^2
        if schedule == "theory": eta = 1/(4*math.sqrt(2)*L*(v_sq + G.norm()))
        elif schedule == "constant": eta = float(alpha)
        elif schedule == "adaptive": eta = alpha/(v_sq + G.norm())
        elif schedule == "adaptive2": eta = alpha/(v_sq + J.detach().sqrt())
        else: eta = alpha/((gB**2).sum() + (gA**2).sum()).sqrt().sqrt()
        eta = min(float(eta), cap)
        B, A = B - eta*gB, A - eta*gA
    return torch.tensor(Js, dtype=f64), stack(B, A)

@pytest.mark.parametrize("schedule", SCHEDULES)
def test_lora_gd_trajectory_equals_autograd_reference(schedule):
    "Every schedule: 40 steps of lora_gd (closed-form gradients) against the from-scratch autograd loop, on a softmax "
    "regression with a non-zero frozen W0 and bias (so every term of the gradient matters) and a start with |V| != 1."
    g = torch.Generator().manual_seed(11)
    N, k, d, r = 120, 5, 9, 3
    Xin, y = torch.randn(N, d, dtype=f64, generator=g), torch.randint(0, k, (N,), generator=g)
    W0, b0 = 0.3*torch.randn(k, d, dtype=f64, generator=g), 0.5*torch.randn(k, dtype=f64, generator=g)
    ref_loss = lambda X: torch.nn.functional.cross_entropy(Xin @ (W0 + X).T + b0, y)
    ours_loss = SoftmaxLoss(Xin, y, W0, b0)
    V0 = init_V(k, d, r, "gaussian", seed=4, std=0.7)
    B0, A0 = unstack(V0, k)
    assert abs((V0**2).sum().item() - 1) > 1
    kw = dict(theory=dict(L=ours_loss.L_upper), constant=dict(alpha=0.4), adaptive=dict(alpha=3.0), adaptive2=dict(alpha=3.0),
              normalized=dict(alpha=0.3))[schedule]
    h = lora_gd(ours_loss, k, d, r, T=40, schedule=schedule, V0=V0, **kw)
    J_ref, V_ref = _reference_lora_gd(ref_loss, B0, A0, 40, schedule, **kw)
    assert (h["eta"] < 1).any()                                     # the formula, not only the cap, sets the steps
    assert torch.allclose(h["J"], J_ref, rtol=1e-10, atol=1e-12)
    assert torch.allclose(h["V"], V_ref, rtol=1e-9, atol=1e-11)
    assert h["J"][-1] < h["J"][0]

def test_lora_gd_least_squares_trajectory_equals_autograd_reference():
    "The closed-form least-squares gradient WS - C inside lora_gd against autograd of |X W^T - Y|^2/(2N)."
    g = torch.Generator().manual_seed(6)
    Xin, Y = torch.randn(80, 7, dtype=f64, generator=g), torch.randn(80, 4, dtype=f64, generator=g)
    loss = LeastSquaresLoss(Xin, Y)
    ref = lambda W: 0.5*((Xin @ W.T - Y)**2).sum()/80
    V0 = init_V(4, 7, 2, "gaussian", seed=1, std=0.5)
    for sched, kw in (("theory", dict(L=loss.L_smooth)), ("adaptive", dict(alpha=0.5))):
        h = lora_gd(loss, 4, 7, 2, T=30, schedule=sched, V0=V0, **kw)
        J_ref, V_ref = _reference_lora_gd(ref, *unstack(V0, 4), 30, sched, **kw)
        assert torch.allclose(h["J"], J_ref, rtol=1e-10, atol=1e-12) and torch.allclose(h["V"], V_ref, rtol=1e-9, atol=1e-11)

def test_step_sizes_from_matrices_with_non_unit_norms():
    "step_size on matrices whose norms are not 1: |V|^2 = 13, |G| = 5, L(W) = 2.25, |grad J| = 4."
    V = torch.tensor([[1., 2.], [0., 2.], [2., 0.]], dtype=f64)          # m + n = 3, r = 2
    G = torch.tensor([[3., 4.]], dtype=f64)                             # m = 1, n = 2
    gJ = torch.tensor([[2., 2.], [2., 2.], [0., 0.]], dtype=f64)
    ss = lambda s, **kw: float(step_size(s, V=V, G=G, loss=2.25, gradJ=gJ, **kw))
    assert ss("theory", L=0.5) == pytest.approx(1/(4*math.sqrt(2)*0.5*(13 + 5)))
    assert ss("adaptive", alpha=2.0) == pytest.approx(2/(13 + 5))
    assert ss("adaptive2", alpha=2.0) == pytest.approx(2/(13 + 1.5))
    assert ss("normalized", alpha=0.5) == pytest.approx(0.5/2)
    assert ss("constant", alpha=0.3) == pytest.approx(0.3)
    assert ss("adaptive", alpha=100.0) == 1.0 and ss("adaptive", alpha=100.0, cap=2.5) == 2.5
    Vb = torch.stack([V, 2*V])                                           # a batch: |V|^2 = 13 and 52
    eta = step_size("adaptive2", V=Vb, loss=torch.tensor([2.25, 4.0], dtype=f64), alpha=2.0)
    assert torch.allclose(eta, torch.tensor([2/14.5, 2/54], dtype=f64))

# --- Lemma 3.6: several adapted matrices ------------------------------------------------------------------------

def _reference_multi_theory_gd(loss_fn, BAs, T, L, cap=1.0):
    "LoRA GD on several (B_i, A_i) pairs written from scratch: autograd through the joint loss, the theory step with 2L."
    Bs, As, Js = [B.clone() for B, _ in BAs], [A.clone() for _, A in BAs], []
    k = len(Bs)
    for t in range(T + 1):
        Bv, Av = [B.clone().requires_grad_(True) for B in Bs], [A.clone().requires_grad_(True) for A in As]
        Xs = [B @ A for B, A in zip(Bv, Av)]
        J = loss_fn(Xs)
        grads = torch.autograd.grad(J, Bv + Av + Xs)
        gB, gA, G = grads[:k], grads[k:2*k], grads[2*k:]
        Js.append(J.item())
        if t == T: break
        v_sq = sum((B**2).sum().item() for B in Bs) + sum((A**2).sum().item() for A in As)   # |V|^2 of the stacked V
        g_norm = math.sqrt(sum((g**2).sum().item() for g in G))                              # |(G_1, ..., G_k)|
        eta = min(1/(4*math.sqrt(2)*(2*L)*(v_sq + g_norm)), cap)                               # Lemma 3.4 with 2L (Lemma 3.6)
        Bs, As = [B - eta*g for B, g in zip(Bs, gB)], [A - eta*g for A, g in zip(As, gA)]
    return torch.tensor(Js, dtype=f64), [stack(B, A) for B, A in zip(Bs, As)]

def test_lemma_3_6_several_matrices_equal_an_autograd_reference_with_2L():
    "Three adapted matrices of different widths and ranks, coupled through one least-squares loss with a frozen W0: every "
    "block's gradient, the summed norms and the constant 2L set the trajectory."
    g = torch.Generator().manual_seed(21)
    N, m, sizes, ranks = 60, 5, [3, 6, 4], [1, 3, 2]
    X, Y = torch.randn(N, sum(sizes), dtype=f64, generator=g), torch.randn(N, m, dtype=f64, generator=g)
    W0 = 0.3*torch.randn(m, sum(sizes), dtype=f64, generator=g)
    ref_loss = lambda Xs: 0.5*((X @ (W0 + torch.cat(Xs, -1)).T - Y)**2).sum()/N
    ours = column_blocks(autograd_loss_grad(lambda D: 0.5*((X @ (W0 + D).transpose(-1, -2) - Y)**2).sum((-2, -1))/N), sizes)
    L = torch.linalg.eigvalsh(X.T @ X/N)[-1].item()
    V0s = [init_V(m, n, r, "gaussian", seed=i, std=0.6) for i, (n, r) in enumerate(zip(sizes, ranks))]
    h = lora_gd_multi(ours, [(m, n, r) for n, r in zip(sizes, ranks)], T=30, schedule="theory", L=L, V0s=V0s)
    J_ref, V_ref = _reference_multi_theory_gd(ref_loss, [unstack(V, m) for V in V0s], 30, L)
    assert torch.allclose(h["J"], J_ref, rtol=1e-10, atol=1e-12)
    for V, Vr in zip(h["Vs"], V_ref): assert torch.allclose(V, Vr, rtol=1e-9, atol=1e-11)
    assert (h["eta"] < 1).all() and (h["slack"] >= 0).all() and h["J"][-1] < h["J"][0]
    # the same step from the norms: the sum over the matrices, 2L
    J0, gJs, Gs = multi_J_and_grad(V0s, [m]*3, ours)
    v_sq = sum((V**2).sum() for V in V0s); g_norm = sum((G**2).sum() for G in Gs).sqrt()
    assert float(h["eta"][0]) == pytest.approx(1/(4*math.sqrt(2)*2*L*(v_sq + g_norm)).item(), rel=1e-12)
    assert float(step_size_from_norms("theory", V_sq=v_sq, G_norm=g_norm, L=L, n_matrices=3)) == pytest.approx(float(h["eta"][0]), rel=1e-12)

def test_lemma_3_6_stacking_is_one_block_diagonal_matrix():
    "Block-wise stacking: BA = diag(B_i A_i), and LoRA GD on two matrices is GD on the one block-diagonal V with constant 2L."
    g = torch.Generator().manual_seed(22)
    Bs = [torch.randn(3, 2, dtype=f64, generator=g), torch.randn(4, 1, dtype=f64, generator=g)]
    As = [torch.randn(2, 5, dtype=f64, generator=g), torch.randn(1, 2, dtype=f64, generator=g)]
    V = block_stack(Bs, As)
    assert V.shape == (3 + 4 + 5 + 2, 3)
    assert torch.allclose(lora_product(V, 7), torch.block_diag(Bs[0] @ As[0], Bs[1] @ As[1]), atol=1e-12)
    T_star = torch.randn(3, 5, dtype=f64, generator=g), torch.randn(4, 2, dtype=f64, generator=g)
    two = lambda Xs: (sum(0.5*((X - Ts)**2).sum((-2, -1)) for X, Ts in zip(Xs, T_star)), [X - Ts for X, Ts in zip(Xs, T_star)])
    def diag_loss(X):                                                   # the loss of the diagonal blocks of one (7, 7) matrix
        J, (G1, G2) = two([X[..., :3, :5], X[..., 3:, 5:]])
        G = torch.zeros_like(X); G[..., :3, :5] = G1; G[..., 3:, 5:] = G2
        return J, G
    hm = lora_gd_multi(two, [(3, 5, 2), (4, 2, 1)], T=40, schedule="theory", L=1.0, V0s=[stack(Bs[0], As[0]), stack(Bs[1], As[1])])
    h1 = lora_gd(diag_loss, 7, 7, 3, T=40, schedule="theory", L=2.0, V0=V)
    assert torch.allclose(hm["J"], h1["J"], rtol=1e-12, atol=1e-13)
    B1, A1 = unstack(h1["V"], 7)
    assert torch.allclose(B1[:3, 2:], torch.zeros(3, 1, dtype=f64)) and torch.allclose(A1[2:, :5], torch.zeros(1, 5, dtype=f64))  # stays block-diagonal
    assert torch.allclose(lora_product(h1["V"], 7)[:3, :5], lora_product(hm["Vs"][0], 3), atol=1e-12)

def test_lemma_3_6_step_descends_on_random_points():
    "One theory step of two coupled softmax matrices (2L) from 2000 random points of norms 1e-2..1e2: Lemma 3.4's decrease."
    loss, L = small_softmax(seed=3)                                      # 5 classes, 12 features split 5 + 7
    two = column_blocks(loss, [5, 7])
    V1, _ = _random_pairs(2000, 5, 5, 2, seed=9); V2, _ = _random_pairs(2000, 5, 7, 3, seed=10)
    h = lora_gd_multi(two, [(5, 5, 2), (5, 7, 3)], T=1, schedule="theory", L=L, V0s=[V1, V2])
    assert (h["slack"][0] >= -1e-12*h["J"][0].abs().clamp_min(1)).all()
    assert theory_L(L, 2) == 2*L and theory_L(L) == L
    with pytest.raises(ValueError, match="n_matrices must be"): theory_L(L, 0)
    with pytest.raises(ValueError, match="V0s holds"): lora_gd_multi(two, [(5, 5, 2), (5, 7, 3)], T=1, L=L, V0s=[V1])
    with pytest.raises(ValueError, match="one A per B"): block_stack([torch.zeros(2, 1)], [])
    with pytest.raises(ValueError, match="columns"): column_blocks(loss, [6, 6])([torch.zeros(5, 5), torch.zeros(5, 7)])

def test_first_step_alpha_sets_the_first_step_of_every_schedule():
    "lora_gd with alpha = first_step_alpha(eta0) takes eta0 as its first step (below the cap), and the cap above it."
    loss, L, _ = least_squares_problem(N=100, seed=4)
    V0 = init_V(8, 20, 2, "gaussian", [0, 1], std=0.5)
    J0, gJ0, G0 = J_and_grad(V0, 8, loss)
    nrm = dict(V_sq=(V0**2).sum((-2, -1)), G_norm=G0.flatten(1).norm(dim=1), loss=J0, gradJ_norm=gJ0.flatten(1).norm(dim=1))
    for s in SCHEDULES[1:]:
        for eta0, first in ((0.004, 0.004), (3.0, 1.0)):
            h = lora_gd(loss, 8, 20, 2, T=3, schedule=s, alpha=first_step_alpha(s, eta0, **nrm), V0=V0)
            assert torch.allclose(h["eta"][0], torch.full((2,), first, dtype=f64), rtol=1e-12), s
    a = first_step_alpha("adaptive", torch.tensor([[0.1], [0.2]]), **{k: v[None] for k, v in nrm.items()})
    assert a.shape == (2, 2) and torch.allclose(a[1]/a[0], torch.full((2,), 2.0, dtype=f64))
    assert torch.allclose(a[0], 0.1*(nrm["V_sq"] + nrm["G_norm"]))

# --- constants ---------------------------------------------------------------------------------------------------

def test_least_squares_smoothness_constant_and_optima():
    loss, L, L_star = least_squares_problem()
    g = torch.Generator().manual_seed(5)
    W1, W2 = torch.randn(2, 2000, 8, 20, dtype=f64, generator=g)
    ratio = (loss(W1)[1] - loss(W2)[1]).flatten(1).norm(dim=1)/(W1 - W2).flatten(1).norm(dim=1)
    assert ratio.max() <= L*(1 + 1e-12)
    v_top = torch.linalg.eigh(loss.S)[1][:, -1]
    D = torch.randn(8, 1, dtype=f64, generator=g)*v_top
    top = ((loss(D)[1] - loss(torch.zeros_like(D))[1]).norm()/D.norm()).item()
    assert abs(top - L) <= 0.01*L
    # L* is the unconstrained minimum: the gradient vanishes at the normal-equation solution
    W_hat = torch.linalg.solve(loss.S, loss.C.T).T
    J_hat, G_hat = loss(W_hat)
    assert G_hat.abs().max() < 1e-10 and abs(J_hat.item() - L_star) < 1e-10
    # the rank-r optimum is reached by truncating, and lies between L* and L(0)
    assert L_star <= loss.rank_r_min(4) <= loss.rank_r_min(2) <= loss(torch.zeros(8, 20, dtype=f64))[0].item()

def test_softmax_L_upper_bounds_the_curvature():
    loss, L = small_softmax()
    g = torch.Generator().manual_seed(6)
    W1 = torch.randn(500, 5, 12, dtype=f64, generator=g)
    W2 = W1 + 1e-3*torch.randn(500, 5, 12, dtype=f64, generator=g)
    ratio = (loss(W1)[1] - loss(W2)[1]).flatten(1).norm(dim=1)/(W1 - W2).flatten(1).norm(dim=1)
    assert ratio.max() <= L

def test_digits_data():
    X, y = digits_data()
    assert X.shape == (1797, 64) and y.shape == (1797,) and int(y.max()) == 9
    assert torch.allclose(X.mean(0), torch.zeros(64, dtype=f64), atol=1e-10)

# --- schedules and certificate -----------------------------------------------------------------------------------

def test_schedule_known_values():
    assert float(step_size_from_norms("adaptive", V_sq=3.0, G_norm=1.0, alpha=1.0)) == pytest.approx(0.25)
    assert float(step_size_from_norms("normalized", gradJ_norm=4.0, alpha=0.06)) == pytest.approx(0.03)
    assert float(step_size_from_norms("adaptive2", V_sq=3.0, loss=4.0, alpha=1.0)) == pytest.approx(0.2)
    assert float(step_size_from_norms("theory", V_sq=1.0, G_norm=1.0, L=1.0)) == pytest.approx(1/(8*math.sqrt(2)))
    for sched, kw in (("constant", {}), ("adaptive", dict(V_sq=0.1, G_norm=0.1)), ("adaptive2", dict(V_sq=0.1, loss=0.01)),
                      ("normalized", dict(gradJ_norm=1e-4))):
        assert float(step_size_from_norms(sched, alpha=50.0, **kw)) == 1.0                 # capped at 1
    assert float(step_size_from_norms("theory", V_sq=1e-6, G_norm=1e-6, L=1.0)) == 1.0
    V = torch.ones(4, 2, dtype=f64)                                   # |V|^2 = 8
    assert float(step_size("adaptive", V=V, G=torch.ones(2, 2, dtype=f64), alpha=10.0)) == pytest.approx(1.0)
    assert float(step_size("adaptive", V=V, G=torch.ones(2, 2, dtype=f64), alpha=1.0)) == pytest.approx(0.1)
    batch = step_size_from_norms("constant", alpha=torch.tensor([0.1, 2.0]))
    assert torch.allclose(batch, torch.tensor([0.1, 1.0], dtype=f64))

def test_certificate_hand_made_history():
    c = certificate(dict(J=[4.0, 3.0, 2.5], grad_sq=[8.0, 4.0, 1.0], eta=[0.5, 0.5]))
    assert c["T"] == 2 and c["min_grad_sq"] == 4.0 and c["bound"] == 16.0 and c["sum_eta"] == 1.0 and c["holds"]
    c2 = certificate(dict(J=[4.0, 3.0, 2.5], grad_sq=[8.0, 4.0, 1.0], eta=[0.5, 0.5], V_sq=[1.0, 2.0, 4.0]), L_star=2.0)
    assert c2["bound"] == 8.0 and c2["V_sq_T"] == 4.0 and c2["V_sq_max_increment"] == 2.0
    assert list(c2["running_min"]) == [8.0, 4.0] and list(c2["running_bound"]) == [16.0, 8.0]

# --- bad input ---------------------------------------------------------------------------------------------------

def test_bad_input_errors():
    loss_grad, _ = quad_problem(4, 6)
    with pytest.raises(ValueError, match="alpha must be > 0"): lora_gd(loss_grad, 4, 6, 2, T=5, schedule="constant", alpha=0.0)
    with pytest.raises(ValueError, match="alpha must be > 0"): step_size_from_norms("normalized", gradJ_norm=1.0, alpha=-1.0)
    with pytest.raises(ValueError, match="L must be > 0"): lora_gd(loss_grad, 4, 6, 2, T=5, schedule="theory", L=0.0)
    with pytest.raises(ValueError, match="does not fit the matrix"): lora_gd(loss_grad, 4, 6, 5, T=5, L=1.0)
    with pytest.raises(ValueError, match="does not fit the matrix"): init_V(4, 6, 0)
    with pytest.raises(ValueError, match="G shaped like its input"): lora_gd(lambda X: (X.sum((-2, -1)), X.mT), 4, 6, 2, T=5, L=1.0)
    with pytest.raises(ValueError, match="one loss per matrix"): lora_gd(lambda X: (X.sum(), X), 4, 6, 2, T=5, L=1.0, seed=[0, 1])
    with pytest.raises(ValueError, match="T must be an integer"): lora_gd(loss_grad, 4, 6, 2, T=0, L=1.0)
    with pytest.raises(ValueError, match="V0 must be"): lora_gd(loss_grad, 4, 6, 2, T=5, L=1.0, V0=torch.zeros(9, 2))
    with pytest.raises(ValueError, match="schedule must be one of"): lora_gd(loss_grad, 4, 6, 2, T=5, schedule="cosine", alpha=0.1)
    with pytest.raises(ValueError, match="same rank r"): stack(torch.zeros(4, 2), torch.zeros(3, 6))
    with pytest.raises(ValueError, match="history needs"): certificate(dict(J=[1.0], grad_sq=[], eta=[]))
    with pytest.raises(ValueError, match="same N"): SoftmaxLoss(torch.zeros(5, 3), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="same N"): LeastSquaresLoss(torch.zeros(5, 3), torch.zeros(4, 2))
    with pytest.raises(ValueError, match="loss must be >= 0"):
        lora_gd(lambda X: (X.sum((-2, -1)) - 10.0, torch.ones_like(X)), 4, 6, 2, T=5, schedule="adaptive2", alpha=0.1)

# --- the LLM path, at tiny size ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    return add_lora(LlamaForCausalLM(cfg).eval(), r=4)

def test_llm_schedules_on_a_tiny_llama(tiny_llama):
    batches = torch.randint(0, 128, (5, 2, 16), generator=torch.Generator().manual_seed(0))
    scheds = {"constant": dict(schedule="constant", alpha=0.5), "adaptive": dict(schedule="adaptive", eta0=0.5),
              "adaptive2": dict(schedule="adaptive2", eta0=0.5), "normalized": dict(schedule="normalized", eta0=0.5)}
    out = lora_llm_schedules(tiny_llama, batches, scheds, steps=4, seeds=(0, 1), eval_batches=2)
    assert set(out) == set(scheds) and all(len(v) == 2 for v in out.values())
    for name, hs in out.items():
        for h in hs:
            assert not h["diverged"] and len(h["loss"]) == 4 and math.isfinite(h["final_loss"])
            assert h["eta"][0] == pytest.approx(0.5)                   # eta0 matching: first step equals 0.5
            assert all(0 < e <= 1 for e in h["eta"])
            assert math.isfinite(h["G_norm"][0]) == (name == "adaptive")
    # same seed, same start and batch order: every schedule starts from the same loss
    assert len({round(hs[0]["loss"][0], 10) for hs in out.values()}) == 1
    assert out["constant"][0]["loss"][0] != out["constant"][1]["loss"][0]
    # the base weights are frozen again after an adaptive run
    assert all(not W.requires_grad for _, _, W in lora_layers(tiny_llama))
    # reproducible
    again = lora_sgd(tiny_llama, batches, 4, "adaptive2", eta0=0.5, seed=0, eval_batches=2)
    assert again["loss"] == out["adaptive2"][0]["loss"]

def test_lora_sgd_step_is_plain_sgd_on_the_adapters(tiny_llama):
    batches = torch.randint(0, 128, (1, 2, 16), generator=torch.Generator().manual_seed(1))
    reset_lora(tiny_llama, seed=5, b_init_std=0.1)
    params = [p for A, B, _ in lora_layers(tiny_llama) for p in (A, B)]
    before = [p.detach().clone() for p in params]
    loss = tiny_llama(input_ids=batches[0], labels=batches[0]).loss
    grads = torch.autograd.grad(loss, params)
    h = lora_sgd(tiny_llama, batches, 1, "constant", alpha=0.3, seed=5, b_init_std=0.1, eval_batches=1)
    order = torch.randperm(1, generator=torch.Generator().manual_seed(5))
    assert h["loss"][0] == pytest.approx(loss.item(), abs=1e-6) and order.tolist() == [0]
    for p, p0, g in zip(params, before, grads): assert torch.allclose(p.detach(), p0 - 0.3*g, atol=1e-6)

def test_llm_errors(tiny_llama):
    batches = torch.randint(0, 128, (2, 2, 8))
    with pytest.raises(ValueError, match="exactly one of alpha and eta0"): lora_sgd(tiny_llama, batches, 1, "constant", alpha=0.1, eta0=0.1)
    with pytest.raises(ValueError, match="theory step needs L"): lora_sgd(tiny_llama, batches, 1, "theory", alpha=0.1)
    with pytest.raises(ValueError, match="batches must be"): lora_sgd(tiny_llama, batches[0], 1, "constant", alpha=0.1)
    with pytest.raises(ValueError, match="no peft LoRA layers"): lora_layers(torch.nn.Linear(3, 3))
    with pytest.raises(ValueError, match="must be a dict"): lora_llm_schedules(tiny_llama, batches, {"x": 0.1}, steps=1)

def test_prefix_cache_and_last_token_loss_are_exact():
    "Running only the adapted top layers from cached states gives the full model's loss and the same SGD trajectory."
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(1)
    model = add_lora(LlamaForCausalLM(cfg).eval(), r=4, layers=[2, 3])
    assert first_lora_layer(model) == 2 and len(lora_layers(model)) == 4       # q_proj and v_proj of layers 2 and 3
    reset_lora(model, seed=3, b_init_std=0.2)
    ids = torch.randint(0, 128, (3, 2, 16), generator=torch.Generator().manual_seed(4))
    pre = prefix_states(model, ids, 2)
    assert pre.shape == (3, 2, 16, 32)
    with torch.no_grad():
        logits = model(input_ids=ids[1]).logits                                # the library's forward pass
    ref = torch.nn.functional.cross_entropy(logits[:, -6:-1].reshape(-1, 128), ids[1][:, -5:].reshape(-1))
    assert torch.allclose(lm_batch_loss(model, ids[1], n_last=5), ref, atol=1e-6)
    assert torch.allclose(lm_batch_loss(model, ids[1], n_last=5, first_layer=2, h_in=pre[1]), ref, atol=1e-5)
    assert lm_loss(model, ids, n_last=5, first_layer=2, prefix=pre) == pytest.approx(lm_loss(model, ids, n_last=5), abs=1e-5)
    runs = [lora_sgd(model, ids, 5, "adaptive", eta0=0.4, seed=7, eval_batches=2, n_last=5, prefix=p) for p in (None, pre)]
    assert np.allclose(runs[0]["loss"], runs[1]["loss"], atol=1e-5) and np.allclose(runs[0]["eta"], runs[1]["eta"], rtol=1e-4)
    with pytest.raises(ValueError, match="n_last must be"): lm_batch_loss(model, ids[0], n_last=16)
    with pytest.raises(ValueError, match="needs h_in"): lm_batch_loss(model, ids[0], first_layer=2)
    with pytest.raises(ValueError, match="must hold one"): lora_sgd(model, ids, 1, "constant", alpha=0.1, prefix=pre[:2])
    with pytest.raises(ValueError, match="first_layer must be"): prefix_states(model, ids, 4)

def test_init_scale_moves_both_adapters_and_V0(tiny_llama):
    "The |V0| knob: init_scale multiplies A0 and B0 (not only B0), so |V0|^2 moves by its square."
    reset_lora(tiny_llama, seed=4, b_init_std=0.05)
    ref = [(A.detach().clone(), B.detach().clone()) for A, B, _ in lora_layers(tiny_llama)]
    reset_lora(tiny_llama, seed=4, b_init_std=0.05, init_scale=0.1)
    for (A, B, _), (A1, B1) in zip(lora_layers(tiny_llama), ref):
        assert torch.allclose(A, 0.1*A1, rtol=1e-6) and torch.allclose(B, 0.1*B1, rtol=1e-6)
    batches = torch.randint(0, 128, (2, 2, 16), generator=torch.Generator().manual_seed(2))
    v = [lora_sgd(tiny_llama, batches, 1, "constant", alpha=0.1, seed=4, eval_batches=1, init_scale=c)["V_sq"][0] for c in (1.0, 0.1, 3.0)]
    assert v[1] == pytest.approx(0.01*v[0], rel=1e-5) and v[2] == pytest.approx(9*v[0], rel=1e-5)
    with pytest.raises(ValueError, match="init_scale must be > 0"): reset_lora(tiny_llama, init_scale=0.0)

def test_lora_sgd_budgets_divergence_and_mean_step_arms(tiny_llama):
    "eval_at measures the loss at several budgets of one run; a diverged run counts as its start; the mean-step arm."
    batches = torch.randint(0, 128, (3, 2, 16), generator=torch.Generator().manual_seed(3))
    h = lora_sgd(tiny_llama, batches, 4, "adaptive", eta0=0.5, seed=1, eval_batches=2, eval_at=(4, 1, 2))
    assert h["eval_at"] == [1, 2, 4] and len(h["eval_loss"]) == 3 and h["final_loss"] == h["eval_loss"][-1]
    h2 = lora_sgd(tiny_llama, batches, 2, "adaptive", eta0=0.5, seed=1, eval_batches=2)   # the same run, stopped after 2 steps
    assert h2["final_loss"] == pytest.approx(h["eval_loss"][1], abs=1e-7)
    bad = lora_sgd(tiny_llama, batches, 5, "constant", alpha=1e6, cap=1e9, seed=1, b_init_std=1.0, init_scale=3.0, eval_batches=2,
                   eval_at=(3, 5), diverge_factor=1.001)                       # huge steps: the loss rises by far more than 0.1 %
    assert bad["diverged"] and bad["eval_loss"] == [bad["init_loss"]]*2
    arms = {"adaptive": dict(schedule="adaptive", eta0=0.8), "mean": dict(mean_step_of="adaptive"),
            "mean@2": dict(mean_step_of="adaptive", steps=2)}
    out = lora_sgd_arms(tiny_llama, batches, arms, 4, seed=2, eval_at=(2, 4), eval_batches=2)
    assert out["mean"]["alpha"] == pytest.approx(np.mean(out["adaptive"]["eta"]), rel=1e-12)
    assert out["mean@2"]["alpha"] == pytest.approx(np.mean(out["adaptive"]["eta"][:2]), rel=1e-12)
    assert out["mean@2"]["steps"] == 2 and out["mean@2"]["eval_at"] == [2] and out["mean"]["eval_at"] == [2, 4]
    assert len(set(out["adaptive"]["eta"])) == 4 and set(out["mean"]["eta"]) == {out["mean"]["alpha"]}
    with pytest.raises(ValueError, match="earlier"): lora_sgd_arms(tiny_llama, batches, {"m": dict(mean_step_of="x")}, 2)
    with pytest.raises(ValueError, match="eval_at must hold"): lora_sgd(tiny_llama, batches, 2, "constant", alpha=0.1, eval_at=(0,))

def test_toy_runs_do_not_depend_on_the_thread_count():
    assert_thread_independent("""
import torch
from maspob_etal.lora_convergence import digits_data, softmax_regression_problem, least_squares_problem, lora_gd, init_V
X, y = digits_data(); dg, L = softmax_regression_problem(X, y)
V0 = init_V(10, 64, 4, "kaiming_B0", [0, 1, 2], dtype=torch.float32).expand(2, -1, -1, -1)
h = lora_gd(dg.to(None, torch.float32), 10, 64, 4, 30, "adaptive2", alpha=torch.tensor([[0.8], [2.4]]), V0=V0, dtype=torch.float32)
ls, Lls, _ = least_squares_problem()
h2 = lora_gd(ls, 8, 20, 2, 30, "theory", L=Lls, V0=init_V(8, 20, 2, "gaussian", [0, 1]))
result = h["J"][-1].flatten().tolist() + h2["J"][-1].tolist() + h2["V"].flatten()[:5].tolist()
""")

def test_llm_tasks_give_the_same_numbers_here_and_in_spawned_workers(tmp_path):
    "run_llm_tasks: 2 spawned workers (one thread each, loading the model from its folder) = the same tasks in this process."
    from transformers import LlamaConfig, LlamaForCausalLM
    from maspob_etal.models import load_causal_lm, load_tokenizer
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=64)).save_pretrained(tmp_path)
    load_tokenizer().save_pretrained(tmp_path)
    model = add_lora(load_causal_lm(str(tmp_path))[0], r=4, layers=[2])
    ids = torch.randint(0, 128, (4, 2, 16), generator=torch.Generator().manual_seed(0))
    runs = [dict(batches=ids, prefix=prefix_states(model, ids, 2), arms={"a": dict(schedule="adaptive", eta0=0.5), "m": dict(mean_step_of="a")},
                 steps=3, seed=s, n_last=6, eval_batches=2, eval_at=(1, 3), init_scale=c) for s, c in ((1, 0.5), (2, 2.0))]
    here = run_llm_tasks(runs, model=model)
    there = run_llm_tasks(runs, n_jobs=2, model_path=str(tmp_path), layers=[2], rank=4)
    for a, b in zip(here, there):
        for k in ("a", "m"):
            assert a[k]["loss"] == b[k]["loss"] and a[k]["eta"] == b[k]["eta"] and a[k]["eval_loss"] == b[k]["eval_loss"]
    assert here[0]["a"]["V_sq"][0] != here[1]["a"]["V_sq"][0]
    with pytest.raises(ValueError, match="pass model="): run_llm_tasks(runs[:1])

def test_pydoc_text_and_real_smollm2_two_steps_at_two_starts():
    "SmolLM2 with LoRA on its top layer: the Kaiming A0 alone gives |V0|^2 = 2 r/3 (about 21); init_scale 0.1 reaches 0.21."
    from maspob_etal.models import load_causal_lm
    text = pydoc_text()
    assert len(text) > 400_000 and "lambda" in text
    model, tok = load_causal_lm()
    batches = text_batches(tok, text[:700], seq_len=32, batch_size=2)
    assert batches.ndim == 3 and batches.shape[1:] == (2, 32)
    with pytest.raises(ValueError, match="fewer than one batch"): text_batches(tok, "short", seq_len=32, batch_size=2)
    out = lora_llm_schedules(model, batches, {"adaptive2": dict(schedule="adaptive2", eta0=0.3),
                                              "small": dict(schedule="adaptive2", eta0=0.3, init_scale=0.1)},
                             steps=2, seeds=(0,), rank=32, layers=[29], n_last=8, eval_batches=1)
    a, sm = out["adaptive2"][0], out["small"][0]
    assert len(lora_layers(model)) == 2                                # q_proj and v_proj of the top layer
    assert 20 < a["V_sq"][0] < 23 and 0.2 < sm["V_sq"][0] < 0.23         # 2 x 32/3 = 21.3, and 0.01 of it
    assert a["alpha"] == pytest.approx(0.3*(a["V_sq"][0] + math.sqrt(a["loss"][0])), rel=1e-6)
    assert a["eta"][0] == pytest.approx(0.3) and sm["eta"][0] == pytest.approx(0.3) and not a["diverged"]
    assert math.isfinite(a["final_loss"]) and math.isfinite(a["init_loss"])

# --- the notebook: presets and prose ------------------------------------------------------------------------------

def _notebook_cells():
    import json, pathlib
    nb = json.loads((pathlib.Path(__file__).resolve().parents[1]/"nbs"/"12_lora_convergence.ipynb").read_text())
    return nb["cells"]

def _full_preset():
    "The notebook's presets at scale 'full', read from its `cfg = pick(scale, ...)` cell."
    import ast
    src = next("".join(c["source"]) for c in _notebook_cells() if "".join(c["source"]).startswith("cfg = pick(scale,"))
    call = ast.parse(src).body[0].value
    return {k.arg: eval(compile(ast.Expression(k.value), "cfg", "eval"), {"__builtins__": {}})[1] for k in call.keywords
            if k.arg not in ("dry_run", "dry")}

def test_full_preset_runs_the_llm_arm_with_enough_seeds_steps_and_distinct_starts():
    "10+ seeds, more steps than 200 on fewer layers than 2, and starts whose |V0|^2 differs by at least 2 decades; 2 workers."
    f = _full_preset()
    assert f["llm_seeds"] >= 10 and f["llm_steps"] > 200 and f["llm_layers"] < 2 and f["n_jobs"] == 2
    assert len(f["llm_scale"]) >= 3 and (max(f["llm_scale"])/min(f["llm_scale"]))**2 >= 100      # |V0|^2 scales with init_scale^2
    assert len(f["dg_scale"]) >= 3 and len(f["ls_std"]) >= 3 and f["n_seeds"] >= 10

def test_prose_states_the_grid_size_of_the_full_preset():
    "Every 'N-value grid' in the notebook's Markdown is the full preset's grid size (or is printed from cfg)."
    import re
    n = len(_full_preset()["grid"])
    words = {5: "five", 6: "six", 4: "four", 3: "three", 7: "seven"}
    md = "\n".join("".join(c["source"]) for c in _notebook_cells() if c["cell_type"] == "markdown")
    for k in re.findall(r"\b(\d+)-value grid", md): assert int(k) == n, f"Markdown says a {k}-value grid; the full preset has {n}"
    for w in re.findall(r"\b(three|four|five|six|seven) values from", md): assert w == words[n], f"Markdown says {w} values; the grid has {n}"
