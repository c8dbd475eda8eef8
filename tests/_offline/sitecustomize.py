# Put on PYTHONPATH by tests/conftest.py: blocks non-loopback network access in every Python process the tests
# start (notebook kernels included) while MASPOB_BLOCK_NETWORK=1.
import os
if os.environ.get("MASPOB_BLOCK_NETWORK") == "1":
    try:
        from maspob_etal.offline import enable_network_block
        enable_network_block()
    except ImportError:
        pass
