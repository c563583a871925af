# The two set-up commands of the README: `make bench` and `make test`. Both create .venv on
# first use (seeing system packages, so a torch / torch_npu / triton-ascend already installed
# is used as is), install what is missing, build the extension against that torch, and then
# run. Re-running after a change rebuilds only what changed.

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
PIP := $(VPY) -m pip
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton==3.9.0
BUILD_TOOLS := "scikit-build-core>=0.10" "pybind11>=2.12" cmake ninja numpy matplotlib
# Hypothesis pinned: `make test` draws derandomized examples, and the draws (and the figures the
# docs tests derive from them) change with Hypothesis' version; a pin keeps every machine on the
# same examples. test-explore draws new ones.
TEST_TOOLS := pytest pytest-xdist hypothesis==6.170.17 expecttest
PYTEST_ARGS ?= -n 2

SOURCES := $(shell find csrc python triton_kernels tools -type f -not -name '*.pyc' 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: all install bench test test-plain test-explore test-asan test-peers test-vllm-integration vllm-releases test-vllm-ascend test-ascend test-cann-wheel wheel clean \
	device-check device-carry

all: install

$(VPY):
	$(PYTHON) -m venv --system-site-packages $(VENV)

$(VENV)/.deps: $(VPY) Makefile
	$(VPY) -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH_SPEC)"
	$(VPY) -c "import triton" 2>/dev/null || $(PIP) install "$(TRITON_SPEC)"
	$(PIP) install $(BUILD_TOOLS) $(TEST_TOOLS)
	touch $@

$(VENV)/.specops: $(VENV)/.deps $(SOURCES)
	$(PIP) install --no-build-isolation --no-deps .
	touch $@

install: $(VENV)/.specops

bench: install
	$(VENV)/bin/specops-bench

test: install
	cd tests && ../$(VPY) -m pytest $(PYTEST_ARGS)

# The fast path's plain twins (python/specops/_fastpath.py, docs/testing.md): SPECOPS_FASTPATH=0
# selects them for every user in the package, so the ops run through torch's generic entry and
# the drafting layer through Python slices and comprehensions. A reduced suite runs that way: the
# ops, layers and hardening folders and the pairs' own tests, on the native backend (the one that
# enters ops through FastOp) and the reference (which runs the drafting layer's helpers too; the
# Triton launchers take no helper). The whole suite passes that way as well:
# `SPECOPS_FASTPATH=0 make test`.
PLAIN_TESTS ?= ops layers hardening tooling/test_fast_call.py tooling/test_fastpath.py
PLAIN_BACKENDS ?= native,reference
test-plain: install
	cd tests && SPECOPS_FASTPATH=0 SPECOPS_TEST_BACKENDS=$(PLAIN_BACKENDS) ../$(VPY) -m pytest $(PYTEST_ARGS) $(PLAIN_TESTS)

# `make test` draws the same Hypothesis examples on every run (derandomized: fast, and a failure
# is never luck). test-explore runs the Hypothesis tests (-m hypothesis) with new examples each
# time: drawn from EXPLORE_SEED (default: the clock), EXPLORE_SCALE times as many, no example
# database, so a run is reproduced by its seed alone: `make test-explore EXPLORE_SEED=<seed>`
# (PYTEST_ARGS="-k <test>" narrows it to one test). A failure also prints its example's
# @reproduce_failure line. test_kernel_compile draws kernel specializations, derandomized on
# purpose, and is left out.
ifndef EXPLORE_SEED
EXPLORE_SEED := $(shell date +%s)
endif
EXPLORE_SCALE ?= 5
test-explore: install
	@echo "test-explore: hypothesis seed $(EXPLORE_SEED), $(EXPLORE_SCALE)x the examples"
	cd tests && SPECOPS_EXPLORE=1 SPECOPS_EXAMPLE_SCALE=$(EXPLORE_SCALE) ../$(VPY) -m pytest $(PYTEST_ARGS) \
	  -p no:cacheprovider -m hypothesis --ignore=tooling/test_kernel_compile.py --hypothesis-seed=$(EXPLORE_SEED)

# The C++ ops under AddressSanitizer + UndefinedBehaviorSanitizer: the extension is built with
# -fsanitize=address,undefined into build/asan-site, which the test run puts first on
# PYTHONPATH, with the ASan runtime preloaded into the (uninstrumented) Python; libstdc++ is
# preloaded too, or ASan's __cxa_throw interceptor finds nothing to forward to when an op
# raises. RelWithDebInfo and no install strip (pybind11 strips Release modules) keep the
# symbols, so the reports name functions and source lines. ASAN_TESTS: the folders that call
# the native ops and the fast path's own tests (the rest of tooling builds wheels, compiles
# kernels for GPU targets and reads the docs).
ASAN_SITE := build/asan-site
ASAN_TESTS ?= ops layers hardening oracles tooling/test_fast_call.py tooling/test_fastpath.py tooling/test_fastpath_ops.py
$(ASAN_SITE)/.built: $(VENV)/.deps $(SOURCES)
	SPECOPS_SANITIZE=ON $(PIP) install -q --no-build-isolation --no-deps --upgrade --target $(ASAN_SITE) -C build-dir=build/asan -C cmake.build-type=RelWithDebInfo -C install.strip=false .
	touch $@

test-asan: $(ASAN_SITE)/.built
	cd tests && PYTHONPATH=../$(ASAN_SITE) \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so.6)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  SPECOPS_TEST_BACKENDS=native SPECOPS_REQUIRE_SANITIZED=1 \
	  ../$(VPY) -m pytest -q -p no:xdist -p no:cacheprovider --capture=sys $(ASAN_TESTS)

# The conformance suite (tests/peers, docs/conformance.md): vLLM's released package, imported and
# run beside specops. A release's wheel (about 340 MB) is downloaded once without dependencies into
# build/peers/vllm-<version>/wheels; its Python modules are unpacked into build/peers/vllm-<version>/site
# and the small packages they import go into build/peers/deps (tests/peers/requirements.txt,
# --no-deps), so the test venv stays as it is. PEERS_PIP_ARGS passes pip options (an index, a
# proxy) to both. The suite runs against PEERS_VLLM.
# VLLM_RELEASES: the vLLM releases the plugin's release table supports (docs/integrations.md,
# "Releases"), oldest first; `make vllm-releases` prints them.
VLLM_RELEASES := 0.33.0 0.34.0
PEERS_VLLM ?= 0.33.0
PEERS := $(CURDIR)/build/peers
PEERS_PIP_ARGS ?=

vllm-releases:
	@echo $(VLLM_RELEASES)

$(PEERS)/vllm-%/.wheel: | $(VENV)/.deps
	mkdir -p $(PEERS)/vllm-$*/wheels
	$(PIP) download --no-deps --dest $(PEERS)/vllm-$*/wheels $(PEERS_PIP_ARGS) "vllm==$*"
	touch $@

$(PEERS)/vllm-%/.site: $(PEERS)/vllm-%/.wheel
	rm -rf $(PEERS)/vllm-$*/site
	$(VPY) -c "import glob, zipfile; wheel = zipfile.ZipFile(sorted(glob.glob('$(PEERS)/vllm-$*/wheels/vllm-$*-*.whl'))[-1]); \
	  wheel.extractall('$(PEERS)/vllm-$*/site', [n for n in wheel.namelist() if n.startswith('vllm/') and n.endswith('.py') or '.dist-info/' in n])"
	touch $@

$(PEERS)/.deps: tests/peers/requirements.txt | $(VENV)/.deps
	rm -rf $(PEERS)/deps
	$(PIP) install --no-deps --target $(PEERS)/deps $(PEERS_PIP_ARGS) -r tests/peers/requirements.txt
	touch $@

.PRECIOUS: $(PEERS)/vllm-%/.wheel $(PEERS)/vllm-%/.site

# SGLang's tree-speculation kernels (tests/peers/test_sglang_tree.py): its wheel downloaded without
# dependencies into build/peers/sglang-<version>/wheels, and only the files the test reads unpacked
# into build/peers/sglang-<version>/site (spec_tree.py's Triton kernels, eagle_utils.py's
# organize_draft_results, the CUDA source the bit-packed mode is restated from); the test loads
# them from their files, never importing SGLang.
PEERS_SGLANG ?= 0.5.23
SGLANG_PEER_FILES := sglang/kernels/ops/speculative/spec_tree.py sglang/srt/speculative/eagle_utils.py \
	sglang/kernels/jit/csrc/speculative/tree.cuh sglang/kernels/jit/include/sgl_kernel/speculative/eagle.cuh
$(PEERS)/sglang-%/.site: | $(VENV)/.deps
	mkdir -p $(PEERS)/sglang-$*/wheels
	$(PIP) download --no-deps --dest $(PEERS)/sglang-$*/wheels $(PEERS_PIP_ARGS) "sglang==$*"
	rm -rf $(PEERS)/sglang-$*/site
	$(VPY) -c "import glob, sys, zipfile; wheel = zipfile.ZipFile(sorted(glob.glob('$(PEERS)/sglang-$*/wheels/sglang-$*-*.whl'))[-1]); \
	  wheel.extractall('$(PEERS)/sglang-$*/site', sys.argv[1:])" $(SGLANG_PEER_FILES)
	touch $@

.PRECIOUS: $(PEERS)/sglang-%/.site

test-peers: install $(PEERS)/vllm-$(PEERS_VLLM)/.site $(PEERS)/.deps $(PEERS)/sglang-$(PEERS_SGLANG)/.site
	cd tests && PYTHONPATH=$(PEERS)/vllm-$(PEERS_VLLM)/site:$(PEERS)/deps SPECOPS_SGLANG_SITE=$(PEERS)/sglang-$(PEERS_SGLANG)/site \
	  ../$(VPY) -m pytest -p no:cacheprovider peers

# vLLM's own model runner V2, and (0.33 only) its V1 runner's Eagle path, driven without and with
# the specops plugin (docs/integrations.md, "The proof"): a driver's configurations in two fresh
# processes (without, with), buffers compared on every step, launches and host syncs counted. VLLM_VERSION picks
# the release (default: the newest supported), whose wheel is downloaded as for test-peers; the
# plugin is found through specops' installed entry point. `.ci/run` runs it for every release.
# Each configuration's counts go to VLLM_COUNTS (a row per release and configuration, a run
# replacing its own), where `make bench` draws its runner figure from.
VLLM_VERSION ?= $(lastword $(VLLM_RELEASES))
VLLM_COUNTS ?= $(CURDIR)/bench-results/vllm-proof.csv
test-vllm-integration: install $(PEERS)/vllm-$(VLLM_VERSION)/.site $(PEERS)/.deps
	cd tests/vllm_integration && PYTHONPATH=$(PEERS)/vllm-$(VLLM_VERSION)/site:$(PEERS)/deps TRITON_INTERPRET=1 \
	  SPECOPS_VLLM_RELEASE=$(VLLM_VERSION) SPECOPS_VLLM_COUNTS=$(VLLM_COUNTS) \
	  ../../$(VPY) -m pytest -p no:cacheprovider -p no:xdist -s .

# vllm-ascend's own classes driven without and with the plugin (docs/integrations.md, "Ascend"):
# vllm-ascend 0.26.0rc1's wheel and vLLM 0.26.0's (the release it is written for) downloaded
# without dependencies into build/vllm-ascend/wheels, their Python modules unpacked into
# build/vllm-ascend/site (their .so files need CANN and are never loaded), the small packages
# they import into build/vllm-ascend/deps; the NPU, the CANN metadata ops and triton-ascend's
# language extensions stand in (tests/vllm_ascend/npu_stand_ins.py, ascend_ops.py).
ASCEND_VLLM_SPEC ?= vllm==0.26.0
VLLM_ASCEND_SPEC ?= vllm-ascend==0.26.0rc1
VLLM_ASCEND := $(CURDIR)/build/vllm-ascend

$(VLLM_ASCEND)/.wheels: | $(VENV)/.deps
	mkdir -p $(VLLM_ASCEND)/wheels
	$(PIP) download --no-deps --only-binary=:all: --dest $(VLLM_ASCEND)/wheels $(PEERS_PIP_ARGS) \
	  "$(ASCEND_VLLM_SPEC)" "$(VLLM_ASCEND_SPEC)"
	touch $@

$(VLLM_ASCEND)/.site: $(VLLM_ASCEND)/.wheels
	rm -rf $(VLLM_ASCEND)/site
	$(VPY) -c "import glob, zipfile; \
	  [zipfile.ZipFile(w).extractall('$(VLLM_ASCEND)/site', [n for n in zipfile.ZipFile(w).namelist() \
	   if n.split('/')[0] in ('vllm', 'vllm_ascend') and n.endswith('.py') or '.dist-info/' in n]) \
	   for w in sorted(glob.glob('$(VLLM_ASCEND)/wheels/*.whl'))]"
	touch $@

$(VLLM_ASCEND)/.deps: tests/peers/requirements.txt tests/vllm_ascend/requirements.txt | $(VENV)/.deps
	rm -rf $(VLLM_ASCEND)/deps
	$(PIP) install --no-deps --target $(VLLM_ASCEND)/deps $(PEERS_PIP_ARGS) \
	  -r tests/peers/requirements.txt -r tests/vllm_ascend/requirements.txt
	touch $@

test-vllm-ascend: install $(VLLM_ASCEND)/.site $(VLLM_ASCEND)/.deps
	cd tests/vllm_ascend && PYTHONPATH=$(CURDIR)/tests/vllm_integration:$(CURDIR)/tests/vllm_ascend/stand_ins:$(VLLM_ASCEND)/site:$(VLLM_ASCEND)/deps \
	  TRITON_INTERPRET=1 SPECOPS_VLLM_COUNTS=$(VLLM_COUNTS) \
	  ../../$(VPY) -m pytest -p no:cacheprovider -p no:xdist -s .

# The first minutes on a lent GPU or NPU (docs/device_readiness.md, "The first minutes on a
# device"): tools/device_check.py builds the extension against the torch installed there
# (offline, into $OUT/site or build/device-check/site), then runs every op's device path against
# the native CPU op, compute-sanitizer over multi-program launches, a runner step captured in a
# device graph and the timings, each step in a process of its own within one budget, and writes
# device-check.json and device-check.csv into $OUT (else build/device-check). Without a device
# the device-only steps are skipped with their reason. The Python is the venv's when there is
# one (this machine), else $(PYTHON) (a lent machine, which has torch installed and no venv); one
# without torch (a fresh clone on a machine whose python3 has none) stops the run at once with one
# line saying what to install (`make install` sets up .venv as `make test` does).
# device-carry cuts vLLM's kernels for the timings out of the unpacked wheel of test-peers into
# build/device-carry, which the device run carries.
DEVICE_CHECK_PY ?= $(if $(wildcard $(VPY)),$(VPY),$(PYTHON))
DEVICE_CHECK_ARGS ?=
device-check:
	$(DEVICE_CHECK_PY) tools/device_check.py --torch-spec "$(TORCH_SPEC)" $(DEVICE_CHECK_ARGS)

device-carry: $(PEERS)/vllm-$(PEERS_VLLM)/.site
	$(VPY) tools/device_carry.py --site $(PEERS)/vllm-$(PEERS_VLLM)/site --out build/device-carry

# The NPU route without an NPU (docs/device_readiness.md, tests/ascend): a venv of its own,
# build/ascend-venv, because triton-ascend is the `triton` module itself and cannot share one
# with upstream Triton. It holds torch (CPU), numpy below 2.4 (triton-ascend 3.2's interpreter
# breaks on 2.4), triton-ascend 3.2.0 and ascendnpu-ir 1.2.0 (bishengir-compile); Debian's MLIR 19
# lowers the adapter's linalg to x86, and valgrind checks the adapter's own memory use (apt
# installs both when missing). Three runs: every kernel at every launched specialization
# through triton-ascend's frontend, triton-adapter-opt and bishengir-compile; the lowered kernels
# run on x86 between guard pages against the reference; the triton backend's ops and layers
# tests under triton-ascend's interpreter (tests/interpreter_quirks.py corrects its bugs).
# Compiled artifacts are cached per specialization in build/ascend-cache.
ASCEND_VENV := build/ascend-venv
ASCEND_PY := $(ASCEND_VENV)/bin/python
ASCEND_SPEC ?= triton-ascend==3.2.0
ASCEND_IR_SPEC ?= ascendnpu-ir==1.2.0
ASCEND_APT := mlir-19-tools llvm-19 libmlir-19 valgrind
ASCEND_PIP_ARGS ?=
ASCEND_TEST_ARGS ?=
# The third check's folders: the ops and the layers that launch them. The hardening folder's
# out-of-bounds cases are checked on the lowered kernels themselves (guard pages, the second
# check), and its rejections run before any launch; `make test-ascend ASCEND_INTERPRETER_TESTS=.`
# runs the whole suite.
ASCEND_INTERPRETER_TESTS ?= ops layers

$(ASCEND_VENV)/.deps: Makefile
	@for tool in mlir-opt-19 mlir-translate-19 llc-19 valgrind; do command -v $$tool >/dev/null || missing=1; done; \
	  if [ -n "$$missing" ]; then \
	    sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	    $$sudo apt-get update && $$sudo apt-get install -y --no-install-recommends $(ASCEND_APT); fi
	[ -x $(ASCEND_PY) ] || $(PYTHON) -m venv $(ASCEND_VENV)
	$(ASCEND_PY) -c "import torch" 2>/dev/null || $(ASCEND_PY) -m pip install $(ASCEND_PIP_ARGS) "$(TORCH_SPEC)"
	$(ASCEND_PY) -m pip install $(ASCEND_PIP_ARGS) "numpy<2.4" $(BUILD_TOOLS) $(TEST_TOOLS) "$(ASCEND_SPEC)" "$(ASCEND_IR_SPEC)"
	touch $@

# The same torch (2.13.0, CPU) in both venvs, so the extension `make install` built is installed
# here as a wheel instead of compiled a second time.
ASCEND_WHEEL := build/ascend-wheel
$(ASCEND_VENV)/.specops: $(ASCEND_VENV)/.deps $(VENV)/.specops
	rm -rf $(ASCEND_WHEEL)
	$(PIP) wheel -q --no-build-isolation --no-deps -w $(ASCEND_WHEEL) .
	$(ASCEND_PY) -m pip install -q --no-deps --force-reinstall $(ASCEND_WHEEL)/specops-*.whl
	touch $@

test-ascend: $(ASCEND_VENV)/.specops
	cd tests && ../$(ASCEND_PY) -m pytest -q -p no:xdist -p no:cacheprovider $(ASCEND_TEST_ARGS) ascend
	cd tests && SPECOPS_TEST_BACKENDS=triton ../$(ASCEND_PY) -m pytest -q -n 2 -p no:cacheprovider \
	  -W "ignore:Conversion of an array with ndim:DeprecationWarning" $(ASCEND_INTERPRETER_TESTS) $(ASCEND_TEST_ARGS)

# A wheel for this machine's torch, tagged +cann<version> when ASCEND_HOME_PATH holds a CANN
# toolkit and +cpu otherwise.
WHEEL_DIR ?= dist
wheel: $(VENV)/.deps
	$(PIP) wheel --no-build-isolation --no-deps -w $(WHEEL_DIR) .

# `make wheel` with a fake CANN toolkit (a folder with its version file): the +cann wheel must
# build, install into a throwaway venv and import. It builds and installs a wheel, so it is kept
# out of `make test`; run it when the build or the packaging changes.
test-cann-wheel: $(VENV)/.deps
	cd tests && SPECOPS_TEST_CANN_WHEEL=1 ../$(VPY) -m pytest -q -p no:xdist tooling/test_packaging.py -k cann_wheel

clean:
	rm -rf build dist $(VENV)
