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
TEST_TOOLS := pytest pytest-xdist hypothesis expecttest
PYTEST_ARGS ?= -n 2

SOURCES := $(shell find csrc python triton_kernels tools -type f -not -name '*.pyc' 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: all install bench test test-asan test-cann-wheel wheel clean

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

# The C++ ops under AddressSanitizer + UndefinedBehaviorSanitizer: the extension is built with
# -fsanitize=address,undefined into build/asan-site, which the test run puts first on
# PYTHONPATH, with the ASan runtime preloaded into the (uninstrumented) Python; libstdc++ is
# preloaded too, or ASan's __cxa_throw interceptor finds nothing to forward to when an op
# raises. RelWithDebInfo and no install strip (pybind11 strips Release modules) keep the
# symbols, so the reports name functions and source lines. test_packaging (wheel builds) and
# test_kernel_compile (Triton compiles for GPU targets) exercise no native op and are left out.
ASAN_SITE := build/asan-site
$(ASAN_SITE)/.built: $(VENV)/.deps $(SOURCES)
	SPECOPS_SANITIZE=ON $(PIP) install -q --no-build-isolation --no-deps --upgrade --target $(ASAN_SITE) -C build-dir=build/asan -C cmake.build-type=RelWithDebInfo -C install.strip=false .
	touch $@

test-asan: $(ASAN_SITE)/.built
	cd tests && PYTHONPATH=../$(ASAN_SITE) \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libstdc++.so.6)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  SPECOPS_TEST_BACKENDS=native SPECOPS_REQUIRE_SANITIZED=1 \
	  ../$(VPY) -m pytest -q -p no:xdist -p no:cacheprovider --capture=sys --ignore=test_packaging.py \
	  --ignore=test_kernel_compile.py

# A wheel for this machine's torch, tagged +cann<version> when ASCEND_HOME_PATH holds a CANN
# toolkit and +cpu otherwise.
WHEEL_DIR ?= dist
wheel: $(VENV)/.deps
	$(PIP) wheel --no-build-isolation --no-deps -w $(WHEEL_DIR) .

# `make wheel` with a fake CANN toolkit (a folder with its version file): the +cann wheel must
# build, install into a throwaway venv and import. It builds and installs a wheel, so it is kept
# out of `make test`; run it when the build or the packaging changes.
test-cann-wheel: $(VENV)/.deps
	cd tests && SPECOPS_TEST_CANN_WHEEL=1 ../$(VPY) -m pytest -q -p no:xdist test_packaging.py -k cann_wheel

clean:
	rm -rf build dist $(VENV)
