"Test-suite set-up: offline, quiet, and the network blocked here and in every kernel the tests start."
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", MASPOB_PROGRESS="0", MASPOB_BATCH="1",
                  MASPOB_BLOCK_NETWORK="1", TOKENIZERS_PARALLELISM="false")
_guard = str(Path(__file__).resolve().parent/"_offline")
os.environ["PYTHONPATH"] = os.pathsep.join([_guard] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])

from maspob_etal.offline import enable_network_block  # noqa: E402
enable_network_block()

# Property tests draw the same examples on every run (set HYPOTHESIS_PROFILE=explore for fresh random ones).
from hypothesis import settings  # noqa: E402
settings.register_profile("repro", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))

@pytest.fixture
def results_tmp(tmp_path, monkeypatch):
    "A throw-away ledger folder, set as $MASPOB_RESULTS."
    monkeypatch.setenv("MASPOB_RESULTS", str(tmp_path/"results"))
    return tmp_path/"results"

@pytest.fixture(scope="module")
def one_torch_thread():
    "One torch (and BLAS) thread for a module of tiny models: more threads only spin on a shared 2-core CPU."
    import torch
    from threadpoolctl import threadpool_limits
    n = torch.get_num_threads(); torch.set_num_threads(1)
    with threadpool_limits(1): yield
    torch.set_num_threads(n)
