"Property and known-value tests of maspob_etal.sawbench (spec 19 section 6)."
import math, pathlib, sys

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from maspob_etal.sawbench import (
    DIR_LABELS, EYE, LOC_LABELS, REVPLAN_LABELS, REVPLAN_TEMPLATE, SHAPE_LABELS, TASKS, BagOfFramesModel, BlindPriorModel,
    ChanceModel, LetterModel, LetterPriorModel, OraclePoseModel, SAWItem, SAWNet, SAWObject, Scene, VideoGRUModel,
    VOGeometryModel, evaluate, execute_instructions, frame_index, label_affordance, label_direction, label_localization,
    label_revplan, label_shape, load_frames, load_sawbench, make_item, make_scene, make_split, parse_answer, render_frames,
    run_seed, score_answers, simulate, summarize, turn_events)

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from _threads import assert_thread_independent  # noqa: E402

ROOM = Scene(10., 8., "indoor", objects=[])


def edge_rows(img, col):
    "Continuous top and bottom wall rows of a column, from the saturation of the blended edge pixels."
    x = img[:, col].astype(float)/255; s = x.max(1) - x.min(1)
    wall = np.nonzero(s > 1e-3)[0]; top, bot = wall[0], wall[-1]
    return top + 1 - s[top]/s[top + 1], bot + s[bot]/s[bot - 1]


@pytest.mark.parametrize("d", [2.5, 3.1, 4.4, 7.0])
@pytest.mark.parametrize("wh", [(64, 48), (128, 96)])
def test_wall_rows_closed_form(d, wh):
    w, h = wh
    f = (w/2)/math.tan(math.radians(45))
    img = render_frames(ROOM, np.array([[5., 8. - d, 90.]]), w=w, h=h)[0]
    for col in (w//4, w//2, w - w//4):             # a frontal wall has depth d in every column: straight edges
        top, bot = edge_rows(img, col)
        assert abs(top - (h/2 - f*(2.8 - EYE)/d)) < 0.05 and abs(bot - (h/2 + f*EYE/d)) < 0.05


def test_outdoor_fence_rows():
    yard = Scene(30., 30., "outdoor", wall_h=1.0, objects=[])
    img = render_frames(yard, np.array([[15., 25., 90.]]), w=64, h=48)[0]
    f = 32.0
    s = (img[:, 32].astype(float).max(1) - img[:, 32].astype(float).min(1))
    bot = np.nonzero(s > 0)[0][-1]
    assert abs(bot + 0.5 - (24 + f*EYE/5)) <= 1.0                           # the fence's foot at 5 m


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_rotation_shifts_centre_texture(k):
    prof = lambda yaw: render_frames(ROOM, np.array([[5., 4., yaw]]), 64, 48)[0, 24].astype(float)
    a, b = prof(90.), prof(90. + k*90/64)
    shift = min(range(-8, 9), key=lambda s: ((a[20:44] - b[20 + s:44 + s])**2).mean())
    assert abs(shift - k) <= 1


def test_objects_occlude_in_depth_order():
    near, far = SAWObject("a", 5., 5., 0.4, 0., 2.0, (1., 0., 0.)), SAWObject("b", 5., 6.5, 0.4, 0., 2.0, (0., 0., 1.))
    sc = Scene(10., 8., "indoor", objects=[far, near])                        # listed far first and near first
    for objs in ([far, near], [near, far]):
        sc.objects = objs
        px = render_frames(sc, np.array([[5., 2., 90.]]), 64, 48)[0, 24, 32]
        assert px[0] > 150 and px[2] < 80                                       # the near red one is in front


def test_labeller_known_cases():
    assert label_localization((5., 4.), (10., 8.)) == "Center"
    assert label_localization((0.3, 0.3), (10., 8.)) == "Corner"
    assert label_localization((5., 0.5), (10., 8.)) == "Side"
    assert label_direction((0., 0.), (3., 0., 0.)) == "Back"                  # start directly behind
    assert label_direction((0., 0.), (3., 0., 180.)) == "Front"
    assert label_direction((1., 2.), (1., 0., 0.)) == "Left" and label_direction((1., -2.), (1., 0., 0.)) == "Right"
    assert label_direction((-2., 2.), (0., 0., 0.)) == "Back left" and label_direction((-2., -2.), (0., 0., 0.)) == "Back right"
    P, _ = simulate((3., 3., 0.), [("pan", 270)])
    assert label_direction(P[0], P[-1]) == "Same location"                   # a pan-only clip
    assert label_revplan(("L", "R")) == "Turn around, go straight. Turn left, go straight, then turn right and continue go straight."
    assert label_revplan(("R", "R")) == "Turn around, go straight. Turn left, go straight, then turn left and continue go straight."
    assert label_revplan(("R", "L")) == REVPLAN_TEMPLATE.format(a="right", b="left")
    assert label_affordance((0., 0., 0.), SAWObject("television", 0.4, 0., 0., 2.5, 2.9)) == "No"
    assert label_affordance((0., 0., 0.), SAWObject("water bottle", 0.5, 0., 0., 1.0, 1.0)) == "Yes"
    # every term matters: radius, vertical gap and the leftward step
    assert label_affordance((0., 0., 0.), SAWObject("pole", 0.9, 0., 0.25, 1.2, 1.5)) == "Yes"      # 0.65 m to the surface
    assert label_affordance((0., 0., 0.), SAWObject("pole", 0.9, 0., 0.15, 1.2, 1.5)) == "No"       # 0.75 m
    assert label_affordance((0., 0., 0.), SAWObject("box", 0.5, 0., 0., 1.9, 2.0)) == "No"          # hypot(0.5, 0.55) = 0.74
    assert label_affordance((0., 0., 90.), SAWObject("cup", -0.9, 0., 0., 1.35, 1.4), "step_left") == "Yes"
    assert label_affordance((0., 0., 90.), SAWObject("cup", -0.9, 0., 0., 1.35, 1.4), "feet") == "No"


@pytest.mark.parametrize("acts,label", [
    ([("walk", 3), ("turn", 90), ("walk", 3)], "L-Shape"),
    ([("walk", 3), ("turn", -90), ("walk", 2), ("turn", -90), ("walk", 3)], "U-Shape"),
    ([("walk", 2.5)] + [x for _ in range(3) for x in (("turn", 90), ("walk", 2.5))], "Square"),
    ([("walk", 3)] + [x for _ in range(2) for x in (("turn", -120), ("walk", 3))], "Triangle"),
    ([("arc", 360, 1.5)], "Circle"),
    ([("pan", 300)], "In-place orientation"),
    ([("walk", 2), ("turn", 90), ("walk", 2), ("turn", -90), ("walk", 2), ("turn", -90), ("walk", 2)], "Manhattan-style piecewise linear")])
def test_label_shape_known(acts, label):
    P, _ = simulate((0., 0., 30.), acts)
    assert label_shape(P) == label
    assert label_shape(P[frame_index(len(P))]) == label                      # the same rule at 2 fps


def test_revplan_execution_independent():
    for s in range(40):
        it = make_item("revplan", 10**6 + s, render=False)
        P = it.meta["poses"]
        for o in it.options:
            miss = np.hypot(*(execute_instructions(P[-1], o, it.meta["seg_lengths"]) - P[0, :2]))
            assert (miss < 0.5) if o == it.ground_truth else (miss > 2.0)


def test_oracle_is_perfect_indoor_and_outdoor():
    oracle = OraclePoseModel()
    for s in range(3):
        for cat in ("indoor", "outdoor"):
            items = [make_item(t, 10**6 + 100*s + i, scene_category=cat, render=False) for t in TASKS for i in range(8)]
            assert all(oracle.predict(it) == it.answer for it in items)
            for it in items:
                if it.task == "shape": assert label_shape(it.meta["poses"]) == it.ground_truth


def test_answer_positions_uniform_and_chance_and_prior():
    n = 120
    for t in TASKS:
        items = [make_item(t, 10**6 + i, render=False) for i in range(n)]
        K = max(len(it.options) for it in items)
        counts = np.bincount([it.answer for it in items if len(it.options) == K], minlength=K)
        assert stats.chisquare(counts).pvalue > 0.01, (t, counts)
        labels = [it.ground_truth for it in items]
        if t != "memory":                                                     # labels drawn uniformly at random
            assert stats.chisquare([labels.count(l) for l in sorted(set(labels))]).pvalue > 0.001, (t, labels)
        p = np.mean([1/len(it.options) for it in items]); sd = math.sqrt(p*(1 - p)/n)
        guesses = [ChanceModel(3).predict(it) for it in items]
        acc = np.mean([g == it.answer for g, it in zip(guesses, items)])
        assert abs(acc - p) <= 3*sd, (t, acc, p)
        assert stats.chisquare(np.bincount([g for g, it in zip(guesses, items) if len(it.options) == K], minlength=K)).pvalue > 0.01
        prior = BlindPriorModel().fit([make_item(t, i, render=False) for i in range(60)])
        acc_b = np.mean([prior.predict(it) == it.answer for it in items])
        assert abs(acc_b - p) <= 3*sd, (t, acc_b, p)                          # no answer prior to learn
        train = [make_item(t, i, render=False) for i in range(120)]
        for pos in (LetterModel(0), LetterModel(1), LetterPriorModel().fit(train)):   # no position to exploit
            acc_p = np.mean([pos.predict(it) == it.answer for it in items])
            assert abs(acc_p - p) <= 3*sd, (t, pos.name, acc_p, p)


def _residue_rule_accuracy(values, seeds, m):
    "Fit 'seed mod m -> the most frequent value' on the first half of the seeds, score it on the second half."
    fit, held = slice(0, len(seeds)//2), slice(len(seeds)//2, None)
    rule = {}
    for v, s in zip(values[fit], seeds[fit]): rule.setdefault(s % m, []).append(v)
    rule = {r: max(sorted(set(vs)), key=vs.count) for r, vs in rule.items()}
    return np.mean([rule.get(s % m) == v for v, s in zip(values[held], seeds[held])])


N_LABELS = dict(localization=3, direction=9, shape=7, revplan=4, memory=6, affordance=2)   # label cycle lengths


@pytest.mark.parametrize("t", TASKS)
def test_labels_and_positions_not_a_function_of_the_seed(t):
    "No rule 'seed mod m -> label' or 'seed mod m -> answer letter' beats chance on held-out seeds (labels are drawn)."
    seeds = list(range(10**6, 10**6 + 144))
    items = [make_item(t, s, render=False) for s in seeds]
    labels = [f"{it.meta.get('subtype', '')}:{it.ground_truth}" for it in items]
    pos = [it.answer for it in items]
    K = max(len(it.options) for it in items)
    for what, values, mods in (("labels", labels, {2, 3, 4, N_LABELS[t]}), ("positions", pos, {2, 3, 4, K})):
        p = max(values.count(v) for v in set(values))/len(values)              # the most frequent value's share
        sd = math.sqrt(p*(1 - p)/72)
        for m in sorted(mods):
            acc = _residue_rule_accuracy(values, seeds, m)
            assert acc <= p + 4*sd, (t, what, m, acc, p)


def test_two_frames_per_second_and_disjoint_splits():
    for t in TASKS:
        it = make_item(t, 5, w=16, h=12)
        assert len(it.frames) == int(len(it.meta["poses"])/10*2) and it.frames.shape[1:] == (12, 16, 3)
    tr = make_split("train", {t: 5 for t in TASKS}, render=False)
    te = make_split("test", {t: 5 for t in TASKS}, render=False)
    assert not ({i.id for i in tr} & {i.id for i in te})
    assert not ({(i.question, tuple(i.options), i.meta["poses"].tobytes()) for i in tr} & {(i.question, tuple(i.options), i.meta["poses"].tobytes()) for i in te})
    with pytest.raises(ValueError, match="below 10"): make_split("train", {"shape": 10}, seed0=10**6)


def test_vo_yaw_matches_ground_truth_indoor():
    P, R = simulate((5., 4., 20.), [("pan", 150), ("pan", -100)])
    fi = frame_index(len(P))
    frames = render_frames(ROOM, P[fi], 64, 48)
    est = VOGeometryModel().yaw_steps(frames)
    assert np.abs(est - np.diff(P[fi, 2])).max() < 1.5
    P2, _ = simulate((2., 4., 0.), [("walk", 4.0)])
    fi2 = frame_index(len(P2))
    traj = VOGeometryModel().trajectory(render_frames(ROOM, P2[fi2], 64, 48))
    assert abs(traj[-1, 0] - 4.0) < 0.6 and abs(traj[-1, 2]) < 10             # forward 4 m; periodic stripes cost a few degrees


def test_parser_cases():
    opts = ["Back", "Back left", "Front", "Same location"]
    for txt, want in [("B", 1), ("(b)", 1), ("Answer: B.", 1), ("The answer is Back left", 1), ("answer is (D)", 3),
                      ("Front.", 2), ("Back or Front", None), ("A or B", None), ("", None), (None, None), ("Z", None)]:
        assert parse_answer(txt, opts) == want, txt


def test_summarize_micro_macro():
    df = pd.DataFrame(dict(model="m", id=range(5), key=[f"k{i}" for i in range(5)], task=["shape"]*4 + ["revplan"],
                           scene_category=["indoor", "outdoor", "indoor", "indoor", "outdoor"], answer=0, pred=0,
                           n_options=[4, 4, 4, 2, 4], correct=[1, 0, 0, 1, 1]))
    s = summarize(df)
    assert s.loc["m", "micro"] == pytest.approx(0.6) and s.loc["m", "macro"] == pytest.approx((0.5 + 1.0)/2)
    assert s.loc["m", "indoor"] == pytest.approx(2/3) and s.loc["m", "outdoor"] == pytest.approx(0.5)
    assert s.loc["chance (expected)", "shape"] == pytest.approx((0.25*3 + 0.5)/4)


def test_real_loader_and_errors(tmp_path):
    rows = pd.DataFrame(dict(question=["What's the shape of my moving trajectory?"]*2 + ["Is it the same?"],
                             options=[["Circle", "Square", "L-Shape", "U-Shape"]]*2 + [["Yes", "No"]], answer=[1, 0, 1],
                             ground_truth=["Square", "Circle", "No"], key=["4_3", "4_4", "5_1"], scene_category=["indoor", "outdoor", "indoor"],
                             task=["shape", "shape", "memory"], id=[10, 11, 12]))
    rows.to_parquet(tmp_path/"qa.parquet")
    items = load_sawbench(tmp_path)
    assert [i.id for i in items] == [10, 11, 12] and items[0].frames is None and items[2].options == ["Yes", "No"]
    s = summarize(evaluate(ChanceModel(0), items)); assert s.loc["chance", "n"] == 3
    sc = score_answers(items, {10: "Square", 11: "(A)"}); assert sc.correct.tolist() == [1, 1, 0] and sc.parsed.tolist() == [True, True, False]
    rows.drop(columns="scene_category").to_parquet(tmp_path/"qa.parquet")
    with pytest.raises(ValueError, match="missing required columns"): load_sawbench(tmp_path)
    rows.assign(task=["shape", "navigation", "memory"]).to_parquet(tmp_path/"qa.parquet")
    with pytest.raises(ValueError, match="unknown task keys"): load_sawbench(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"): load_sawbench(tmp_path/"nope")


def test_bad_input():
    with pytest.raises(ValueError, match="no frames"): render_frames(ROOM, np.zeros((0, 3)))
    with pytest.raises(ValueError, match="poses must be"): render_frames(ROOM, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="unknown task key"): make_item("navigation", 0)
    it = make_item("shape", 1, w=16, h=12)
    with pytest.raises(ValueError, match="no frames"): VOGeometryModel().predict(SAWItem(**{**it.__dict__, "frames": it.frames[:0]}))
    with pytest.raises(ValueError, match="frames=None"): VOGeometryModel().predict(SAWItem(**{**it.__dict__, "frames": None}))
    with pytest.raises(ValueError, match="temporal must be"): SAWNet("lstm")
    with pytest.raises(ValueError, match="steps and batch"): VideoGRUModel(seed=0).fit([it], steps=0)


def test_bad_sizes_say_what_to_fix():
    with pytest.raises(ValueError, match="image size must be positive"): render_frames(ROOM, np.zeros((2, 3)), w=0, h=48)
    with pytest.raises(ValueError, match="item counts must be >= 0"): make_split("train", {"shape": -3})
    with pytest.raises(ValueError, match="sizes must be positive"): SAWNet("gru", d=0)
    with pytest.raises(ValueError, match="n_objects must be >= 0"): make_scene(np.random.default_rng(0), n_objects=-1)


def test_bag_of_frames_order_free_gru_not():
    x, L = torch.randn(6, 3, 12, 16), torch.tensor([6])
    perm = torch.tensor([5, 2, 0, 4, 1, 3])
    bof, gru = BagOfFramesModel(seed=1).net.eval(), VideoGRUModel(seed=1).net.eval()
    torch.testing.assert_close(bof.video(x, L), bof.video(x[perm], L), atol=1e-5, rtol=1e-5)
    assert (gru.video(x, L) - gru.video(x[perm], L)).abs().max() > 1e-4


def test_thread_independent():
    assert_thread_independent("""
import numpy as np, zlib
from maspob_etal.sawbench import make_split, VideoGRUModel, VOGeometryModel, evaluate, TASKS
tr = make_split("train", {"shape": 2, "revplan": 2}, w=32, h=24)
m = VideoGRUModel(seed=0, embed=lambda xs: np.stack([np.cos(np.arange(384)*(1 + zlib.crc32(x.encode()) % 97)) for x in xs])).fit(tr, steps=2, batch=3)
vo = [VOGeometryModel().predict(i) for i in tr if i.task in ("shape", "revplan")]
result = [float(x) for x in m.losses] + [int(x) for x in m.predict_batch(tr)] + vo
""")


@pytest.mark.parametrize("turn", [90, -90])
def test_vo_trajectory_turns_the_right_way(turn):
    "Walk 3 m, turn, walk 3 m: the dead-reckoned end lies on the side of the turn, heading turned the same way."
    P, _ = simulate((2., 4., 0.), [("walk", 3.0), ("turn", turn), ("walk", 3.0)])          # stays 1 m inside the 10 x 8 room
    traj = VOGeometryModel().trajectory(render_frames(ROOM, P[frame_index(len(P))], 64, 48))
    s = np.sign(turn)
    assert s*traj[-1, 1] > 1.0 and s*traj[-1, 2] > 30 and traj[-1, 0] > 2.0    # truth: (3, 3s), yaw 90s


@pytest.mark.parametrize("k", [0, 1, 2])
def test_turn_knob_items(k):
    "The regime knob: direction routes with exactly k turns and a final head turn; labels realised; other tasks refuse it."
    for i in range(12):
        it = make_item("direction", 10**6 + 7000 + i, render=False, n_turns=k)
        P = it.meta["poses"]
        assert len(turn_events(P)) == k and it.meta["n_turns"] == k and it.key.endswith(f"_turns{k}")
        assert it.ground_truth != "Same location" and OraclePoseModel().predict(it) == it.answer
        assert abs(P[-1, 2] - P[-2, 2]) > 0 or abs(P[-1, 2] - P[0, 2]) > 0      # it ends turned
    with pytest.raises(ValueError, match="direction task only"): make_item("shape", 0, n_turns=1)


def test_letter_prior_takes_the_train_majority_position():
    tr = [make_item("revplan", i, render=False) for i in range(40)]
    counts = np.bincount([it.answer for it in tr], minlength=4)
    m = LetterPriorModel().fit(tr)
    assert m.predict(tr[0]) == int(np.argmax(counts))
    two = [it for it in (make_item("affordance", i, render=False) for i in range(20))]
    assert LetterModel(3).predict(two[0]) == 1                                 # clipped to the last of 2 options
    assert LetterPriorModel().fit(two).predict(two[0]) in (0, 1)


def _fake_embed(xs):
    import zlib
    return np.stack([np.cos(np.arange(384)*(1 + zlib.crc32(x.encode()) % 97)) for x in xs])


@pytest.mark.usefixtures("one_torch_thread")
def test_budget_callback_does_not_change_training():
    tr = make_split("train", {"shape": 3, "revplan": 3}, w=16, h=12)
    seen = []
    a = VideoGRUModel(seed=0, embed=_fake_embed).fit(tr, steps=4, batch=3,
                                                      callback=lambda s, m: seen.append((s, m.predict_batch(tr))))
    b = VideoGRUModel(seed=0, embed=_fake_embed).fit(tr, steps=4, batch=3)
    assert [s for s, _ in seen] == [1, 2, 3, 4] and a.losses == b.losses and seen[-1][1] == b.predict_batch(tr)


@pytest.mark.usefixtures("one_torch_thread")
def test_run_seed_unit():
    u = run_seed(3, {t: 2 for t in TASKS}, {t: 2 for t in TASKS}, knob_turns=(0, 2), knob_per_value=2, w=16, h=12,
                 budgets=(1, 2), batch=2, embed=_fake_embed)
    r = u["res"]
    assert set(r.seed) == {3} and set(r.part) == {"main", "turns"}
    assert set(r[r.part == "turns"].n_turns) == {0, 2} and (r[r.part == "turns"].task == "direction").all()
    learned = r[r.model.isin(["BagOfFrames", "VideoGRU"])]
    assert sorted(set(learned.budget)) == [1, 2] and (r[~r.model.isin(["BagOfFrames", "VideoGRU"])].budget == 0).all()
    per = r.groupby(["model", "budget"]).size()
    assert per.nunique() == 1 and per.iloc[0] == 12 + 4                      # every model on the same 16 items
    assert (r[r.model == "oracle"].correct == 1).all() and len(u["losses"]["VideoGRU"]) == 2


def _write_video(path, frames, fps):
    "A lossless H.264 video (4:4:4) of RGB frames, with PyAV."
    import av
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt, s.options = frames.shape[2], frames.shape[1], "yuv444p", {"crf": "0"}
        for f in frames:
            for p in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")): c.mux(p)
        for p in s.encode(): c.mux(p)


@pytest.mark.usefixtures("one_torch_thread")
def test_real_data_path_end_to_end(tmp_path):
    "Parquet + videos written here: load_sawbench, then evaluate decodes each video at 2 fps for a model that needs frames."
    pytest.importorskip("av")
    syn = [make_item(t, 10**6 + i, w=64, h=48) for i, t in enumerate(("revplan", "shape", "direction", "localization"))]
    (tmp_path/"videos").mkdir()
    for it in syn:                     # every 10 Hz pose as a 10 fps video; 2 fps decoding keeps every 5th frame
        _write_video(tmp_path/"videos"/f"{it.key}.mp4", render_frames(it.meta["scene"], it.meta["render_poses"], 64, 48), 10)
    pd.DataFrame(dict(question=[i.question for i in syn], options=[i.options for i in syn], answer=[i.answer for i in syn],
                      ground_truth=[i.ground_truth for i in syn], key=[i.key for i in syn], task=[i.task for i in syn],
                      scene_category=[i.scene_category for i in syn], id=[i.id for i in syn])).to_parquet(tmp_path/"qa.parquet")
    real = load_sawbench(tmp_path)
    assert all(r.frames is None for r in real)
    for r, it in zip(real, syn):
        fr = load_frames(r)
        assert fr.shape == it.frames.shape and np.abs(fr.astype(int) - it.frames.astype(int)).mean() < 3
    vo = VOGeometryModel()
    df = evaluate(vo, real)                                                  # frames decoded inside evaluate
    want = [vo.predict(SAWItem(**{**r.__dict__, "frames": load_frames(r)})) for r in real]
    assert df.pred.tolist() == want and len(df) == 4
    assert all(r.frames is None for r in real)                               # nothing kept in memory
    (tmp_path/"videos"/f"{syn[0].key}.mp4").unlink()
    with pytest.raises(FileNotFoundError, match="not found"): evaluate(vo, real)
    assert len(evaluate(ChanceModel(0), real)) == 4                          # a frame-free model needs no video
