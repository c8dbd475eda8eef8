"The inline tests of the shared notebooks (core, offline, claims, cli), run as nbdev runs them."
import subprocess, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NBDEV_TEST = Path(sys.executable).parent/"nbdev-test"

@pytest.mark.parametrize("name", ["00_core.ipynb", "00a_offline.ipynb", "00c_claims.ipynb", "00d_cli.ipynb"])
def test_inline_tests_of_a_shared_notebook_pass(name):
    r = subprocess.run([str(NBDEV_TEST), str(ROOT/"nbs"/name)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
