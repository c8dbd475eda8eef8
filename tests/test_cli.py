"The maspob-etal command, end to end in subprocesses, on a throw-away project."
import json, os, subprocess, sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]

EXE = Path(sys.executable).parent/"maspob-etal"   # the console script installed beside this Python

def cli(*args, cwd=ROOT, env=None):
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=300)

@pytest.fixture
def toy_project(tmp_path):
    (tmp_path/"nbs").mkdir(); (tmp_path/"pyproject.toml").write_text("")
    def make(name, body):
        nb = new_notebook(cells=[new_code_cell('scale = "smoke"\ndevice = "auto"\nseed = 0\nmodel_path = None\nlr = 0.5',
                                               metadata={"tags": ["parameters"]}),
                                 new_code_cell(body)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp_path/"nbs"/name)
    make("02_social_choice.ipynb",
         'from maspob_etal.claims import record, Claim\n'
         'record("social_choice", [Claim("C1", "toy", "x", ours=1.0 + seed, baseline=0.0)], scale=scale, device=device, wall_time_s=0.5,'
         ' params=dict(scale=scale, device=device, seed=seed, model_path=model_path, lr=lr))')
    make("17_thickets.ipynb", 'raise RuntimeError("this notebook fails on purpose")')
    return tmp_path

def test_main_module_is_the_console_script():
    import tomllib
    assert tomllib.loads((ROOT/"pyproject.toml").read_text())["project"]["scripts"]["maspob-etal"] == "maspob_etal.cli:main"
    assert cli("--help").returncode == 0

def test_unknown_slug_and_scale_fail_with_one_clear_line():
    r = cli("run", "nosuch")
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0
    assert "unknown method 'nosuch'" in r.stderr and "maspob" in r.stderr
    r = cli("run", "maspob", "--scale", "huge")
    assert r.returncode != 0 and r.stderr.strip().count("\n") == 0 and "scale must be one of ('smoke', 'full', 'gpu')" in r.stderr
    r = cli("run")
    assert r.returncode != 0 and "--all" in r.stderr

def test_run_list_report_on_a_toy_project(toy_project):
    out = toy_project/"out"
    r = cli("run", "social_choice", "--scale", "full", "--device", "cpu", "--out", str(out), cwd=toy_project)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out/"social_choice.full.json").read_text())
    assert doc["device"] == "cpu" and doc["scale"] == "full"            # both parameters were injected
    assert (out/"02_social_choice.full.ipynb").exists() and "1 notebook(s), 0 failed" in r.stdout
    r = cli("run", "--all", "--out", str(out), cwd=toy_project)
    assert r.returncode == 1 and "FAILED" in r.stdout and "2 notebook(s), 1 failed" in r.stdout
    r = cli("list", "--results", str(out), cwd=toy_project)
    assert r.returncode == 0 and "02_social_choice.ipynb" in r.stdout and "1/1 held" in r.stdout and "missing" in r.stdout
    r = cli("report", "--results", str(out), cwd=toy_project)
    assert r.returncode == 0 and "**held (no sesoi)** 1 vs 0 (no CI)" in (out/"REPORT.md").read_text()

def test_params_are_injected_checked_and_named(toy_project):
    out = toy_project/"out"
    r = cli("run", "social_choice", "--out", str(out), "-p", "lr=0.25", "--seed", "2", "-p", "model_path=/m/x", cwd=toy_project)
    assert r.returncode == 0, r.stdout + r.stderr
    (f,) = out.glob("social_choice.smoke.*.json")                       # a non-default run: its own file
    doc = json.loads(f.read_text())
    assert doc["params"]["lr"] == 0.25 and doc["params"]["seed"] == 2 and doc["params"]["model_path"] == "/m/x"
    assert doc["claims"][0]["ours"] == 3.0 and not (out/"social_choice.smoke.json").exists()
    assert f.name.startswith("social_choice.smoke.lr0-25+model_path-") and f.name.endswith("+seed2.json")

@pytest.mark.parametrize("args,msg", [
    (["-p", "lrr=0.1"], "no parameter 'lrr'; valid: scale, device, seed, model_path, lr"),
    (["-p", "seed=three"], "parameter 'seed' must be of type int"),
    (["-p", "lr=fast"], "parameter 'lr' must be of type float"),
    (["-p", "noequals"], "-p expects name=value"),
    (["-p", "scale=full"], "--scale"),
    (["--seed", "-1"], "non-negative"),
])
def test_bad_params_fail_with_one_clear_line(toy_project, args, msg):
    r = cli("run", "social_choice", "--out", str(toy_project/"out"), *args, cwd=toy_project)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and msg in r.stderr, r.stderr
    assert not (toy_project/"out").exists()                              # nothing ran

def test_report_on_a_missing_results_folder_is_an_error(tmp_path):
    r = cli("report", "--results", str(tmp_path/"missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr and not (tmp_path/"missing").exists()

def test_run_with_no_notebooks_is_a_no_op(tmp_path):
    (tmp_path/"nbs").mkdir(); (tmp_path/"pyproject.toml").write_text("")
    r = cli("run", "--all", "--out", str(tmp_path/"r"), cwd=tmp_path)
    assert r.returncode == 0 and "no method notebooks" in r.stdout

@pytest.fixture
def two_ok(tmp_path_factory):
    "A throw-away project with two method notebooks that record one claim each and report their thread cap."
    tmp_path = tmp_path_factory.mktemp("two_ok")
    (tmp_path/"nbs").mkdir(); (tmp_path/"pyproject.toml").write_text("")
    for name, slug in (("01_maspob.ipynb", "maspob"), ("02_social_choice.ipynb", "social_choice")):
        nb = new_notebook(cells=[new_code_cell('scale = "smoke"\ndevice = "auto"\nseed = 0\ndry_run = False',
                                               metadata={"tags": ["parameters"]}),
                                 new_code_cell('import os\nfrom maspob_etal.claims import record, Claim\n'
                                               f'record("{slug}", [Claim("C1", "toy", "x", ours=1.0 + seed, baseline=0.0, sesoi=0.5, '
                                               'sesoi_source="toy", holds=None)], scale=scale, device=device, wall_time_s=0.5, '
                                               'params=dict(scale=scale, device=device, seed=seed, dry_run=dry_run), '
                                               'metrics={"threads": os.environ.get("OMP_NUM_THREADS", "unset"), "dry_run": dry_run})')])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, tmp_path/"nbs"/name)
    return tmp_path

def test_jobs_run_side_by_side_with_a_share_of_the_cores(two_ok, toy_project):
    out = two_ok/"out"
    r = cli("run", "--all", "--jobs", "2", "--out", str(out), cwd=two_ok)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 at a time" in r.stdout and r.stdout.count("started ") == 2 and "peak MB" in r.stdout
    cores = len(os.sched_getaffinity(0))
    for slug in ("maspob", "social_choice"):
        doc = json.loads((out/f"{slug}.smoke.json").read_text())
        assert doc["metrics"]["threads"] == str(max(1, cores//2))          # each kernel got its share of the cores
    assert "toy" in (out/"REPORT.md").read_text()                          # gathered at the end
    # a failing notebook does not stop the others, and the exit status and summary name it
    r = cli("run", "--all", "--jobs", "2", "--out", str(toy_project/"o2"), cwd=toy_project)
    assert r.returncode == 1 and "17_thickets.ipynb" in r.stdout and "FAILED" in r.stdout
    assert (toy_project/"o2"/"social_choice.smoke.json").exists()

def test_submitit_local_executor_runs_two_notebooks_and_reports_them(two_ok):
    "The cluster code path, with submitit's local executor standing in for SLURM."
    pytest.importorskip("submitit")
    out = two_ok/"out"
    r = cli("run", "maspob", "social_choice", "--executor", "submitit-local", "--cpus", "1", "--out", str(out), cwd=two_ok)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "submitted 2 job(s)" in r.stdout and (out/"cluster_logs").is_dir() and any((out/"cluster_logs").iterdir())
    for slug in ("maspob", "social_choice"):
        doc = json.loads((out/f"{slug}.smoke.json").read_text())
        assert doc["claims"][0]["verdict"] == "held" and doc["metrics"]["threads"] == "1"
    txt = (out/"REPORT.md").read_text()
    assert "### 01 · MASPOB" in txt and "### 02 · RLHF" in txt and txt.count("**held** 1 vs 0") == 2

def test_dry_run_is_injected_and_named_apart(two_ok):
    out = two_ok/"out"
    r = cli("run", "maspob", "--scale", "gpu", "--dry-run", "--device", "cpu", "--out", str(out), cwd=two_ok)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out/"maspob.gpu.dry_runTrue.json").read_text())   # never mistaken for a real gpu run
    assert doc["metrics"]["dry_run"] is True and not (out/"maspob.gpu.json").exists()
    r = cli("run", "social_choice", "--scale", "gpu", "--dry-run", "--device", "cpu", "--out", str(out), cwd=two_ok)
    tab = json.loads((out/"gpu_dry_run.json").read_text())              # each dry run's time and memory, merged
    assert [x["notebook"] for x in tab["runs"]] == ["01_maspob.ipynb", "02_social_choice.ipynb"]
    assert all(x["ok"] and x["seconds"] > 0 and x["peak_mb"] > 0 and x["device"] == "cpu" for x in tab["runs"])

def test_cluster_options_from_a_file_and_flags(tmp_path):
    from maspob_etal.cli import cluster_options
    cfg = tmp_path/"cluster.toml"; cfg.write_text('[cluster]\npartition = "gpu"\naccount = "lab"\ngpus = 1\ntime_min = 90\n')
    assert cluster_options(cfg, time_min=30, mem_gb=None) == dict(slurm_partition="gpu", slurm_account="lab", gpus_per_node=1,
                                                                 timeout_min=30)
    with pytest.raises(ValueError, match="unknown cluster setting"): cluster_options(None, gpu=1)
    with pytest.raises(FileNotFoundError, match="does not exist"): cluster_options(tmp_path/"none.toml")
    r = cli("run", "social_choice", "--jobs", "0", "--out", str(tmp_path/"o"), cwd=tmp_path)
    assert r.returncode == 2

def test_report_outside_a_checkout_says_where_results_are(tmp_path):
    r = cli("report", cwd=tmp_path, env={"MASPOB_RESULTS": ""})
    assert r.returncode == 2 and "inside a checkout" in r.stderr and not (tmp_path/"results").exists()

def test_a_users_run_leaves_the_checkout_clean(two_ok):
    "Without --out a run writes to the untracked _runs/ (with its report); results/ is written only with --save."
    git = lambda *a: subprocess.run(["git", *a], cwd=two_ok, capture_output=True, text=True, check=True).stdout
    (two_ok/".gitignore").write_text("_runs/\n")
    git("init", "-q"); git("add", "-A"); git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "toy")
    r = cli("run", "--all", cwd=two_ok, env={"MASPOB_RESULTS": ""})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (two_ok/"_runs"/"maspob.smoke.json").exists() and (two_ok/"_runs"/"REPORT.md").exists()
    assert not (two_ok/"results").exists() and git("status", "--porcelain") == ""
    r = cli("run", "maspob", "--save", cwd=two_ok, env={"MASPOB_RESULTS": ""})
    assert r.returncode == 0 and (two_ok/"results"/"maspob.smoke.json").exists()   # a maintainer's run: tracked
    assert "results/" in git("status", "--porcelain")

def test_make_reproduce_writes_to_runs_unless_saved():
    "`make reproduce` runs without --out and --save (so into _runs/); SAVE=1 adds --save (into results/)."
    mk = lambda *a: subprocess.run(["make", "-n", "reproduce", *a], cwd=ROOT,
                                   capture_output=True, text=True).stdout
    plain, saved = mk(), mk("SAVE=1")
    assert "maspob-etal run --all" in plain and "--save" not in plain and "--out" not in plain and "results" not in plain
    assert "--save" in saved
