# torch-neuron-sim: the two entry points are `make demo` and `make test`.
# Both install what they need (Debian packages when missing, a pinned .venv) and
# are idempotent.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PATH := /usr/lib/ccache:$(PATH)
export MAX_JOBS := 2
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

SOURCES := $(wildcard csrc/*.cpp csrc/*.h csrc/kernels/*.cpp csrc/kernels/*.h runtime/*.cpp runtime/*.h) setup.py
EXTENSION := python/torch_neuron_sim/_C.so.stamp

.PHONY: demo test test-runtime test-python bench conformance deps venv build clean

demo: build
	$(PY) scripts/demo.py

test: test-runtime test-python

bench: build
	$(PY) bench/bench.py --output BENCHMARKS.md

# Full conformance sweeps (not in CI): every OpInfo against CPU -> COVERAGE.md, every
# causal-LM architecture of transformers -> COMPAT.md. Filter with ONLY=name.
conformance: build
	$(PY) -m conformance.opinfo_sweep --output COVERAGE.md $(if $(ONLY),--only $(ONLY))
	$(PY) -m conformance.arch_sweep --output COMPAT.md $(if $(ONLY),--only $(ONLY))

# Debian packages: compilers, cmake, ninja, GoogleTest, ccache.
deps: .deps.stamp
.deps.stamp:
	@missing=""; for p in g++ cmake ninja-build libgtest-dev ccache; do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi
	@touch $@

venv: $(VENV)/.requirements.stamp
$(VENV)/.requirements.stamp: requirements.txt | .deps.stamp
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.txt
	@touch $@

build: $(EXTENSION)
$(EXTENSION): $(SOURCES) $(VENV)/.requirements.stamp
	@# The first build is the editable install (it also registers the torch.backends
	@# entry point); later builds recompile in place, incrementally.
	if ls $(VENV)/lib/python3*/site-packages/torch_neuron_sim-*.dist-info >/dev/null 2>&1; then \
	  $(PY) setup.py -q build_ext --inplace; \
	else \
	  $(PIP) install -q --disable-pip-version-check --no-build-isolation --no-deps -e .; fi
	@touch $@

test-runtime: .deps.stamp
	cmake -S . -B build-runtime -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build build-runtime -j 2
	cd build-runtime && ctest --output-on-failure -j 2

test-python: build
	$(PY) -m pytest -q tests

clean:
	rm -rf build build-runtime python/torch_neuron_sim/_C*.so $(EXTENSION) *.egg-info python/*.egg-info
