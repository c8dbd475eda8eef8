"Tests of maspob_etal.robomme (MiniMME, the memory designs, the protocol and the real-benchmark harness)."
import sys, pathlib
import numpy as np, pandas as pd, pytest, torch
import torch.nn.functional as F
from maspob_etal.robomme import (TASKS, TASK_LIST, VERBS, G, COLOURS, CONT, SPLITS, POLICIES, MiniMMEEnv, Scene, render, make_script,
    split_seeds, difficulty_of, memoryless_conflicts, even_sampling_indices, TokenDropBuffer, TTTMemory, patchify,
    make_variant, TinyVLA, collect_demos, train_policy, evaluate, summarize, RealRoboMMEHarness, H5DemoReader, _batch,
    goal_options, episode_records, seed_file_path, write_seed_file, read_seed_file)
sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent

ALL_SEEDS = [s for sp in SPLITS for s in split_seeds(sp)]

def rollout(env, act):
    env.reset()
    while True:
        _, _, term, trunc, info = env.step(act(env))
        if term or trunc: return info["status"]

@pytest.mark.parametrize("task", TASK_LIST)
def test_oracle_solves_every_seed(task):
    st = [rollout(MiniMMEEnv(task, s), lambda e: e.oracle_action()) for s in ALL_SEEDS]
    assert st.count("success") == len(ALL_SEEDS)
    assert {difficulty_of(s) for s in ALL_SEEDS} == {"easy", "medium", "hard"}

def test_random_policy_below_15_percent():
    rng = np.random.default_rng(1)
    sr = np.mean([rollout(MiniMMEEnv(t, s), lambda e: (VERBS[rng.integers(7)], int(rng.integers(G*G)))) == "success"
                  for t in TASK_LIST for s in split_seeds("test")[:25]])
    assert sr < 0.15

def test_determinism_splits_difficulty():
    for t in TASK_LIST:
        a, b = make_script(t, 2003), make_script(t, 2003)
        assert all((render(x) == render(y)).all() for x, y in zip(a.video + a.scenes, b.video + b.scenes))
        assert a.actions == b.actions and a.difficulty == difficulty_of(2003) == "hard"
    sets = [set(split_seeds(s)) for s in SPLITS]
    assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])

def test_memory_required_where_frames_repeat():
    "Exact (goal, frame, state) groups conflict on every task whose frames repeat; the Bayes ceiling is below 1 there."
    for t in ["PickXtimes", "SwingXtimes", "StopCube", "ButtonUnmaskSwap", "PickHighlight", "VideoRepick",
              "MoveCube", "InsertPeg", "PatternLock", "RouteStick"]:
        r = memoryless_conflicts([make_script(t, s) for s in ALL_SEEDS])
        assert r["conflict_rate"] > 0 and r["bayes_acc"] < 1, (t, r)

def test_no_history_in_frames():
    "A cube in the bin is invisible; a button looks the same before and after a press (outside videos)."
    s = Scene(cubes={5: "red"}, bins={5}, buttons={9})
    assert (render(s) == render(Scene(bins={5}, buttons={9}))).all()
    sc = make_script("ButtonUnmaskSwap", 5)
    assert not any(x.pressed for x in sc.scenes)

def _cursor(img):
    "The gripper cell: the one whose top-left pixel is black."
    px = img.reshape(G, 4, G, 4, 3)[:, 0, :, 0]
    (r, c), = np.argwhere((px == 0).all(-1)); return int(r*G + c)

def _containers(img):
    px = img.reshape(G, 4, G, 4, 3)[:, 0, :, 1]                                   # top edge (the gripper mark is at its corner)
    return {int(r*G + c) for r, c in np.argwhere((px == CONT).all(-1))}

def _cube_cells(img):
    q = img.reshape(G, 4, G, 4, 3)[:, 1, :, 1]
    return {int(r*G + c): name for name, rgb in COLOURS.items() for r, c in np.argwhere((q == rgb).all(-1))}

def _inner(img):
    "Each cell's inner-square colour, (G, G, 3)."
    return img.reshape(G, 4, G, 4, 3)[:, 1, :, 1]

def _track(frames, cells_of, start):
    "Follow items that move one at a time (swaps go through a free cell): start cell -> final cell."
    where = {c: c for c in start}                                                  # identity (start cell) -> current cell
    for a, b in zip(frames, frames[1:]):
        gone, new = cells_of(a) - cells_of(b), cells_of(b) - cells_of(a)
        if len(gone) == 1 and len(new) == 1:
            (g,), (n,) = gone, new
            where = {k: (n if v == g else v) for k, v in where.items()}
    return where

def decode_video(task, frames, goal):
    "Hand-written decoders that read the hidden answer from the rendered conditioning video alone."
    if task == "PatternLock": return [_cursor(f) for f in frames[1:-1]]
    if task == "RouteStick":
        stick_row = int(np.argwhere((_inner(frames[0]) == (20, 20, 20)).all(-1))[0][0])
        return [int(_cursor(f) // G > stick_row) for f in frames[1:-1]]
    if task in ("VideoUnmask", "VideoUnmaskSwap"):
        colour_at = _cube_cells(frames[0])                                         # container identity = its cube's colour
        where = _track(frames[1:], _containers, colour_at)
        cols = goal.replace("lift the container that hides the ", "").replace(" cube", "").split(" and the ")
        return [where[next(c for c, k in colour_at.items() if k == col)] for col in cols]
    if task == "VideoRepick":
        star = _cursor(frames[1])                                                  # the cube the video picks
        cubes = lambda f: set(_cube_cells(f))
        return _track(frames[2:], cubes, cubes(frames[2]))[star]
    if task in ("VideoPlaceOrder", "VideoPlaceButton"):
        col = goal.split(" cube")[0].split()[-1]
        seq, press_after = [], None
        for f in frames:
            cells = [c for c, n in _cube_cells(f).items() if n == col]
            if cells and _cursor(f) == cells[0] and (not seq or seq[-1] != cells[0]): seq.append(cells[0])
            if (_inner(f) == (255, 60, 60)).all(-1).any() and press_after is None: press_after = len(seq) - 2   # index in seq[1:]
        placed = seq[1:]
        if task == "VideoPlaceOrder": return placed[["first", "second", "third", "fourth"].index(goal.split(" on the ")[1].split()[0])]
        return placed[press_after + ("right after" in goal)]
    if task == "MoveCube":
        f0, f1 = frames[0], frames[1]
        peg0 = {int(r*G + c) for r, c in np.argwhere((_inner(f0) == (160, 100, 50)).all(-1))}
        if _cursor(f1) in peg0 or not peg0 & {int(r*G + c) for r, c in np.argwhere((_inner(f1) == (160, 100, 50)).all(-1))}: return 0
        return 2 if _cursor(f1) in _cube_cells(f1) else 1
    if task == "InsertPeg":
        heads = sorted(int(r*G + c) for r, c in np.argwhere((_inner(frames[0]) == (160, 100, 50)).all(-1)))
        grab = _cursor(frames[1]); rows = sorted(h // G for h in heads)
        side = int(_cursor(frames[2]) == G*G - 1)
        return (grab // G, int(grab % G != heads[0] % G), side)                  # (the peg's row, end, side)
    raise KeyError(task)

VIDEO_TASKS = ["VideoUnmask", "VideoUnmaskSwap", "VideoRepick", "VideoPlaceButton", "VideoPlaceOrder",
               "MoveCube", "InsertPeg", "PatternLock", "RouteStick"]

@pytest.mark.parametrize("task", VIDEO_TASKS)
def test_answer_is_in_the_video_not_its_last_frame(task):
    for s in split_seeds("train"):
        sc = make_script(task, s); frames = [render(x) for x in sc.video]
        got = decode_video(task, frames, sc.goal[0])
        want = (sc.actions[0][1] // G, sc.answer[1], sc.answer[2]) if task == "InsertPeg" else sc.answer
        assert got == want, (task, s, got, want)
    if task in ("PatternLock", "RouteStick"):               # the last frame (reset table) repeats across seeds with other answers
        assert memoryless_conflicts([make_script(task, s) for s in split_seeds("train")], video_only=True)["conflict_rate"] > 0

def test_even_sampling_indices_repo_cases():
    assert even_sampling_indices(5, 32) == [0, 1, 2, 3, 4, 5]
    assert even_sampling_indices(100, 32) == np.linspace(0, 100, 32).astype(int).tolist()
    assert even_sampling_indices(31, 32) == list(range(32)) and even_sampling_indices(32, 32) == np.linspace(0, 32, 32).astype(int).tolist()
    with pytest.raises(ValueError, match="max_frames"): even_sampling_indices(4, 0)

def test_tokendrop_buffer_properties():
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (64, 48), dtype=np.uint8)]
    for t in range(1, 12):
        f = frames[-1].copy(); f[rng.integers(0, 64, 5)] = rng.integers(0, 255, 48, dtype=np.uint8); frames.append(f)
    buf = TokenDropBuffer(stride=2)
    for t, f in enumerate(frames): buf.add(t, f)
    kept = {(s, p) for _, s, p in buf.heap}
    assert {p for s, p in kept if s == 0} == set(range(64))
    for s, p in kept:
        if s: assert (frames[s][p] != frames[s - 2][p]).any()                      # unchanged patches never kept
        assert s % 2 == 0
    sel = buf.select(7, 70)
    assert len(sel) <= 70 and sel == sorted(sel) and all(s <= 7 for s, _ in sel)
    assert sel == sorted(k for k in kept if k[0] <= 7)[-70:]

def test_ttt_update():
    torch.manual_seed(0); m = TTTMemory(16, heads=2); x = torch.randn(2, 6, 16); W = torch.randn(2, 2, 8, 8) * 0.3
    def loss(W):
        k = F.normalize(m.k(x).view(2, 6, 2, 8), dim=-1).transpose(1, 2); v = m.v(x).view(2, 6, 2, 8).transpose(1, 2)
        return ((k @ W.transpose(-1, -2) - v)**2).sum(-1).mean(-1)
    with torch.no_grad():
        assert (loss(m.update(W, x)) < loss(W)).all()
        assert torch.equal(m.update(W, x, eta=torch.zeros(2, 2)), W)
        eta = m.eta(x); assert ((eta >= 0.01) & (eta <= 0.1)).all()
    Wg = W.clone().requires_grad_(); loss(Wg).sum().backward()
    with torch.no_grad(): torch.testing.assert_close(m.update(W, x, eta=torch.full((2, 2), 1e-3)), W - 1e-3 * Wg.grad, atol=1e-6, rtol=1e-5)

def test_modulator_identity_and_policies():
    d = collect_demos(["PickXtimes", "VideoPlaceOrder"], n_per_task=2)
    pm = make_variant("FrameSamp+Modul", seed=3, d=32, layers=2, heads=2); p0 = make_variant("none", seed=4, d=32, layers=2, heads=2)
    p0.load_state_dict({k: v for k, v in pm.state_dict().items() if k in p0.state_dict()})
    b = _batch(pm, d, np.arange(5), "cpu")
    with torch.no_grad():
        for k in ("verb", "cell"): torch.testing.assert_close(pm(b, zero_film=True)[k], p0(b)[k])
    with pytest.raises(ValueError, match="unknown policy"): make_variant("TTT+Film")
    with pytest.raises(ValueError, match="unknown task"): MiniMMEEnv("Pickxtimes", 2000)
    with pytest.raises(ValueError, match="in no split"): MiniMMEEnv("PickXtimes", 100)
    with pytest.raises(ValueError, match="subgoals"): evaluate(make_variant("GroundSG"), ["PickXtimes"], n_per_task=1)
    with pytest.raises(ValueError, match="d divisible by heads"): TinyVLA(d=30, heads=4)
    with pytest.raises(ValueError, match="budget >= 16"): TinyVLA(budget=8)
    with pytest.raises(ValueError, match="integration must be None"): TinyVLA(memory="FrameSamp", integration="Film")
    with pytest.raises(ValueError, match="n_per_task must be in"): evaluate(make_variant("none"), ["PickXtimes"], n_per_task=0)
    d2 = collect_demos(["PickXtimes"], n_per_task=1)
    with pytest.raises(ValueError, match="steps and batch must be >= 1"): train_policy(make_variant("none"), d2, 0, 8)

def test_summarize_known_values():
    df = pd.DataFrame([dict(policy="A", model_seed=s, task=t, success=v) for s, t, vs in [
        (0, "BinFill", [1, 1, 0, 0]), (0, "RouteStick", [1]), (0, "PatternLock", [0, 0]),
        (1, "BinFill", [1, 1, 1, 1]), (1, "RouteStick", [0]), (1, "PatternLock", [1, 0])] for v in vs])
    sm = summarize(df).set_index("name")
    assert sm.loc["BinFill", "mean"] == pytest.approx(0.75) and sm.loc["BinFill", "std"] == pytest.approx(0.25)
    imit = [(1 + 0)/2, (0 + 0.5)/2]
    assert sm.loc["Imitation", "mean"] == pytest.approx(np.mean(imit)) and sm.loc["Imitation", "std"] == pytest.approx(np.std(imit))
    ov = [(0.5 + 1 + 0)/3, (1 + 0 + 0.5)/3]
    assert sm.loc["overall", "mean"] == pytest.approx(np.mean(ov)) and sm.loc["overall", "std"] == pytest.approx(np.std(ov))

class FakeBenchmarkEnv:
    "The documented API: list observations, info['status'] in {success, fail, timeout, ongoing, error}."
    def __init__(self, i): self.i, self.t = i, 0
    def reset(self): return {"front_rgb_list": [np.zeros((256, 256, 3), np.uint8)] * 2, "joint_state_list": [np.zeros(7)] * 2}, \
                            {"task_goal": ["a goal", "another"], "status": "ongoing", "simple_subgoal_online": "x"}
    def step(self, a):
        assert np.shape(a) == (8,)
        self.t += 1; st = "error" if self.i == 1 else "success" if a[-1] > 0 and self.t >= 3 else "ongoing"
        return {"front_rgb_list": [np.zeros((256, 256, 3), np.uint8)]}, 0., st == "success", self.t >= 10, {"status": st}

class FakeBuilder:
    @staticmethod
    def get_task_list(): return ["BinFill", "StopCube", "InsertPeg"]
    def __init__(self, env_id, dataset, action_space, max_steps): assert dataset == "test" and max_steps == 1300
    def get_episode_num(self): return 3
    def make_env_for_episode(self, i): return FakeBenchmarkEnv(i)

def test_real_harness_on_fake_env():
    pol = lambda task, i, ms: (lambda obs, info: np.r_[np.zeros(7), 1.0 if task != "StopCube" else -1.0])
    res = RealRoboMMEHarness(pol, builder_cls=FakeBuilder).run()
    assert len(res) == 3 * 3 * 3 and set(res.model_seed) == {7, 42, 0}
    assert (res[res.seed == 1].success == 0).all() and (res[res.seed == 1].status == "error").all()
    tab = RealRoboMMEHarness.submission_table(res)
    assert tab.loc[("Counting", "BinFill"), "Avg"] == pytest.approx(200/3, abs=0.01)
    assert tab.loc[("Counting", "StopCube"), "Avg"] == 0
    assert list(tab.columns) == [0, 7, 42, "Avg"]
    with pytest.raises(ValueError, match="not allowed"): RealRoboMMEHarness(pol, action_space="multi_choice", builder_cls=FakeBuilder)

def _write_h5(path, n_ep=2, n_video=2, n_t=5, drop=None, side=64):
    "A small record_dataset_<EnvID>.h5 in the documented layout, written with h5py; returns the frames written."
    h5py = pytest.importorskip("h5py")
    frames = {}
    with h5py.File(path, "w") as f:
        f["env_id"] = path.stem[len("record_dataset_"):]
        for e in range(n_ep):
            su = f.create_group(f"episode_{e}/setup")
            su["seed"], su["difficulty"], su["task_goal"] = 4000 + 100*e, ["easy", "hard"][e % 2], b"pick up the cube twice"
            su["length"] = n_video + n_t
            g = 1.0
            for t in range(n_video + n_t):
                ts = f.create_group(f"episode_{e}/timestep_{t}")
                img = np.full((side, side, 3), 10*t + 100*e, np.uint8); img[:side//8, :side//8] = 255   # one bright cell
                frames[(e, t)] = img
                ts["obs/front_rgb"] = img
                ts["obs/eef_state"] = np.zeros(6, np.float32); ts["obs/gripper_state"] = np.zeros(2, np.float32)
                k = t - n_video
                g = -1.0 if k in (1, 2) else 1.0                                   # close at step 1, open at step 3
                ts["action/eef_action"] = np.array([0.1*k, -0.2 + 0.05*e, 0.3, 0, 0, 0, g], np.float32)
                ts["info/is_video_demo"] = t < n_video
                ts["info/simple_subgoal"] = b"pick up the cube"; ts["info/grounded_subgoal"] = b"pick up the cube at <1,2>"
                if drop and t == 0: del ts[drop]
    return frames

def test_h5_reader_on_a_real_file(tmp_path, monkeypatch):
    "The reader lists episodes from their setup alone, reads frames lazily, and checks the documented fields."
    h5py = pytest.importorskip("h5py")
    frames = _write_h5(tmp_path / "record_dataset_PickXtimes.h5")
    _write_h5(tmp_path / "record_dataset_StopCube.h5", drop="obs/front_rgb")
    r = H5DemoReader(tmp_path)
    assert r.tasks == ["PickXtimes", "StopCube"]
    reads, orig = [], h5py.Dataset.__getitem__
    monkeypatch.setattr(h5py.Dataset, "__getitem__", lambda self, k: reads.append(self.name) or orig(self, k))
    eps = r.episodes("PickXtimes")
    assert not [n for n in reads if n.endswith("front_rgb")]                     # listing reads no frame
    assert len(eps) == 2 and eps[1].seed == 4100 and eps[1].difficulty == "hard" and eps[0].n_steps == 7
    assert eps[0].task_goal == "pick up the cube twice"
    assert not any(isinstance(v, np.ndarray) for v in vars(eps[0]).values())      # nothing loaded with the episode
    it = eps[1].frames(); first = next(it)
    assert (first == frames[(1, 0)]).all() and sum(n.endswith("front_rgb") for n in reads) == 1   # one frame at a time
    assert (eps[0].frame(4) == frames[(0, 4)]).all()
    assert [s["grounded_subgoal"] for s in eps[0].steps(["grounded_subgoal"])][-1].endswith("<1,2>")
    with pytest.raises(ValueError, match="missing field 'front_rgb'"): r.episodes("StopCube")
    with pytest.raises(ValueError, match="no file for task"): r.episodes("MoveCube")
    with pytest.raises(FileNotFoundError): H5DemoReader(tmp_path / "nope")

def test_h5_episodes_become_training_demos(tmp_path):
    "Real H5 episodes turn into Demos: video-first histories, grid frames, gripper verbs and binned cells; a policy trains on them."
    pytest.importorskip("h5py")
    from maspob_etal.robomme import h5_demos, grid_frame, patchify, memory_inputs
    frames = _write_h5(tmp_path / "record_dataset_PickXtimes.h5")
    d = h5_demos(H5DemoReader(tmp_path))
    assert len(d) == 10 and d.lengths == [5, 5]
    assert [VERBS[v] for v in d.verb[:5]] == ["move", "pick", "move", "place", "move"]
    assert d.cell[:5].tolist() == [0, 8*2, 8*4, 8*6, 8*7] and d.state[1:5, 1].tolist() == [0, 1, 1, 0]
    assert len(d.seqs[0]) == 3 and len(d.seqs[4]) == 7 and d.seqs[4][:6] == d.seqs[3]   # video frames open each history
    assert (d.tok[d.cur[2]] == patchify(grid_frame(frames[(0, 4)]))).all()           # the current frame, on the grid
    assert grid_frame(frames[(0, 0)]).shape == (32, 32, 3) and grid_frame(frames[(0, 0)])[0, 0].tolist() == [255]*3
    p = make_variant("FrameSamp+Modul", seed=0, d=16, layers=1, heads=2, budget=32)
    train_policy(p, d, 2, 4)
    m = memory_inputs(p, [d.seqs[4]], d.tok, d.pooled)
    assert m["m_mask"].sum() == 2*16 and (m["m_tok"][0, 16:32] == d.pooled[d.seqs[4][-1]]).all()

def test_thread_independent():
    assert_thread_independent("""
from maspob_etal.robomme import collect_demos, make_variant, train_policy, evaluate
from maspob_etal.core import cpu_threads
with cpu_threads(1):
    d = collect_demos(["PickXtimes", "PatternLock"], n_per_task=4)
    p = train_policy(make_variant("FrameSamp+Modul", seed=1, d=16, layers=1, heads=2, budget=32), d, 8, 8, seed=1)
    r = evaluate(p, ["PickXtimes"], n_per_task=3)
result = [float(sum(x.double().sum() for x in p.parameters()))] + r.success.tolist()
""")

def test_env_rules_commit_noop_timeout():
    "A wrong action on an occupied cell fails, one on an empty cell is a no-op, StopCube fails any deviation, steps run out."
    e = MiniMMEEnv("VideoUnmask", 2000); e.reset(); sc = e.script
    wrong = next(c for c in sc.scenes[0].containers if c != sc.actions[0][1])
    assert e.step(("pick", wrong))[-1]["status"] == "fail"
    e = MiniMMEEnv("PickXtimes", 2001); e.reset(); sc = e.script
    empty = next(c for c in range(G*G) if c not in sc.scenes[0].occupied())
    obs, r, term, trunc, info = e.step(("pick", empty))
    assert info["status"] == "ongoing" and not term and len(obs["front_rgb_list"]) == 1
    btn = next(iter(sc.scenes[0].buttons))
    assert e.step(("press", btn))[-1]["status"] == "fail"                           # pressing before the repetitions
    e = MiniMMEEnv("StopCube", 2002); e.reset()
    assert e.step(("wait", 5) if e.oracle_action() != ("wait", 5) else ("press", 0))[-1]["status"] == "fail"
    e = MiniMMEEnv("PatternLock", 2003); e.reset(); sts = []
    for _ in range(e.max_steps): sts.append(e.step(("wait", 0))[-1]["status"])
    assert sts[-1] == "timeout" and set(sts[:-1]) == {"ongoing"}


def test_memory_inputs_read_the_right_slots():
    "Each representation's memory tokens come from the bank entries its rule names, in order, with their times and masks."
    from types import SimpleNamespace
    from maspob_etal.robomme import memory_inputs, even_sampling_indices
    N, D = 40, 3
    pooled = (np.arange(N)[:, None, None]*100 + np.arange(16)[None, :, None] + np.zeros((1, 1, D))).astype(np.float32)
    tok = (np.arange(N)[:, None, None]*1000 + np.arange(64)[None, :, None] + np.zeros((1, 1, D))).astype(np.float32)
    seqs = [list(range(5, 5 + 23)), [30, 31, 32]]                   # a long history (t = 22) and a short one (t = 2)
    fs = memory_inputs(SimpleNamespace(memory="FrameSamp", n_frames=8), seqs, tok, pooled)
    pick = even_sampling_indices(22, 8)
    assert fs["m_tok"].shape == (2, 8*16, D)
    frames = fs["m_tok"].reshape(2, 8, 16, D)[..., 0]
    assert (frames[0] == np.array([seqs[0][j]*100 + np.arange(16) for j in pick])).all()
    assert (frames[1, :3] == np.array([s*100 + np.arange(16) for s in seqs[1]])).all() and not fs["m_mask"].reshape(2, 8, 16)[1, 3:].any()
    assert fs["m_time"].reshape(2, 8, 16)[0, :, 0].tolist() == pick and fs["m_mask"].reshape(2, 8, 16)[1].sum() == 3*16
    for rep in ("TTT", "RMT"):                                       # recurrent: the last M frames, left-padded
        r = memory_inputs(SimpleNamespace(memory=rep, n_frames=8), seqs, tok, pooled)
        assert (r["m_tok"][0, :, :, 0] == np.array([s*100 + np.arange(16) for s in seqs[0][-8:]])).all()
        assert r["m_mask"][1].tolist() == [False]*5 + [True]*3 and (r["m_tok"][1, 5:, :, 0] == np.array([s*100 + np.arange(16) for s in seqs[1]])).all()
        assert r["m_time"][0, :, 0].tolist() == list(range(15, 23))
    drops = [np.array([[0, 7], [22, 3], [10, 63]]), np.array([[2, 5]])]   # (position in the history, patch)
    td = memory_inputs(SimpleNamespace(memory="TokenDrop", budget=4), seqs, tok, pooled, drops)
    assert (td["m_tok"][0, :3, 0]*255).round().tolist() == [5*1000 + 7, 27*1000 + 3, 15*1000 + 63]
    assert td["m_pos"][0, :3].tolist() == [7, 3, 63] and td["m_time"][0, :3].tolist() == [0, 22, 10]
    assert td["m_mask"].tolist() == [[True]*3 + [False], [True] + [False]*3] and round(float(td["m_tok"][1, 0, 0])*255) == 32*1000 + 5


def _play(task, seed, choose, difficulty=None):
    "Roll out choosing among the goal options; the status, the actions and the frames seen."
    e = MiniMMEEnv(task, seed, difficulty=difficulty); obs, _ = e.reset(); acts, frames = [], [obs["front_rgb_list"][-1]]
    while e.status == "ongoing":
        a = choose(e._options()); acts.append(a); frames.append(e.step(a)[0]["front_rgb_list"][-1])
    return e.status, acts, frames

@pytest.mark.parametrize("task", TASK_LIST)
def test_oracle_replays_its_script(task):
    "Following the first goal option reproduces the script's actions, frames and subgoals (the demos' labels)."
    for s in split_seeds("test")[:20]:
        sc = make_script(task, s)
        st, acts, frames = _play(task, s, lambda o: o[0][0])
        assert st == "success" and acts == sc.actions
        assert all((f == render(x)).all() for f, x in zip(frames, sc.scenes))

def test_success_judges_goal_completion():
    "Another highlighted cube first, a same-colour cube in BinFill, the lifts reversed, the cube put down elsewhere: success."
    last = lambda o: o[-1][0]
    for task in ["PickHighlight", "BinFill", "VideoUnmask", "ButtonUnmaskSwap", "SwingXtimes"]:
        n_alt = 0
        for s in split_seeds("test")[:12]:
            st, acts, _ = _play(task, s, last)
            assert st == "success", (task, s)
            n_alt += acts != make_script(task, s).actions
        assert n_alt > 0, task                                                  # the judge accepted other actions
    # BinFill by hand: the same-colour cube with the highest cell first, whichever colour the oracle starts with
    e = MiniMMEEnv("BinFill", 2004); e.reset(); fr = e.script.free
    col = fr["order"][-1]; c = max(k for k, v in e.scene.cubes.items() if v == col)
    assert e.oracle_action() != ("pick", c)
    assert e.step(("pick", c))[-1]["status"] == "ongoing" and e.step(("place", fr["bin"]))[-1]["status"] == "ongoing"
    while e.status == "ongoing": e.step(e.oracle_action())
    assert e.status == "success" and e.k == len(e.script.actions)
    # PickHighlight by hand: the last highlighted cube first
    e = MiniMMEEnv("PickHighlight", 2003); e.reset(); hl = e.script.free["cells"]
    assert len(hl) > 1
    for a in e.script.actions[:3]: e.step(a)
    for c in reversed(hl): e.step(("pick", c))
    assert e.status == "success"

def test_judge_still_fails_wrong_goals():
    "A cube of a full colour, a non-highlighted cube, a container that hides nothing asked for: fail."
    e = MiniMMEEnv("BinFill", 2003); e.reset(); fr = e.script.free; col = fr["order"][0]
    while e.done.count(col) < fr["want"][col]: e.step(e.oracle_action())
    assert e.step(("pick", next(c for c, k in e.scene.cubes.items() if k == col)))[-1]["status"] == "fail"
    e = MiniMMEEnv("PickHighlight", 2003); e.reset()
    for a in e.script.actions[:3]: e.step(a)
    other = next(c for c in e.scene.cubes if c not in e.script.free["cells"])
    assert e.step(("pick", other))[-1]["status"] == "fail"
    e = MiniMMEEnv("VideoUnmask", 2000); e.reset()
    wrong = next(c for c in e.scene.containers if c not in e.script.free["cells"])
    assert e.step(("pick", wrong))[-1]["status"] == "fail"

def test_difficulty_comes_from_the_seed_file(tmp_path):
    "Episodes take seed and difficulty from a seed file in the benchmark's format, not from seed % 3."
    recs = [dict(task="PatternLock", episode=k, seed=s, difficulty=dif)
            for k, (s, dif) in enumerate([(0, "hard"), (1, "easy"), (5, "hard")])]   # seed % 3 would say easy, medium, hard
    write_seed_file(seed_file_path(tmp_path, "PatternLock", "train"), recs)
    assert read_seed_file(tmp_path / "train" / "record_dataset_PatternLock_metadata.json") == recs
    d = collect_demos(["PatternLock"], "train", 3, metadata_dir=tmp_path)
    assert [sc.difficulty for sc in d.scripts] == ["hard", "easy", "hard"] and [sc.seed for sc in d.scripts] == [0, 1, 5]
    side = lambda sc: int(round(len(sc.scenes[0].lanes) ** 0.5))                  # lock grid 3 / 3 / 4 by difficulty
    assert [side(sc) for sc in d.scripts] == [4, 3, 4]
    assert MiniMMEEnv("PatternLock", 0, difficulty="hard").difficulty == "hard"
    assert [r["difficulty"] for r in episode_records("PatternLock", "train")[:4]] == ["easy", "easy", "medium", "hard"]
    res = evaluate(make_variant("none", d=16, layers=1, heads=2), ["PatternLock"], "train", 3, metadata_dir=tmp_path)
    assert res.difficulty.tolist() == ["hard", "easy", "hard"] and res.seed.tolist() == [0, 1, 5]
    with pytest.raises(FileNotFoundError, match="no seed file"): episode_records("BinFill", "train", tmp_path)

def test_training_batches_read_each_samples_own_history():
    "A training batch's memory comes from the sample's own history, whose last frame is its current frame."
    d = collect_demos(["PickXtimes", "VideoUnmaskSwap"], n_per_task=2)
    p = make_variant("FrameSamp+Modul", seed=0, d=16, layers=1, heads=2, budget=32)
    ix = np.r_[np.cumsum(d.lengths) - 1, 0]                                  # each episode's last step, and a first one
    b = _batch(p, d, ix, "cpu")
    for j, i in enumerate(ix):
        seq = d.seqs[i]; assert seq[-1] == d.cur[i]
        pick = even_sampling_indices(len(seq) - 1, 2)
        want = np.concatenate([d.pooled[seq[k]] for k in pick])
        assert np.allclose(b["m_tok"][j, :len(want)].numpy(), want)
        assert np.allclose(b["cur"][j].numpy(), d.tok[d.cur[i]] / 255.)

def test_budget_checkpoints_equal_shorter_runs():
    "The rate schedule does not depend on the run's length: the policy after k steps of a long run is the k-step run's."
    d = collect_demos(["PickXtimes", "PatternLock"], n_per_task=3)
    snap = {}
    train_policy(make_variant("FrameSamp+Modul", seed=1, d=16, layers=1, heads=2, budget=32), d, 8, 4, seed=1, warmup=3, at=[5],
                 on_step=lambda s, p: snap.update({k: v.clone() for k, v in p.state_dict().items()}))
    short = train_policy(make_variant("FrameSamp+Modul", seed=1, d=16, layers=1, heads=2, budget=32), d, 5, 4, seed=1, warmup=3)
    for k, v in short.state_dict().items(): torch.testing.assert_close(v, snap[k])

def test_clock_shortcut_reads_the_step_index():
    "none+clock sees each sample's step index (0, 1, ... in every episode); none does not."
    d = collect_demos(["PickXtimes", "PatternLock"], n_per_task=2)
    starts = np.cumsum([0] + d.lengths[:-1])
    assert (d.t[starts] == 0).all() and d.t[:d.lengths[0]].tolist() == list(range(d.lengths[0]))
    for name, moves in (("none+clock", True), ("none", False)):
        p = make_variant(name, seed=0, d=16, layers=1, heads=2)
        b = _batch(p, d, np.arange(4), "cpu"); b["t"] = torch.as_tensor(d.t[:4])
        with torch.no_grad(): o1 = p(b)["verb"]; b["t"] = b["t"] + 3; o2 = p(b)["verb"]
        assert (not torch.allclose(o1, o2)) == moves, name

def test_evaluate_gives_the_clock_the_step_index(monkeypatch):
    "At test time the shortcut sees the same step index as in training: 0 at the first step after the video."
    p = make_variant("none+clock", seed=0, d=16, layers=1, heads=2)
    seen, fwd = [], p.forward
    monkeypatch.setattr(p, "forward", lambda b, **k: seen.append(b["t"].tolist()) or fwd(b, **k))
    evaluate(p, ["PickXtimes", "VideoUnmask"], n_per_task=3)
    assert seen and all(set(s) == {i} for i, s in enumerate(seen))            # episodes step in lockstep
