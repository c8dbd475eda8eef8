"Property and known-value tests of maspob_etal.s3gnn (spec section 6, issues 7 and 37)."
import math, pathlib, sys

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from torch_geometric.data import Batch, Data
from torch_geometric.utils import get_laplacian, to_dense_adj

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

from maspob_etal.s3gnn import (
    ADGNBaseline, ChebComplement, EigenMLP, GCNBaseline, MODEL_NAMES, ODE_MODELS, PositionalEncoding, Readout, S2GNNBaseline, S3GNN,
    S3Layer, SpectralTransform, StableLinear, TASKS, add_rwse, add_spectral, cheb_propagate, cheb_response, count_params, evaluate,
    far_field, graph_ops, jacobian_sensitivity, load_graph_dataset, low_eigenpairs, low_eigenpairs_sparse, make_batches,
    make_graph_property_dataset, make_model, make_ring_transfer, match_width, normalized_laplacian, random_walk_pe, run_jobs,
    run_parallel, spectral_lift, spectral_project, train_eval, tukey_window, tuning_grid)

ALL_MODELS = (S3GNN, S2GNNBaseline, ADGNBaseline, GCNBaseline)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


pytestmark = pytest.mark.usefixtures("one_torch_thread")   # tiny models: see conftest


def edges_of(G):
    if G.number_of_edges() == 0: return torch.empty(2, 0, dtype=torch.long)
    ei = torch.tensor(list(G.edges), dtype=torch.long).T
    return torch.cat([ei, ei.flip(0)], 1)


def graph_of(G, d_in=1, seed=0, lam_cut=0.7, k_max=8):
    x = torch.rand(G.number_of_nodes(), d_in, generator=torch.Generator().manual_seed(seed))
    return SpectralTransform(lam_cut, k_max)(Data(x=x, edge_index=edges_of(G), num_nodes=G.number_of_nodes()))


def dense_L(ei, n):
    return normalized_laplacian(to_dense_adj(ei, max_num_nodes=n)[0].double()) if ei.numel() else torch.eye(n).double()


connected = st.builds(lambda n, p, s: nx.connected_watts_strogatz_graph(n, 4, p, seed=s),
                      st.integers(8, 30), st.floats(0.0, 0.6), st.integers(0, 10_000))


# ---------------------------------------------------------------- Laplacian and eigenpairs
@FAST
@given(n=st.integers(2, 25), p=st.floats(0.05, 0.6), s=st.integers(0, 10_000))
def test_laplacian_matches_pyg_get_laplacian(n, p, s):
    G = nx.gnp_random_graph(n, p, seed=s)                                  # may have isolated nodes
    ei = edges_of(G)
    li, lw = get_laplacian(ei, normalization="sym", num_nodes=n)
    ref = torch.zeros(n, n).index_put((li[0], li[1]), lw, accumulate=True)
    mine = normalized_laplacian(to_dense_adj(ei, max_num_nodes=n)[0]) if ei.numel() else normalized_laplacian(torch.zeros(n, n))
    torch.testing.assert_close(mine, ref, atol=1e-6, rtol=0)


@FAST
@given(G=connected)
def test_eigenpairs_properties(G):
    n = G.number_of_nodes()
    L = dense_L(edges_of(G), n)
    lam, V, km = low_eigenpairs(L, lam_cut=2.0, k_max=n)
    assert km.all()
    torch.testing.assert_close(L @ V, V * lam, atol=1e-8, rtol=0)              # L V = V Lambda
    torch.testing.assert_close(V.T @ V, torch.eye(n, dtype=V.dtype), atol=1e-8, rtol=0)
    assert lam.min() > -1e-9 and lam.max() < 2 + 1e-9
    assert abs(lam[0]) < 1e-9                                              # lambda_1 = 0, eigenvector ~ D^{1/2} 1
    d_half = torch.tensor([G.degree(v) for v in range(n)], dtype=torch.float64).sqrt()
    cos = (V[:, 0] @ d_half).abs()/d_half.norm()
    assert abs(cos - 1) < 1e-8
    torch.testing.assert_close(lam, torch.linalg.eigvalsh(L), atol=1e-8, rtol=0)   # against torch.linalg.eigh


def test_eigenpairs_cut_and_batch_padding():
    Gs = [nx.path_graph(10), nx.cycle_graph(7), nx.star_graph(4)]
    b = Batch.from_data_list([Data(edge_index=edges_of(G), num_nodes=G.number_of_nodes()) for G in Gs])
    A = to_dense_adj(b.edge_index, b.batch)
    mask = torch.arange(10) < torch.tensor([[10], [7], [5]])
    lam, V, km = low_eigenpairs(normalized_laplacian(A, mask), mask, lam_cut=0.7, k_max=4)
    for i, G in enumerate(Gs):
        lam_i, V_i, km_i = low_eigenpairs(dense_L(edges_of(G), G.number_of_nodes()).float(), lam_cut=0.7, k_max=4)
        torch.testing.assert_close(lam[i], lam_i, atol=1e-5, rtol=0)
        assert km[i].tolist() == km_i.tolist()
        assert (lam[i][km[i]] <= 0.7).all()
    # cycle of 7: eigenvalues 0, then pairs; k_max=4 would split the second pair -> only 3 kept
    assert km[1].sum() == 3


def test_sparse_eigenpairs_match_dense():
    G = nx.connected_watts_strogatz_graph(60, 4, 0.3, seed=3)
    ei = edges_of(G)
    lam_s, V_s, km_s = low_eigenpairs_sparse(ei, 60, 0.7, 10)
    lam_d, V_d, km_d = low_eigenpairs(dense_L(ei, 60).float(), lam_cut=0.7, k_max=10)
    assert km_s.tolist() == km_d.tolist()
    torch.testing.assert_close(lam_s, lam_d, atol=1e-4, rtol=0)
    torch.testing.assert_close(V_s @ V_s.T, V_d @ V_d.T, atol=1e-4, rtol=0)
    big = SpectralTransform(0.7, 10, dense_max=20)(Data(edge_index=ei, num_nodes=60))
    torch.testing.assert_close(big.eigvecs @ big.eigvecs.T, V_d @ V_d.T, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- complement and filters
def _complement_check(G, k_max, J=2, d=4):
    n = G.number_of_nodes()
    g = graph_of(G, lam_cut=2.0, k_max=k_max)
    ops = graph_ops(g)
    comp = ChebComplement(d, J)
    Z = torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    lam, U = np.linalg.eigh(dense_L(g.edge_index, n).numpy())
    k = int(g.eig_mask.sum())
    rho = comp.response(torch.tensor(lam)).detach().double().numpy()
    ref = np.einsum("ui,id,vi,vd->ud", U[:, k:], rho[k:], U[:, k:], Z.double().numpy())
    return comp(Z, ops), torch.tensor(ref).float(), comp, Z, ops


@FAST
@given(G=connected, k=st.integers(1, 6))
def test_complement_identity_random_graphs(G, k):
    R, ref, *_ = _complement_check(G, k)                                  # rho(L) V = V rho(Lambda) on random graphs
    torch.testing.assert_close(R, ref, atol=1e-4, rtol=1e-4)


def test_complement_extremes():
    G = nx.connected_watts_strogatz_graph(12, 4, 0.3, seed=2)
    R, _, comp, Z, ops = _complement_check(G, 12)                          # k = n: nothing left
    torch.testing.assert_close(R, torch.zeros_like(R), atol=1e-5, rtol=0)
    g0 = graph_of(G, lam_cut=2.0, k_max=3); g0.eig_mask[:] = False; g0.eigvals[:] = 0; g0.eigvecs[:] = 0   # k = 0: rho(L) H
    ops0 = graph_ops(g0)
    torch.testing.assert_close(comp(Z, ops0), comp.full(Z, ops0), atol=1e-6, rtol=0)


def test_full_spectrum_split():
    G = nx.connected_watts_strogatz_graph(20, 4, 0.2, seed=5)
    g = graph_of(G, lam_cut=0.7, k_max=6)
    ops = graph_ops(g)
    comp = ChebComplement(3, J=2)
    Z = torch.randn(20, 3, generator=torch.Generator().manual_seed(0))
    G_low = spectral_lift(ops.V, comp.response(ops.lam, ops.kmask)*spectral_project(ops.V, Z, ops.batch, ops.pos), ops.batch, ops.pos)
    torch.testing.assert_close(G_low + comp(Z, ops), comp.full(Z, ops), atol=1e-5, rtol=0)   # g := rho on the low band


def test_cheb_response_known_values():
    phi = torch.tensor([[1.0], [2.0], [3.0]])
    lam = torch.tensor([0.0, 1.0, 2.0])
    x = lam - 1
    torch.testing.assert_close(cheb_response(lam, phi)[:, 0], 1 + 2*x + 3*(2*x**2 - 1))


# ---------------------------------------------------------------- invariances
def test_sign_and_basis_invariance():
    G = nx.cycle_graph(12)                                                 # repeated eigenvalues (pairs)
    g = graph_of(G, d_in=3, lam_cut=0.7, k_max=8)
    k = int(g.eig_mask.sum()); assert k >= 3
    torch.manual_seed(0); net = S3GNN(3, 8, 1, 3, level="node").eval()
    out = net(g)
    flip = g.clone(); flip.eigvecs = g.eigvecs*torch.tensor([1., -1, 1, -1, -1, 1, 1, -1])
    torch.testing.assert_close(net(flip), out, atol=1e-5, rtol=0)
    lam = g.eigvals[0]                                                     # rotate inside the first repeated pair
    i = int(torch.nonzero((lam[1:k] - lam[:k-1]).abs() < 1e-6)[0])
    c, s = math.cos(0.7), math.sin(0.7)
    rot = g.clone(); V = g.eigvecs.clone()
    rot.eigvecs[:, i], rot.eigvecs[:, i+1] = c*V[:, i] - s*V[:, i+1], s*V[:, i] + c*V[:, i+1]
    torch.testing.assert_close(net(rot), out, atol=1e-5, rtol=0)


@pytest.mark.parametrize("M", ALL_MODELS)
def test_permutation_equivariance(M):
    G = nx.connected_watts_strogatz_graph(18, 4, 0.3, seed=7)
    g = graph_of(G, d_in=2, k_max=6)
    lam_all = torch.linalg.eigvalsh(dense_L(g.edge_index, 18))
    assert (lam_all[1:] - lam_all[:-1]).abs().min() > 1e-6                 # no repeated eigenvalue anywhere
    perm = torch.randperm(18, generator=torch.Generator().manual_seed(1))
    inv = torch.argsort(perm)                                              # old node v becomes new node inv[v]
    Gp = nx.relabel_nodes(G, {v: int(inv[v]) for v in G.nodes})
    gp = SpectralTransform(0.7, 6)(Data(x=g.x[perm], edge_index=edges_of(Gp), num_nodes=18))
    torch.manual_seed(0); node = M(2, 8, 2, 3, level="node").eval()
    torch.testing.assert_close(node(gp), node(g)[perm], atol=1e-5, rtol=0)
    torch.manual_seed(0); graph = M(2, 8, 2, 3, level="graph").eval()
    torch.testing.assert_close(graph(gp), graph(g), atol=1e-5, rtol=0)


def test_padding_does_not_change_a_graph():
    small = graph_of(nx.path_graph(7), d_in=2, seed=1)
    big = [graph_of(nx.connected_watts_strogatz_graph(25, 4, 0.2, seed=s), d_in=2, seed=s) for s in range(2)]
    b = Batch.from_data_list([big[0], small, big[1]])
    for M in ALL_MODELS:
        torch.manual_seed(0); net = M(2, 8, 1, 3, level="graph").eval()
        torch.testing.assert_close(net(b)[1], net(small)[0], atol=1e-5, rtol=0)
        torch.manual_seed(0); nn_ = M(2, 8, 1, 3, level="node").eval()
        torch.testing.assert_close(nn_(b)[25:32], nn_(small), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- stability constraints
@FAST
@given(d=st.integers(2, 40), s=st.integers(0, 1000))
def test_antisymmetric_transform_has_imaginary_spectrum(d, s):
    torch.manual_seed(s)
    W = StableLinear(d, "antisym", gamma=0.0).weight().detach().double()
    torch.testing.assert_close(W, -W.T)
    assert torch.linalg.eigvals(W).real.abs().max() < 1e-6


def test_spectral_norm_option():
    torch.manual_seed(0)
    sn = StableLinear(24, "specnorm")
    for _ in range(50): sn(torch.randn(3, 24))
    assert torch.linalg.matrix_norm(sn.weight().detach(), 2) <= 1 + 1e-3


# ---------------------------------------------------------------- Jacobian
def test_jacobian_helper_matches_autograd_and_gcn_receptive_field():
    G = nx.Graph([(0, 1), (1, 2), (2, 3), (3, 4), (0, 2)])
    g = graph_of(G, d_in=2, k_max=4)
    torch.manual_seed(0); net = S3GNN(2, 6, 1, 2).eval()
    def h_u(x): c = g.clone(); c.x = x; return net.node_states(c)[4]
    J = torch.autograd.functional.jacobian(h_u, g.x)
    torch.testing.assert_close(jacobian_sensitivity(net, g, 4, by_distance=False), J.abs().mean((0, 2)), atol=1e-7, rtol=0)
    path = graph_of(nx.path_graph(20), d_in=1, k_max=6)
    for L in (2, 4):
        torch.manual_seed(0); s = jacobian_sensitivity(GCNBaseline(1, 8, 1, L), path, 0)
        assert all(s[r] == 0.0 for r in range(L + 1, 20)) and all(s[r] > 0 for r in range(L + 1))


def test_receptive_field_gcn_blind_beyond_L_hops_s3gnn_not():
    "By construction (formerly claim C1): an L-layer message-passing model has exactly zero sensitivity beyond L hops;"
    "a global spectral model (S3GNN, with or without the complement) does not, before and after training."
    path = graph_of(nx.path_graph(16), d_in=1, k_max=6)
    data = add_spectral(make_graph_property_dataset(24, "diameter", seed=4), 0.7, 6)
    for name in ("S3GNN", "S3GNN no complement", "GCN", "A-DGN"):
        net = make_model(name, 1, d=8, n_layers=3, n_gauss=8, eps=1.0, seed=0)
        for stage in ("init", "trained"):
            if stage == "trained": train_eval(net, data[:16], data[16:20], data[20:], epochs=2, batch_size=8)
            s = jacobian_sensitivity(net.cpu(), path, 0)
            far = np.mean([v for r, v in s.items() if r > 3])
            assert (far == 0.0) if name in ("GCN", "A-DGN") else (far > 1e-6*s[0]), (name, stage, far)
            assert far_field(s, 3) == (-30.0 if name in ("GCN", "A-DGN") else math.log10(far/s[0]))


# ---------------------------------------------------------------- robustness and errors
@pytest.mark.parametrize("M", ALL_MODELS)
def test_isolated_nodes_and_single_node_graph(M):
    G = nx.Graph([(0, 1), (1, 2)]); G.add_nodes_from([3, 4])              # two isolated nodes
    g1 = graph_of(G, d_in=2, k_max=4)
    g2 = SpectralTransform(0.7, 4)(Data(x=torch.rand(1, 2), edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=1))
    b = Batch.from_data_list([g1, g2])
    for level in ("graph", "node"):
        torch.manual_seed(0); net = M(2, 8, 1, 3, level=level)
        out = net(b)
        out.sum().backward()
        assert torch.isfinite(out).all()
        assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_clear_errors():
    g = graph_of(nx.path_graph(6), d_in=3)
    with pytest.raises(ValueError, match="d_in=2"): S3GNN(2, 8, 1, 2)(g)
    with pytest.raises(ValueError, match=r"shape \(N, 8\)"): S3Layer(8)(torch.randn(6, 5), graph_ops(g))
    bare = Data(x=torch.rand(6, 3), edge_index=g.edge_index, num_nodes=6)
    with pytest.raises(ValueError, match="SpectralTransform"): S3GNN(3, 8, 1, 2)(bare)
    GCNBaseline(3, 8, 1, 2)(bare)                                           # no eigenpairs needed
    with pytest.raises(ValueError, match=r"\(0, 2\]"): SpectralTransform(lam_cut=2.5)
    with pytest.raises(ValueError, match="positive integer"): low_eigenpairs(torch.eye(3), k_max=0)
    with pytest.raises(ValueError, match="constraint"): S3Layer(8, constraint="orthogonal")
    with pytest.raises(ValueError, match="dynamics must be one of"): S3Layer(8, dynamics="rk4")
    with pytest.raises(ValueError, match="eps"): S3Layer(8, eps=0)
    with pytest.raises(ValueError, match="task must be one of"): make_graph_property_dataset(2, "girth")
    with pytest.raises(ValueError, match="model name must be one of"): make_model("GAT", 1)
    with pytest.raises(ValueError, match="symmetric"): normalized_laplacian(torch.triu(torch.ones(4, 4), 1))
    with pytest.raises(FileNotFoundError, match="does not exist"): load_graph_dataset("/no/such/dir")


# ---------------------------------------------------------------- data
def test_dataset_labels_match_networkx():
    data = make_graph_property_dataset(60, TASKS, seed=11)
    fams = set()
    for dd, de, ds in zip(*(data[t] for t in TASKS)):
        G = nx.Graph(dd.edge_index.T.tolist()); G.add_nodes_from(range(dd.num_nodes))
        assert nx.is_connected(G) and 20 <= dd.num_nodes <= 35
        assert dd.y.item() == nx.diameter(G)
        ecc = nx.eccentricity(G)
        assert de.y[:, 0].tolist() == [ecc[v] for v in range(dd.num_nodes)]
        src = int(ds.x[:, 1].argmax()); assert ds.x[:, 1].sum() == 1
        sp = nx.single_source_shortest_path_length(G, src)
        assert ds.y[:, 0].tolist() == [sp[v] for v in range(dd.num_nodes)]
        fams.add(dd.family)
    assert len(fams) >= 8
    again = make_graph_property_dataset(60, "diameter", seed=11)
    assert all(torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x) for a, b in zip(again, data["diameter"]))


def test_ring_transfer_task_and_ce_training():
    rings = add_spectral(make_ring_transfer(40, 10, 3, seed=0), 0.7, 6)
    for r in rings[:5]:
        t, s = int(r.y_mask.nonzero()), int(r.x[:, :3].sum(1).argmax())
        G = nx.Graph(r.edge_index.T.tolist())
        assert nx.shortest_path_length(G, s, t) == 5 and int(r.y[t]) == int(r.x[s, :3].argmax())
    torch.manual_seed(0)
    res = train_eval(S3GNN(4, 8, 3, 2, level="node"), rings[:24], rings[24:32], rings[32:], epochs=2, batch_size=8, loss="ce")
    assert 0 <= res["test"] <= 1


def test_load_graph_dataset_from_pt(tmp_path):
    data = make_graph_property_dataset(6, "diameter", seed=1)
    torch.save(data, tmp_path/"list.pt")
    torch.save({"train": data[:4], "val": data[4:5], "test": data[5:]}, tmp_path/"splits.pt")
    assert len(load_graph_dataset(tmp_path/"list.pt")) == 6
    assert len(load_graph_dataset(tmp_path/"splits.pt", split="val")) == 1
    with pytest.raises(KeyError, match="not 'dev'"): load_graph_dataset(tmp_path/"splits.pt", split="dev")
    with pytest.raises(FileNotFoundError, match="raw/train.pt"): load_graph_dataset(tmp_path, "peptides-struct")
    with pytest.raises(ValueError, match="LRGB datasets"): load_graph_dataset(tmp_path, "cora")
    torch.save([1, 2], tmp_path/"bad.pt")
    with pytest.raises(ValueError, match="list of torch_geometric"): load_graph_dataset(tmp_path/"bad.pt")
    torch.save(Batch.from_data_list(data), tmp_path/"batch.pt")    # unpickling a Batch calls a PyG function: refused
    with pytest.raises(ValueError, match=r"not loaded.*batch.to_data_list\(\)"): load_graph_dataset(tmp_path/"batch.pt")


def path_graph_data(n):
    "A path of n nodes with eigenpairs (k_max 8)."
    return graph_of(nx.path_graph(n))


class _WritesAMarker:
    "Unpickling this object would run code: it calls os.system to create a marker file."
    def __init__(self, marker): self.marker = str(marker)
    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("wrap", ["list", "dict", "inside Data"])
def test_load_graph_dataset_refuses_a_pt_file_that_would_run_code(tmp_path, wrap):
    marker = tmp_path/"ran"
    evil = _WritesAMarker(marker)
    g = make_graph_property_dataset(2, "diameter", seed=1)
    obj = {"list": [g[0], evil], "dict": {"train": [evil]}, "inside Data": [Data(x=g[0].x, payload=evil)]}[wrap]
    torch.save(obj, tmp_path/"evil.pt")
    assert not marker.exists()
    with pytest.raises(ValueError, match=r"not loaded \(unpickling them could run code\).*torch.save\(list_of_Data"):
        load_graph_dataset(tmp_path/"evil.pt")
    assert not marker.exists()                                               # nothing ran
    with pytest.raises(ValueError, match="evil.pt holds objects other than PyG graphs"): load_graph_dataset(tmp_path/"evil.pt")
    assert not marker.exists()


# ---------------------------------------------------------------- training
@pytest.mark.parametrize("seed", [0, 11])
def test_tiny_overfit_diameter(seed):
    "S3GNN memorises 8 graphs (selected on the training set itself): seeds 0-19 all reached train log10 MSE < -4.7 (worst: seed 6)."
    tiny = add_spectral(make_graph_property_dataset(8, "diameter", seed=5), 0.7, 8)
    torch.manual_seed(seed)
    fit = train_eval(S3GNN(1, 32, 1, 4, eps=0.5), tiny, tiny, tiny, epochs=200, batch_size=8, lr=1e-2, wd=0., seed=seed)
    assert fit["train"] < -3                                               # train MSE < 1e-3, a wide margin


# ---------------------------------------------------------------- the complement's sign and scale, pinned by hand
def _two_node_layer(use_global, complement="poly", eps=0.5):
    "One S3Layer of width 1 on the 2-node graph, every part set to a known value."
    g = SpectralTransform(0.7, 4)(Data(x=torch.tensor([[1.0], [3.0]]), edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2))
    assert int(g.eig_mask.sum()) == 1 and abs(float(g.eigvals[0, 0])) < 1e-6     # only lambda = 0 is kept; lambda = 2 is the high band
    lay = S3Layer(1, J=2, eps=eps, constraint="none", feature_transform="identity", act="identity", use_global=use_global, complement=complement)
    with torch.no_grad():
        lay.W.lin.weight.fill_(0.2); lay.b.fill_(0.1)
        if complement != "none": lay.comp.phi.copy_(torch.tensor([[0.5], [1.0], [0.25]]))
        if use_global:                                                     # g(lambda) = 0.4 on the kept band (window = 1 at lambda = 0)
            lay.filter.lin[-1].weight.zero_(); lay.filter.lin[-1].bias.fill_(0.4)
    return lay, g


def test_layer_complement_sign_and_scale_known_values():
    """On the 2-node graph (L has eigenvalues 0 with v = (1,1)/sqrt 2, kept, and 2 with v = (1,-1)/sqrt 2, dropped by the
    truncation), with phi = (0.5, 1, 0.25): rho(2) = 0.5 + 1 + 0.25 = 1.75, rho(0) = 0.5 - 1 + 0.25 = -0.25.
    H = (1, 3): the high-band projection of H is (-1, 1), the low-band one (2, 2).
    R = rho(2) P_high H = (-1.75, 1.75); G = 0.4 P_low H = (0.8, 0.8); H W = (0.2, 0.6); b = 0.1; eps = 0.5."""
    lay, g = _two_node_layer(use_global=False)
    out = lay(g.x, graph_ops(g))
    torch.testing.assert_close(out, torch.tensor([[1 + 0.5*(0.2 - 1.75 + 0.1)], [3 + 0.5*(0.6 + 1.75 + 0.1)]]), atol=1e-6, rtol=0)
    lay, g = _two_node_layer(use_global=True)
    out = lay(g.x, graph_ops(g))
    torch.testing.assert_close(out, torch.tensor([[1 + 0.5*(0.2 + 0.8 - 1.75 + 0.1)], [3 + 0.5*(0.6 + 0.8 + 1.75 + 0.1)]]), atol=1e-6, rtol=0)
    lay, g = _two_node_layer(use_global=True, complement="full")         # rho(L) H without removing the low band
    out = lay(g.x, graph_ops(g))
    torch.testing.assert_close(out, torch.tensor([[1 + 0.5*(0.2 + 0.8 - 1.75 - 0.25*2 + 0.1)], [3 + 0.5*(0.6 + 0.8 + 1.75 - 0.25*2 + 0.1)]]),
                               atol=1e-6, rtol=0)
    lay, g = _two_node_layer(use_global=True, complement="none")
    out = lay(g.x, graph_ops(g))
    torch.testing.assert_close(out, torch.tensor([[1 + 0.5*(0.2 + 0.8 + 0.1)], [3 + 0.5*(0.6 + 0.8 + 0.1)]]), atol=1e-6, rtol=0)


def test_cheb_propagate_known_value_on_a_path():
    "rho(L) Z on the 3-node path by hand: L - I = -D^-1/2 A D^-1/2 has entries -1/sqrt 2 between the middle and the ends."
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    g = SpectralTransform(0.7, 3)(Data(x=torch.zeros(3, 1), edge_index=ei, num_nodes=3))
    Z = torch.tensor([[1.0], [2.0], [4.0]])
    phi = torch.tensor([[0.5], [-1.0], [0.25]])
    S = torch.tensor([[0, -1, 0], [-1, 0, -1], [0, -1, 0]], dtype=torch.float32)/math.sqrt(2)   # L - I
    T1 = S @ Z; T2 = 2*(S @ T1) - Z
    torch.testing.assert_close(cheb_propagate(Z, graph_ops(g), phi), 0.5*Z - 1.0*T1 + 0.25*T2, atol=1e-6, rtol=0)
    r = 1/math.sqrt(2)   # by hand: T1 = -(2r, 5r, 2r); S T1 = (5/2, 2, 5/2); T2 = (4, 2, 1)
    torch.testing.assert_close(cheb_propagate(Z, graph_ops(g), phi)[:, 0],
                               torch.tensor([0.5 + 2*r + 1.0, 1.0 + 5*r + 0.5, 2.0 + 2*r + 0.25]), atol=1e-6, rtol=0)


def test_layer_against_independent_full_spectrum_computation():
    "The whole layer on a random graph: H + eps*(H W + V g(Lam) V^T H + sum_{i>k} rho(lam_i) v_i v_i^T H + b), from numpy.linalg.eigh."
    G = nx.connected_watts_strogatz_graph(16, 4, 0.3, seed=3)
    g = graph_of(G, d_in=3, lam_cut=0.7, k_max=5, seed=2)
    torch.manual_seed(1)
    lay = S3Layer(3, J=2, eps=0.7, constraint="antisym", feature_transform="identity", act="identity", n_gauss=8)
    with torch.no_grad(): lay.b.uniform_(-0.3, 0.3)
    H = g.x.double().float()
    out = lay(H, graph_ops(g)).detach().double().numpy()
    lam, U = np.linalg.eigh(dense_L(g.edge_index, 16).numpy())
    k = int(g.eig_mask.sum())
    x = lam - 1; phi = lay.comp.phi.detach().double().numpy()                    # rho from the Chebyshev polynomials by hand
    rho = phi[0] + np.outer(x, phi[1]) + np.outer(2*x**2 - 1, phi[2])           # (n, d)
    gk = lay.filter(torch.tensor(lam[None, :k]).float(), torch.ones(1, k, dtype=torch.bool))[0].detach().double().numpy()   # (k, d)
    Hn = H.double().numpy()
    low = np.einsum("ui,id,vi,vd->ud", U[:, :k], gk, U[:, :k], Hn)
    high = np.einsum("ui,id,vi,vd->ud", U[:, k:], rho[k:], U[:, k:], Hn)
    W = lay.W.weight().detach().double().numpy()
    ref = Hn + 0.7*(Hn @ W + low + high + lay.b.detach().double().numpy())
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)


# ---------------------------------------------------------------- helpers of the comparison
def test_far_field_and_width_matching():
    assert far_field({0: 2.0, 1: 1.0, 2: 0.02, 3: 0.002}, 1) == pytest.approx(math.log10(0.011/2.0), abs=1e-12)
    assert far_field({0: 4.0, 1: 1.0, 2: 0.04}, 0) == pytest.approx(math.log10((1.0 + 0.04)/2/4.0), abs=1e-12)
    assert far_field({0: 1.0, 1: 0.5, 2: 0.0}, 1) == -30.0
    with pytest.raises(ValueError, match="self-sensitivity"): far_field({0: 0.0, 1: 0.5, 2: 0.1}, 1)
    target = count_params(make_model("S3GNN", 1, d=24, n_layers=3))
    for m in ("S2GNN", "A-DGN", "GCN"):
        w = match_width(lambda d: make_model(m, 1, d=d, n_layers=3), target, 64)
        p = count_params(make_model(m, 1, d=w, n_layers=3))
        assert abs(p - target) <= 0.1*target
        for w2 in (w - 2, w + 2):                                             # the neighbours are not closer
            assert abs(count_params(make_model(m, 1, d=w2, n_layers=3)) - target) >= abs(p - target)
    with pytest.raises(ValueError, match="within 10%"): match_width(lambda d: make_model("GCN", 1, d=d, n_layers=3), 10**7, 32)
    assert set(ODE_MODELS) < set(MODEL_NAMES)
    assert tuning_grid("S3GNN", [1e-3, 3e-3], [0.3, 1.0]) == [dict(lr=1e-3, eps=0.3), dict(lr=1e-3, eps=1.0),
                                                              dict(lr=3e-3, eps=0.3), dict(lr=3e-3, eps=1.0)]
    assert tuning_grid("S2GNN", [1e-3, 3e-3], [0.3, 1.0]) == [dict(lr=1e-3), dict(lr=3e-3)]
    assert tuning_grid("GCN+PE", [1e-3], [0.3], ["lap", "rwse"]) == [dict(lr=1e-3, pe="lap"), dict(lr=1e-3, pe="rwse")]
    with pytest.raises(ValueError, match="pe must be one of"): tuning_grid("GCN+PE", [1e-3], [0.3], ["magnetic"])


def test_same_numbers_with_one_and_two_threads():
    """The notebook pins one CPU thread: with two, even the forward pass of one graph moves by ~1e-7 (BLAS blocking).
    Pinned as the notebook does, a small training run and its Jacobian give the same bits in a 1- and a 2-thread process."""
    assert_thread_independent("""
        from maspob_etal.core import cpu_threads
        from maspob_etal.s3gnn import add_spectral, make_graph_property_dataset, make_model, train_eval, jacobian_sensitivity, far_field
        data = add_spectral(make_graph_property_dataset(16, "diameter", seed=2), 0.7, 6)
        with cpu_threads(1):
            net = make_model("S3GNN", 1, d=8, n_layers=3, n_gauss=8, eps=1.0, seed=0)
            r = train_eval(net, data[:10], data[10:13], data[13:], epochs=2, batch_size=5, seed=0)
            result = [r["train"], r["val"], r["test"], far_field(jacobian_sensitivity(net, data[0], 0), 1)]
    """)

def test_s3layer_wrong_node_count_and_non_positive_sizes_say_what_to_fix():
    g = graph_of(nx.path_graph(6), d_in=3)
    lay = S3Layer(8)
    assert lay(torch.randn(6, 8), graph_ops(g)).shape == (6, 8)
    for n in (5, 7):
        with pytest.raises(ValueError, match=rf"H has {n} rows but the batch given to graph_ops has 6 nodes: pass one row"):
            lay(torch.randn(n, 8), graph_ops(g))
    with pytest.raises(ValueError, match="d must be a positive integer.*got -4"): S3Layer(d=-4)
    with pytest.raises(ValueError, match="d must be a positive integer.*got 0"): S3Layer(d=0)
    with pytest.raises(ValueError, match="n_gauss must be a positive integer"): S3Layer(8, n_gauss=0)
    with pytest.raises(ValueError, match="J .* must be an integer >= 0"): S3Layer(8, J=-1)
    with pytest.raises(ValueError, match="bottleneck must be > 0"): S3Layer(8, bottleneck=0)
    S3Layer(8, J=0)                                                          # order 0: a constant high band


def test_deep_s2gnn_stays_finite_with_its_layer_norm():
    "At the gpu scale's 20 layers the residual sums of the S2GNN-style model explode; its LayerNorm keeps them finite."
    g = add_rwse([path_graph_data(60)], 16)[0]
    plain = make_model("S2GNN", 1, d=64, n_layers=20, k_max=8, seed=0)
    deep = make_model("S2GNN", 1, d=64, n_layers=20, k_max=8, seed=0, norm="layer")
    with torch.no_grad():
        assert not (plain.node_states(g).abs().max() < 1e6)                  # the failure the norm is there for
        H = deep.node_states(g)
    assert torch.isfinite(H).all() and H.abs().max() < 100
    assert count_params(deep) == count_params(plain) + 20*2*64
    shallow = make_model("S2GNN", 1, d=8, n_layers=2, seed=3)                 # the default is unchanged: no norms
    assert shallow.norms is None and torch.equal(shallow(g), make_model("S2GNN", 1, d=8, n_layers=2, seed=3)(g))
    with pytest.raises(ValueError, match="norm must be one of"): S2GNNBaseline(1, norm="batch")


def test_s3layer_with_an_edge_index_says_what_to_pass():
    lay = S3Layer(4)
    with pytest.raises(TypeError, match=r"ops = graph_ops\(batch\)"):
        lay(torch.zeros(3, 4), torch.tensor([[0, 1], [1, 0]]))


# ---------------------------------------------------------------- issue 37: taper, dtype, readout size, baselines, runs
@pytest.mark.parametrize("lam_cut,alpha", [(0.7, 0.5), (1.2, 0.25), (0.5, 0.8)])
def test_tukey_window_taper_known_values(lam_cut, alpha):
    """S2GNN's one-sided Tukey window: 1 up to alpha*lam_cut, then cos(pi (x - alpha) / (2 - 2 alpha)) with x = lam/lam_cut,
    a quarter cosine that spans the whole taper [alpha, 1] and reaches 0 exactly at lam_cut. At a fraction f of the taper
    the value is cos(pi f / 2): 1/sqrt 2 halfway, sqrt 3 / 2 a third of the way, 1/2 two thirds of the way."""
    f = torch.tensor([0.0, 1/3, 0.5, 2/3, 1.0, 1.5])                       # position inside the taper (1.5: beyond the cut)
    lam = lam_cut*(alpha + f*(1 - alpha))
    ref = torch.tensor([1.0, math.sqrt(3)/2, 1/math.sqrt(2), 0.5, 0.0, 0.0])
    torch.testing.assert_close(tukey_window(lam, lam_cut, alpha), ref, atol=1e-6, rtol=0)
    flat = torch.linspace(0, alpha*lam_cut, 7)                              # flat part
    torch.testing.assert_close(tukey_window(flat, lam_cut, alpha), torch.ones(7), atol=0, rtol=0)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\)"): tukey_window(lam, lam_cut, 1.0)


def test_spectral_project_and_lift_follow_the_signal_dtype():
    g = graph_of(nx.connected_watts_strogatz_graph(14, 4, 0.3, seed=1), k_max=5)
    ops = graph_ops(g)
    assert ops.V.dtype == torch.float32                                      # eigenpairs are stored in float32
    Z = torch.randn(14, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    Zhat = spectral_project(ops.V, Z, ops.batch, ops.pos)
    assert Zhat.dtype == torch.float64
    torch.testing.assert_close(Zhat, ops.V.double().transpose(1, 2) @ Z[None], atol=1e-12, rtol=0)
    assert spectral_lift(ops.V, Zhat, ops.batch, ops.pos).dtype == torch.float64


@pytest.mark.parametrize("J", [1, 3])
def test_double_layer_and_model_on_float32_eigenpairs(J):
    "A .double() layer (or model) runs on eigenpairs stored in float32 and agrees with the float32 one."
    g = graph_of(nx.connected_watts_strogatz_graph(16, 4, 0.3, seed=2), d_in=3, k_max=5)
    torch.manual_seed(0); lay = S3Layer(3, n_gauss=8, J=J)
    H = g.x.float()
    ref = lay(H, graph_ops(g))
    out = lay.double()(H.double(), graph_ops(g))
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.float(), ref, atol=1e-5, rtol=0)
    torch.manual_seed(0); net = S3GNN(3, 8, 1, 2, level="graph", J=J)
    ref = net(g)
    torch.testing.assert_close(net.double()(g).float(), ref, atol=1e-5, rtol=0)
    torch.manual_seed(0); gcn = GCNBaseline(3, 8, 1, 2, pe="lap", k_max=5).eval()
    ref = gcn(g)
    torch.testing.assert_close(gcn.double()(g).float(), ref, atol=1e-5, rtol=0)


def test_readout_sees_log_graph_size():
    "With size=True the graph head gets log n of each graph; the node head gets it at every node."
    b = Batch.from_data_list([Data(x=torch.zeros(n, 2), edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=n) for n in (3, 7)])
    for level, rows in (("graph", [0, 1]), ("node", [0, 3])):
        ro = Readout(2, 1, level, size=True)
        with torch.no_grad():
            ro.mlp[0].weight.zero_(); ro.mlp[0].weight[0, -1] = 1.0; ro.mlp[0].bias.zero_()
            ro.mlp[2].weight.zero_(); ro.mlp[2].weight[0, 0] = 1.0; ro.mlp[2].bias.zero_()
        out = ro(torch.zeros(10, 2), b.batch, 2)[rows, 0]                    # first node of each graph at node level
        torch.testing.assert_close(out, torch.nn.functional.gelu(torch.tensor([math.log(3), math.log(7)])), atol=1e-6, rtol=0)
    assert Readout(4, 1, "graph", size=False).mlp[0].in_features == 8 and Readout(4, 1, "graph").mlp[0].in_features == 9


def test_eigen_mlp_reads_only_the_spectrum_and_the_size():
    Gs = [nx.path_graph(9), nx.cycle_graph(9), nx.path_graph(13)]
    gs = [graph_of(G, d_in=2, seed=i, k_max=6) for i, G in enumerate(Gs)]
    torch.manual_seed(0); mlp = EigenMLP(6, 16)
    out = mlp(Batch.from_data_list(gs))
    assert out.shape == (3, 1)
    other_x = [g.clone() for g in gs]
    for g in other_x: g.x = torch.randn_like(g.x)
    torch.testing.assert_close(mlp(Batch.from_data_list(other_x)), out, atol=0, rtol=0)   # node features are ignored
    lam, m = gs[2].eigvals, gs[2].eig_mask.float()                            # by hand for the 13-node path
    z = torch.cat([lam*m, m, torch.tensor([[math.log(13)]])], -1)
    torch.testing.assert_close(out[2], mlp.mlp(z)[0], atol=1e-6, rtol=0)
    assert not torch.allclose(out[0], out[1])                                  # path and cycle: different spectra
    with pytest.raises(ValueError, match="k_max=8"): EigenMLP(8)(gs[0])


def test_random_walk_pe_matches_pyg_and_by_hand():
    from torch_geometric.transforms import AddRandomWalkPE
    G = nx.Graph([(0, 1), (1, 2), (2, 0), (2, 3)]); G.add_node(4)              # a triangle with a tail and an isolated node
    g = Data(edge_index=edges_of(G), num_nodes=5)
    pe = add_rwse([g.clone()], steps=4)[0].rwse
    torch.testing.assert_close(pe, AddRandomWalkPE(4, "ref")(g.clone()).ref, atol=1e-6, rtol=0)
    # node 3 (degree 1, neighbour 2 of degree 3): return after 2 steps 1/3, after 3 steps 0 via the triangle? 3->2->x->3 needs x=2: 0
    assert pe[3, 0] == 0 and abs(pe[3, 1] - 1/3) < 1e-6 and pe[4].abs().max() == 0
    with pytest.raises(ValueError, match="positive integer"): random_walk_pe(torch.eye(3), steps=0)


def test_lap_pe_sign_flips_are_seeded_and_training_only():
    g = graph_of(nx.connected_watts_strogatz_graph(12, 4, 0.3, seed=4), k_max=5)
    outs = []
    for burn in (0, 7):                                                        # global RNG use before must not matter
        torch.manual_seed(burn); torch.rand(burn + 1)
        pe = PositionalEncoding("lap", 4, k_max=5, seed=3)
        with torch.no_grad(): pe.lin.weight.copy_(torch.arange(40.).reshape(4, 10)/40); pe.lin.bias.fill_(0.1)
        outs.append(pe.train()(g))
    torch.testing.assert_close(outs[0], outs[1], atol=0, rtol=0)
    pe.eval(); torch.testing.assert_close(pe(g), pe(g), atol=0, rtol=0)
    V = g.eigvecs; lam = (g.eigvals*g.eig_mask).expand(12, -1)
    torch.testing.assert_close(pe(g), pe.lin(torch.cat([V, lam], -1)), atol=1e-6, rtol=0)   # eval: no flip


def test_ops_memo_reuses_and_invalidates():
    data = add_spectral(make_graph_property_dataset(6, "diameter", seed=1), 0.7, 4)
    b = make_batches(data, 3)[0]
    o1 = graph_ops(b); assert graph_ops(b) is o1                               # built once per batch
    assert graph_ops(b, gcn=True) is not o1
    b.eigvecs.mul_(-1)                                                         # changed in place: rebuilt
    o2 = graph_ops(b); assert o2 is not o1
    torch.testing.assert_close(o2.V, -o1.V, atol=0, rtol=0)
    plain = Batch.from_data_list(data[:3])                                     # not from make_batches: never memoised
    assert graph_ops(plain) is not graph_ops(plain)


def test_train_eval_leaves_the_model_at_its_best_validation_epoch():
    data = add_spectral(make_graph_property_dataset(24, "diameter", seed=9), 0.7, 6)
    torch.manual_seed(0); net = S3GNN(1, 8, 1, 2)
    r = train_eval(net, data[:12], data[12:18], data[18:], epochs=6, batch_size=6, lr=3e-2, seed=1)
    assert r["val"] == min(h[2] for h in r["history"])
    tr = data[:12]; y = torch.cat([g.y for g in tr])
    val = evaluate(net, make_batches(data[12:18], 6), "mse", y.mean(0), y.std(0))
    test = evaluate(net, make_batches(data[18:], 6), "mse", y.mean(0), y.std(0))
    assert abs(val - r["val"]) < 1e-9 and abs(test - r["test"]) < 1e-9


def test_run_jobs_same_numbers_in_workers_and_in_process():
    "Runs described by plain values give the same bits in this process and in two spawned workers, in job order."
    spec = dict(n_graphs=(10, 4, 4), n_min=8, n_max=12, task="diameter", lam_cut=0.7, k_max=4, rwse_steps=4)
    kw = dict(d=8, n_layers=2, n_gauss=8)
    jobs = [dict(data=spec | dict(seed=s), model=m, model_kw=kw | x, train=dict(epochs=2, batch_size=5), seed=s, path_n=12 if m == "S3GNN" else None)
            for s in (0, 1) for m, x in (("S3GNN", dict(J=2)), ("GCN+PE", dict(pe="rwse")), ("eigen MLP", {}))]
    here, there = run_jobs(jobs, 1), run_jobs(jobs, 2)
    for a, b in zip(here, there):
        assert [a[k] for k in ("train", "val", "test", "n_params")] == [b[k] for k in ("train", "val", "test", "n_params")]
    assert here[0]["sens"] == there[0]["sens"] and set(here[0]["sens"]) == set(range(12))
    assert here[0]["test"] != here[3]["test"]                                  # seeds 0 and 1: their own graphs and weights


def test_make_model_new_arms():
    assert make_model("GCN+PE", 1, d=8, n_layers=2, pe="lap").pe.kind == "lap"
    assert make_model("GCN+PE", 1, d=8, n_layers=2, pe="none").pe is None
    assert make_model("S3GNN", 1, d=8, n_layers=2, J=2).layers[0].comp.phi.shape == (3, 8)
    assert make_model("S3GNN no complement", 1, d=8, n_layers=2, J=2).layers[0].comp is None
    assert isinstance(make_model("eigen MLP", 1, d=8, k_max=6), EigenMLP)
    with pytest.raises(ValueError, match="level='graph'"): make_model("eigen MLP", 1, level="node")
    with pytest.raises(ValueError, match="pe must be one of"): make_model("GCN+PE", 1, d=8, n_layers=2, pe="magnetic")
