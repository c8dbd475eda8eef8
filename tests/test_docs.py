"""Builds the docs site offline and checks it: page names, every internal link and anchor, the search index, images,
the README, and (in headless Chromium) typeset equations."""
import json, os, re, shutil, subprocess, sys, tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
pytestmark = pytest.mark.timeout(900)

@pytest.fixture(scope="session")   # once per worker: another file's tests in between must not rebuild it
def site():
    if shutil.which("quarto") is None:
        subprocess.run([sys.executable, str(ROOT/"tools"/"build_docs.py")], cwd=ROOT, check=True, capture_output=True)
    else:
        subprocess.run(["make", "docs"], cwd=ROOT, check=True, capture_output=True)
    return ROOT/"_docs"

def dom(page:Path)->str:
    "The page's DOM after its scripts ran (MathJax typesets in the browser)."
    with tempfile.TemporaryDirectory() as prof:
        r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={prof}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                           capture_output=True, text=True, timeout=120)
    return r.stdout

class _Page(HTMLParser):
    "Ids and links of one HTML page."
    def __init__(self):
        super().__init__(); self.ids, self.links, self.imgs = set(), [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("id", "name"):
            if a.get(k): self.ids.add(a[k])
        for k in ("href", "src"):
            if a.get(k) is not None: self.links.append((tag, k, a[k]))
        if tag == "img": self.imgs.append(a.get("src") or "")

def _parse(p:Path, cache:dict)->_Page:
    if p not in cache:
        pr = _Page(); pr.feed(p.read_text(encoding="utf-8")); cache[p] = pr
    return cache[p]

def broken_links(site:Path)->list[str]:
    "Every internal href/src of every page that names a missing file, or an anchor missing from its page."
    cache, bad = {}, []
    for p in sorted(site.glob("*.html")):
        for tag, attr, url in _parse(p, cache).links:
            u = urlsplit(url)
            if u.scheme or url.startswith("//") or url == "": continue
            target = p if not u.path else (p.parent/unquote(u.path)).resolve()
            if target.is_dir(): target = target/"index.html"
            if not target.exists(): bad.append(f"{p.name}: <{tag} {attr}={url!r}>: no such file"); continue
            if u.fragment and target.suffix == ".html" and unquote(u.fragment) not in _parse(target, cache).ids:
                bad.append(f"{p.name}: <{tag} {attr}={url!r}>: no id {u.fragment!r} in {target.name}")
    return bad

def method_pages(site:Path)->list[Path]:
    from maspob_etal.claims import METHODS
    return [site/f"{slug}.html" for slug in METHODS if (site/f"{slug}.html").exists()]

def test_pages_have_quartos_names_and_markdown_twins(site):
    from maspob_etal.claims import METHODS, notebook_name
    for slug in METHODS:
        if (ROOT/"nbs"/notebook_name(slug)).exists():
            assert (site/f"{slug}.html").exists() and (site/f"{slug}.html.md").exists(), slug   # as module docstrings link
            assert not (site/f"{Path(notebook_name(slug)).stem}.html").exists()
    assert (site/"index.html").exists() and (site/"results.html").exists() and (site/"core.html").exists()
    assert (site/"site_libs"/"mathjax"/"MathJax.js").exists()
    assert "cdn.jsdelivr.net" not in "".join(p.read_text() for p in site.glob("*.html"))   # nothing from a CDN
    html = (site/"index.html").read_text()
    assert 'href="results.html"' in html
    for n in ["01", "05", "19"]: assert f">{n}<" in html or f"| {n} |" in html   # the home page lists the methods

def test_every_internal_link_and_anchor_resolves(site):
    bad = broken_links(site)
    assert not bad, f"{len(bad)} broken links:\n" + "\n".join(bad[:40])

def test_the_link_check_can_fail(tmp_path):
    (tmp_path/"a.html").write_text('<a href="b.html#x">b</a><a href="c.html">c</a><img src="p.png"><h2 id="y">y</h2><a href="#y">ok</a>')
    (tmp_path/"b.html").write_text('<h2 id="z">z</h2>')
    bad = broken_links(tmp_path)
    assert len(bad) == 3 and "no id 'x'" in bad[0] and "c.html" in bad[1] and "p.png" in bad[2]

def test_search_index_is_valid_and_points_at_real_pages(site):
    idx = json.loads((site/"search.json").read_text())
    assert len(idx) > 50 and all({"title", "href", "text"} <= set(e) for e in idx)
    js = (site/"search-index.js").read_text()
    assert json.loads(js[js.index("=") + 1:].strip().rstrip(";")) == idx          # the copy that works from disk
    assert "window.SMALLDOCS_SEARCH" in (site/"site_libs"/"smalldocs.js").read_text()
    cache, bad = {}, []
    for e in idx:
        u = urlsplit(e["href"]); target = (site/unquote(u.path)).resolve()
        if not target.exists(): bad.append(e["href"])
        elif u.fragment and unquote(u.fragment) not in _parse(target, cache).ids: bad.append(e["href"])
    assert not bad, bad[:20]
    assert any("catq.html" in e["href"] for e in idx) or not (site/"catq.html").exists()

def test_method_pages_show_their_plots(site):
    for p in method_pages(site):
        imgs = _parse(p, {}).imgs
        assert imgs, f"{p.name} shows no figure"
        for src in imgs:
            assert src.startswith("data:image/") or (p.parent/unquote(urlsplit(src).path)).exists(), (p.name, src[:80])

def test_readme_is_generated_from_the_index(site):
    readme = (ROOT/"README.md").read_text()
    assert readme.startswith("# maspob_etal") and "make test" in readme and "make reproduce" in readme
    assert "#| echo: false" not in readme and "design card" not in readme
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert links and all(l.startswith(("https://", "#", "mailto:")) for l in links), [l for l in links if not l.startswith("https://")]

@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_pages_render_in_chromium(site):
    home = dom(site/"index.html")
    assert "maspob_etal" in home and "sidebar" in home and "Results" in home
    pages = method_pages(site)
    page = dom(pages[0] if pages else site/"claims.html")
    assert "sidebar" in page
    assert 'class="MathJax"' in page or 'class="MathJax_Display"' in page, "no equation was typeset"
    assert 'class="merror"' not in page and 'class="MathJax_Error"' not in page
    assert 'class="page-navigation"' in page                              # previous / next links

_OVERFLOW_JS = r"""<script>
window.addEventListener('load', function () { setTimeout(function () {
  var out = {code: [], math: [], fit: 0};
  document.querySelectorAll('main pre').forEach(function (e) {
    if (e.offsetParent !== null && e.scrollWidth > e.clientWidth + 2) out.code.push(e.textContent.slice(0, 80)); });
  document.querySelectorAll('mjx-container[display="true"], .MathJax_Display').forEach(function (e) {
    var m = document.querySelector('main').getBoundingClientRect(), r = e.getBoundingClientRect();
    if (e.scrollWidth > e.clientWidth + 2 || r.right > m.right + 2) out.math.push(e.textContent.slice(0, 80)); });
  var pre = document.querySelector('main div.sourceCode pre');
  if (pre) { var s = document.createElement('span'); s.textContent = 'x'.repeat(100); pre.appendChild(s);
             out.fit = pre.clientWidth - s.getBoundingClientRect().width; s.remove(); }
  var d = document.createElement('div'); d.id = 'overflow-report'; d.textContent = JSON.stringify(out);
  document.body.appendChild(d); }, 3000); });
</script>"""

def overflows(page:Path, width:int=1280)->dict:
    "Code blocks and display equations wider than their column when `page` is shown `width` px wide in Chromium."
    import html
    probe = page.with_name(f"_overflow_{page.name}")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _OVERFLOW_JS + "</body>"), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory() as prof:
            r = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
                                "--disable-background-networking", f"--user-data-dir={prof}", f"--window-size={width},1000",
                                "--virtual-time-budget=15000", "--dump-dom", probe.as_uri()], capture_output=True, text=True, timeout=180)
    finally: probe.unlink()
    m = re.search(r'<div id="overflow-report">(.*?)</div>', r.stdout, re.S)
    assert m, f"{page.name}: the overflow probe did not report"
    return json.loads(html.unescape(m.group(1)))

@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_no_code_block_or_equation_overflows_at_1280px(site):
    bad = {}
    for p in [site/"index.html", *method_pages(site)]:
        o = overflows(p)
        if o["code"] or o["math"]: bad[p.name] = o
        if p.name != "index.html": assert o["fit"] >= 0, f"{p.name}: a 100-character code line does not fit ({o['fit']:.0f} px)"
    assert not bad, bad

@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium)")
def test_the_overflow_probe_can_fail(tmp_path):
    page = tmp_path/"wide.html"
    page.write_text('<html><body><main><pre style="width:300px;overflow-x:auto;white-space:pre">' + "x"*400
                    + '</pre></main></body></html>')
    assert overflows(page)["code"]
