"""The same seed gives the same numbers whatever the CPU thread count: each check runs one small experiment in a fresh
process with 1 and with 2 threads and compares the results bit for bit. Method-specific checks live in the method's
own tests/test_SLUG.py and use the same helper."""
import pytest
from _threads import assert_thread_independent, run_with_threads

def test_the_check_can_fail():
    "A large float32 sum splits into per-thread partial sums, so its last bits move with the thread count."
    code = """
import torch
x = torch.randn(4_000_000, generator=torch.Generator().manual_seed(0))
result = float(x.sum())
"""
    one, two = run_with_threads(code, 1), run_with_threads(code, 2)
    assert one != two                      # the thread count leaks into a plain big reduction...
    pinned = code.replace("result = float(x.sum())", "from maspob_etal.core import cpu_threads\nwith cpu_threads(1): result = float(x.sum())")
    assert_thread_independent(pinned)      # ...and cpu_threads(1) removes it

def test_a_small_training_run_is_thread_independent():
    "Seeded init, a batch of matrix products and Adam steps: the kind of loop the method notebooks run."
    assert_thread_independent("""
import torch
from maspob_etal.core import seed_everything
g = seed_everything(0)
net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(), torch.nn.Linear(256, 1))
x, y = torch.randn(512, 64, generator=g), torch.randn(512, 1, generator=g)
opt = torch.optim.Adam(net.parameters(), 1e-2)
for _ in range(50):
    loss = torch.nn.functional.mse_loss(net(x), y); opt.zero_grad(); loss.backward(); opt.step()
result = [float(loss), float(net[0].weight.sum())]
""")
