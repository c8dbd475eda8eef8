"Run a small experiment in a fresh Python with a given CPU thread count, to check that thread count changes no number."
import json, os, subprocess, sys, textwrap

def run_with_threads(code:str, # Python source that ends by assigning a JSON-serialisable `result`
                     n:int,    # torch intra-op threads (and BLAS/OpenMP threads) of the child process
                     timeout:int=240):
    "Execute `code` in a child process with `n` threads and return its `result`."
    prog = (f"import torch; torch.set_num_threads({n})\n" + textwrap.dedent(code)
            + "\nimport json as _j; print('@@RESULT@@' + _j.dumps(result))")
    env = {**os.environ, "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n), "OPENBLAS_NUM_THREADS": str(n)}
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    line = [l for l in r.stdout.splitlines() if l.startswith("@@RESULT@@")][-1]
    return json.loads(line[len("@@RESULT@@"):])

def assert_thread_independent(code:str, threads=(1, 2), timeout:int=240):
    "The experiment in `code` gives bit-identical `result`s under each thread count."
    res = [run_with_threads(code, n, timeout) for n in threads]
    for n, r in zip(threads[1:], res[1:]):
        assert r == res[0], f"{threads[0]} thread(s) gave {res[0]}, {n} gave {r}"
    return res[0]
