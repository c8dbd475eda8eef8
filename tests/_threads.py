"Run a small experiment in a fresh Python with a given CPU thread count, to check that thread count changes no number."
import json, os, subprocess, sys, textwrap

def _start(code:str, n:int)->subprocess.Popen:
    "Start `code` in a child process with `n` torch intra-op (and BLAS/OpenMP) threads."
    prog = (f"import torch; torch.set_num_threads({n})\n" + textwrap.dedent(code)
            + "\nimport json as _j; print('@@RESULT@@' + _j.dumps(result))")
    env = {**os.environ, "OMP_NUM_THREADS": str(n), "MKL_NUM_THREADS": str(n), "OPENBLAS_NUM_THREADS": str(n)}
    return subprocess.Popen([sys.executable, "-c", prog], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

def _result(p:subprocess.Popen, timeout:int):
    "Wait for a child started by `_start` and return its `result`."
    try: out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill(); p.communicate(); raise
    assert p.returncode == 0, err[-3000:]
    line = [l for l in out.splitlines() if l.startswith("@@RESULT@@")][-1]
    return json.loads(line[len("@@RESULT@@"):])

def run_with_threads(code:str, # Python source that ends by assigning a JSON-serialisable `result`
                     n:int,    # torch intra-op threads (and BLAS/OpenMP threads) of the child process
                     timeout:int=240):
    "Execute `code` in a child process with `n` threads and return its `result`."
    return _result(_start(code, n), timeout)

def assert_thread_independent(code:str, threads=(1, 2), timeout:int=240):
    """The experiment in `code` gives bit-identical `result`s under each thread count. The children run at the same
    time (a thread count, not the machine's load, is what could change a number)."""
    procs = [_start(code, n) for n in threads]
    res = [_result(p, timeout) for p in procs]
    for n, r in zip(threads[1:], res[1:]):
        assert r == res[0], f"{threads[0]} thread(s) gave {res[0]}, {n} gave {r}"
    return res[0]
