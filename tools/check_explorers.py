#!/usr/bin/env python
"""Check the interactive explorers in a real JupyterLab, driven by a headless Chromium.

For each method notebook (or those named), the cells up to and including the one that calls `explorer(...)` are
copied into a scratch notebook at `scale="smoke"`, opened in JupyterLab and run. The check then moves the first
slider (or dropdown) of the explorer one step and measures how long the figure takes to change. It passes when the
widgets appear, the figure changes, and the change takes under a second.

Needs what `pip install -e '.[notebooks,dev]'` installs, plus `pip install playwright` and a Chromium
(`apt-get install chromium`; set CHROMIUM=/path otherwise). Not part of CI: it starts a Jupyter server.

    python tools/check_explorers.py                 # every method notebook with an explorer
    python tools/check_explorers.py social_choice   # some of them
"""
import json, os, re, shutil, socket, subprocess, sys, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

def scratch_notebook(src:Path, dest:Path)->bool:
    "Cells of `src` up to its explorer call, with scale='smoke' injected after the parameters cell; False if none."
    nb = json.loads(src.read_text())
    cells, found = [], False
    for c in nb["cells"]:
        if c["cell_type"] != "code": continue
        text = "".join(c["source"])
        c = dict(c, outputs=[], execution_count=None)
        cells.append(c)
        if "parameters" in c.get("metadata", {}).get("tags", []):
            cells.append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": ['scale = "smoke"']})
        if re.search(r"^\s*(\w+\s*=\s*)?explorer\(", text, re.M): found = True; break
    if not found: return False
    nb["cells"] = cells
    dest.write_text(json.dumps(nb))
    return True

def free_port()->int:
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def check(page, name:str, timeout_s:int=600)->dict:
    "Run the scratch notebook in the open Lab page; move the first knob; time the redraw."
    ws = "w" + "".join(ch for ch in name if ch.isalnum())      # a fresh workspace per notebook: no tab restored from the last one
    page.goto(f"{page.base}/lab/workspaces/{ws}/tree/{name}?reset")
    page.wait_for_function("(n) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget; "
                           "return w && w.context && w.context.path === n && document.querySelector('.jp-Notebook'); }",
                           arg=name, timeout=120_000)
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.sessionContext.ready; "
                  "window.jupyterapp.commands.execute('notebook:run-all-cells'); return true; }")
    t0 = time.time()
    page.locator(".jp-Notebook .widget-interact").first.wait_for(timeout=timeout_s*1000)
    sliders = page.locator(".jp-Notebook .widget-interact .noUi-handle")   # a slider when there is one: a dropdown may offer one choice
    knob = sliders.first if sliders.count() else page.locator(".jp-Notebook .widget-interact select").first
    img = page.locator(".jp-Notebook .widget-interact img").last
    img.wait_for(timeout=120_000)
    run_s, before = time.time() - t0, img.get_attribute("src")
    t1 = time.time()
    if knob.evaluate("e => e.tagName") == "SELECT":
        opts = knob.locator("option").all_inner_texts()
        if len(opts) < 2: raise RuntimeError(f"the only knob is a dropdown with one choice ({opts}): nothing to redraw")
        knob.scroll_into_view_if_needed(); knob.select_option(label=opts[1])
    else:
        now, top = (knob.get_attribute(a) for a in ("aria-valuenow", "aria-valuemax"))   # a slider at its top moves down
        at_top = now is not None and top is not None and float(now) >= float(top)
        knob.focus(); page.keyboard.press("ArrowLeft" if at_top else "ArrowRight")
    page.wait_for_function("([sel, old]) => { const i = [...document.querySelectorAll(sel)].pop(); return i && i.src !== old; }",
                           arg=[".jp-Notebook .widget-interact img", before], timeout=30_000)
    return dict(run_to_widgets_s=round(run_s, 1), redraw_s=round(time.time() - t1, 2))

def main(wanted):
    from playwright.sync_api import sync_playwright
    from maspob_etal.claims import METHODS, notebook_name
    slugs = [s for s in METHODS if (ROOT/"nbs"/notebook_name(s)).exists() and (not wanted or s in wanted)]
    work = Path(tempfile.mkdtemp())
    shutil.copy(ROOT/"nbs"/"_quarto.yml", work/"_quarto.yml") if (ROOT/"nbs"/"_quarto.yml").exists() else None
    todo = [s for s in slugs if scratch_notebook(ROOT/"nbs"/notebook_name(s), work/notebook_name(s))]
    missing = sorted(set(slugs) - set(todo))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("MASPOB_BATCH", "IN_TEST")}
    env["MASPOB_PROGRESS"] = "0"
    lab = subprocess.Popen([sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.token=",
                            "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", f"--ServerApp.root_dir={work}",
                            "--LabApp.expose_app_in_browser=True", "--allow-root"], cwd=work, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results, ok = {}, True
    try:
        for _ in range(120):
            try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
            except OSError: time.sleep(1)
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            for s in todo:
                page = b.new_page(viewport={"width": 1400, "height": 1000}); page.base = f"http://127.0.0.1:{port}"
                try: results[s] = check(page, notebook_name(s))
                except Exception as e: results[s] = dict(error=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
                finally:
                    page.screenshot(path=str(work/f"{s}.png")); page.close()
            b.close()
    finally:
        lab.terminate(); lab.wait(30)
    for s, r in results.items():
        good = "error" not in r and r["redraw_s"] < 1.0
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {s:22s} {r}")
    for s in missing: print(f"FAIL {s:22s} no explorer(...) call in the notebook"); ok = False
    print(f"screenshots in {work}")
    return 0 if ok else 1

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
