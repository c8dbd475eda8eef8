import random, time

import numpy as np
import pytest
import torch

from maspob_etal.core import SCALES, Timer, cpu_threads, get_device, pick, progress, scale_at_least, seed_everything

def test_pick_chooses_by_scale():
    assert pick("smoke", a=(1, 2, 3), b=("x", "y", "z")).__dict__ == {"a": 1, "b": "x"}
    assert pick("full", a=(1, 2, 3)).a == 2 and pick("gpu", a=(1, 2, 3)).a == 3
    assert SCALES == ("smoke", "full", "gpu")

def test_scale_at_least_orders_the_scales():
    assert [scale_at_least(s, "full") for s in SCALES] == [False, True, True]
    assert all(scale_at_least(s, "smoke") for s in SCALES) and not scale_at_least("full", "gpu")
    with pytest.raises(ValueError, match="scale must be one of"): scale_at_least("full", "huge")

@pytest.mark.parametrize("bad", ["huge", "", None, "Smoke"])
def test_pick_rejects_unknown_scale(bad):
    with pytest.raises(ValueError, match="scale must be one of"): pick(bad, a=(1, 2, 3))

@pytest.mark.parametrize("bad", [3, (1, 2), (1, 2, 3, 4)])
def test_pick_rejects_anything_but_a_triple(bad):
    with pytest.raises(ValueError, match=r"\(smoke, full, gpu\) triple"): pick("smoke", a=bad)

def test_cpu_threads_sets_and_restores():
    n0 = torch.get_num_threads()
    with cpu_threads(1): assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == n0
    with pytest.raises(RuntimeError):
        with cpu_threads(1): raise RuntimeError("inside")
    assert torch.get_num_threads() == n0
    with pytest.raises(ValueError, match="positive integer"):
        with cpu_threads(0): pass

def test_get_device():
    assert get_device("cpu") == torch.device("cpu")
    assert get_device(torch.device("cpu")) == torch.device("cpu")
    assert get_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"): get_device("gpu7")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"): get_device("cuda:0")
    else:
        with pytest.raises(ValueError, match="does not exist"): get_device(f"cuda:{torch.cuda.device_count()}")

def test_seed_everything_reproduces_every_source():
    def draw(g): return random.random(), float(np.random.rand()), torch.rand(3).tolist(), torch.randn(3, generator=g).tolist()
    assert draw(seed_everything(7)) == draw(seed_everything(7))
    assert draw(seed_everything(7)) != draw(seed_everything(8))
    with pytest.raises(ValueError): seed_everything(-3)
    with pytest.raises(ValueError): seed_everything(1.5)

def test_progress_is_a_plain_iterable_and_can_be_silenced(monkeypatch):
    assert list(progress(range(3))) == [0, 1, 2]
    monkeypatch.setenv("MASPOB_PROGRESS", "0")
    assert progress(range(3)).disable

def test_timer():
    with Timer() as t: time.sleep(0.02)
    assert 0.015 < t.elapsed < 0.5
    t2 = Timer().start(); time.sleep(0.01); assert t2.elapsed > 0.005

def test_explorer_draws_the_default_outside_an_interactive_session(monkeypatch):
    import matplotlib; matplotlib.use("Agg")
    from maspob_etal.core import explorer, interactive_session
    monkeypatch.delenv("MASPOB_BATCH", raising=False)
    assert not interactive_session()                    # plain Python: no kernel, no widgets
    seen = []
    assert explorer(lambda k, m: seen.append((k, m)), k=(1, 9, 1, 3), m=["a", "b"]) is None
    assert seen == [(3, "a")]
    with pytest.raises(ValueError, match="outside"): explorer(lambda k: None, k=(1, 9, 1, 12))
    with pytest.raises(ValueError, match="at least one choice"): explorer(lambda m: None, m=[])

def _task_threads_and_sum(seed, n=300_000):
    "A worker task: the torch thread count it runs with and a large float32 sum (its last bits depend on the threads)."
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    return torch.get_num_threads(), x.sum().item()

def _fails_on_two(i):
    if i == 2: raise ValueError("task 2 is bad")
    return i

def test_parallel_map_gives_the_numbers_of_a_loop_in_task_order():
    from maspob_etal.core import parallel_map, worker_pool
    tasks = [dict(seed=s) for s in (5, 1, 4, 2, 3)]
    with cpu_threads(1): loop = [_task_threads_and_sum(**t) for t in tasks]
    assert parallel_map(_task_threads_and_sum, tasks, n_jobs=2) == loop                 # workers run one thread each
    assert parallel_map(_task_threads_and_sum, tasks, threads=1) == loop
    with worker_pool(2) as pool: futs = [pool.submit(_task_threads_and_sum, **t) for t in tasks]
    assert [f.result() for f in futs] == loop
    assert parallel_map(_task_threads_and_sum, tasks, n_jobs=2) == loop                 # joblib's pool beside it
    assert parallel_map(_task_threads_and_sum, [(7, 10)]) == [_task_threads_and_sum(7, 10)]   # a tuple: positional
    with pytest.raises(ValueError, match="task 2 is bad"): parallel_map(_fails_on_two, [1, 2, 3], n_jobs=2)
    with pytest.raises(ValueError, match="n_jobs must be a positive integer"): parallel_map(abs, [1], n_jobs=0)
    with pytest.raises(ValueError, match="threads must be"): parallel_map(abs, [1], threads=0)

def test_no_method_module_starts_its_own_process_pool():
    "Worker processes go through core.parallel_map / core.worker_pool (one joblib pool), not a pool per method."
    import pathlib, maspob_etal
    pkg = pathlib.Path(maspob_etal.__file__).parent
    own = [p.name for p in sorted(pkg.glob("*.py")) if p.name != "core.py"
           and any(s in p.read_text() for s in ("ProcessPoolExecutor", "multiprocessing", "Parallel("))]
    assert own == [], f"these modules start their own pools: {own}"
