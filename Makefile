# robocache: the two commands are `make demo` and `make test`.
# Each creates .venv, installs torch and the other dependencies, and builds the
# extension by itself. Override TORCH to pick another torch build, e.g.
#   make test TORCH=torch==2.14.1          (a CUDA build: CUDA kernels too)

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
MAX_JOBS ?= 2
PY := $(VENV)/bin/python
# ninja must be on PATH for torch's extension builder.
export PATH := $(abspath $(VENV))/bin:$(PATH)

# The CUDA compile check (CI): a CUDA build of torch, nvcc, FORCE_CUDA=1, no GPU needed.
CUDA_VENV ?= .venv-cuda
CUDA_TORCH ?= torch==2.14.1
CUDA_HOME ?= /usr/local/cuda
# As setup.py's default: A100, H100/H200, B200, and PTX for newer GPUs.
CUDA_ARCHS ?= 8.0;9.0;10.0+PTX

SOURCES := setup.py pyproject.toml $(shell find csrc -type f 2>/dev/null)

# A build shows its progress: pip's whole output goes to the log named, and
# each compile step ninja finishes is printed as it finishes, as
# "compiled [done/total] csrc/<file>"; on failure the log's end is shown.
# bash's read takes each line as it arrives (mawk, Debian's awk, reads a pipe
# in blocks, which held the lines back until several had finished).
SHELL := bash
.SHELLFLAGS := -o pipefail -c
NINJA_STEP := ^ *(\[[0-9]+/[0-9]+\])( .* -c [^ ]*/(csrc/[^ ]+) -o )?
progress = 2>&1 | tee $(1) | { step='$(NINJA_STEP)'; while IFS= read -r line; do \
	  if [[ $$line =~ $$step ]]; then echo "  compiled $${BASH_REMATCH[1]}$${BASH_REMATCH[3]:+ $${BASH_REMATCH[3]}}"; fi; \
	done; } || { tail -40 $(1); echo "the build failed; its log: $(1)"; exit 1; }

.PHONY: demo test build bench lint format cuda-build-check cuda-wheel wheel wheel-test test-pinned clean FORCE

demo: $(VENV)/.built
	$(PY) examples/demo.py

# pytest shows each file's tests with the % done; skips are counted by reason
# (pyproject.toml's addopts).
test: $(VENV)/.built
	$(PY) -m pytest tests

build: $(VENV)/.built

bench: $(VENV)/.built
	$(PY) -m robocache.bench

# Formatting: ruff for Python, clang-format for csrc/ (versions pinned so that
# every machine formats alike).
LINT_TOOLS := ruff==0.17.6 clang-format==23.1.5
CSRC_FILES = $(shell find csrc -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh')

$(VENV)/.lint: $(VENV)/.deps
	$(PY) -m pip install -q $(LINT_TOOLS)
	touch $@

lint: $(VENV)/.lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/clang-format --dry-run -Werror $(CSRC_FILES)

format: $(VENV)/.lint
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .
	$(VENV)/bin/clang-format -i $(CSRC_FILES)

# The torch requested: .deps is redone when TORCH changes (a new stamp).
$(VENV)/.torch: FORCE
	@mkdir -p $(VENV)
	@echo '$(TORCH)' | cmp -s - $@ || echo '$(TORCH)' > $@

# A list in pyproject.toml (its keys as a Python subscript), quoted for the shell.
pyproject_list = $(shell $(PYTHON) -c 'import tomllib; print(" ".join(chr(39) + r + chr(39) for r in tomllib.load(open("pyproject.toml", "rb"))$(1)))')
# What the tests need besides torch, the loaders' libraries included: the
# `test` extra. What a build without isolation needs besides torch: the
# build-system requires (setuptools at its lower bound or newer, wheel, ninja).
TEST_DEPS := $(call pyproject_list,["project"]["optional-dependencies"]["test"])
BUILD_DEPS := $(call pyproject_list,["build-system"]["requires"])

# pip's own output shows what it fetches and installs (torch alone is hundreds of MB).
$(VENV)/.deps: $(VENV)/.torch
	$(PYTHON) -m venv $(VENV)
	@echo "installing $(TORCH), the build's tools and the test dependencies into $(VENV) (minutes the first time)"
	$(PY) -m pip install "$(TORCH)" $(BUILD_DEPS) $(TEST_DEPS)
	touch $@

# The library in the checkout and the torch it was built against
# (robocache/_build_info.py) are rebuilt where either is missing or newer than
# the last build here: an editable install from another environment (another
# torch) writes both in place.
LIBRARY := $(wildcard robocache/_C*.so)
BUILD_INFO := $(wildcard robocache/_build_info.py)
$(VENV)/.built: $(VENV)/.deps $(SOURCES) $(if $(and $(LIBRARY),$(BUILD_INFO)),$(LIBRARY) $(BUILD_INFO),FORCE)
	@echo "building robocache's library against $$($(PY) -c 'import torch; print(torch.__version__)') (a minute or more; MAX_JOBS=$(MAX_JOBS))"
	@mkdir -p build
	MAX_JOBS=$(MAX_JOBS) $(PY) -m pip install -v --no-build-isolation --no-deps -e . $(call progress,build/build.log)
	touch $@

$(CUDA_VENV)/.deps:
	$(PYTHON) -m venv $(CUDA_VENV)
	$(CUDA_VENV)/bin/python -m pip install -q "$(CUDA_TORCH)" $(BUILD_DEPS) numpy
	touch $@

# Compiles every CUDA source (for $(CUDA_ARCHS)) and checks that the library
# loads and registers its CUDA kernels. Fails if any .cu file does not compile.
# The CUDA library headers a toolkit of nvcc alone lacks (cusparse.h, ...) are
# those of torch's NVIDIA wheels in $(CUDA_VENV), which setup.py finds.
cuda-build-check: $(CUDA_VENV)/.deps
	test -x "$(CUDA_HOME)/bin/nvcc" || { echo "cuda-build-check: no nvcc under CUDA_HOME=$(CUDA_HOME)"; exit 1; }
	rm -rf build/cuda-check
	PATH="$(abspath $(CUDA_VENV))/bin:$(CUDA_HOME)/bin:$$PATH" FORCE_CUDA=1 CUDA_HOME="$(CUDA_HOME)" \
	  TORCH_CUDA_ARCH_LIST="$(CUDA_ARCHS)" MAX_JOBS=$(MAX_JOBS) \
	  $(CUDA_VENV)/bin/python setup.py -q build_ext -b build/cuda-check/lib -t build/cuda-check/tmp
	$(CUDA_VENV)/bin/python .ci/check_cuda_build.py build/cuda-check/lib

# A wheel for the torch in .venv (TORCH=, and CUDA_ARCHS= for a CUDA torch):
# its version's local label names that torch, and its metadata pins it.
wheel: $(VENV)/.deps
	rm -rf dist
	@echo "building a robocache wheel against $$($(PY) -c 'import torch; print(torch.__version__)') (a few minutes)"
	@mkdir -p build
	TORCH_CUDA_ARCH_LIST="$(CUDA_ARCHS)" MAX_JOBS=$(MAX_JOBS) $(PY) -m pip wheel -v --no-build-isolation --no-deps -w dist . $(call progress,build/wheel.log)
	@ls -l dist/*.whl

# The wheel as a user gets it: installed into a new venv, the suite run against
# the installed package (not the checkout) from outside the checkout.
WHEEL_VENV ?= build/wheel-venv
wheel-test: wheel
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q "$(TORCH)" $(TEST_DEPS)
	$(WHEEL_VENV)/bin/python -m pip install -q dist/*.whl
	cd $(WHEEL_VENV) && bin/python -c "import robocache; assert 'site-packages' in robocache.__file__, robocache.__file__; print('testing', robocache.__file__, robocache.__version__)"
	cd $(WHEEL_VENV) && bin/python -m pytest $(abspath tests) -q -p no:cacheprovider

# The suite against another torch and other dependency versions (CI: the
# oldest supported, PINS=.ci/oldest.txt, and the newest torch available,
# PINS=.ci/newest.txt): PINS constrains what a new venv installs, the CPU and
# Meta kernels are built from a copy of the tracked files and installed
# there, and the suite runs against the installed package.
PINS ?= .ci/oldest.txt
PINNED := build/pinned-$(basename $(notdir $(PINS)))
test-pinned:
	rm -rf $(PINNED) && mkdir -p $(PINNED)/src
	git ls-files -z | xargs -0 cp --parents -t $(PINNED)/src
	$(PYTHON) -m venv $(PINNED)/venv
	$(PINNED)/venv/bin/python -m pip install -q -c $(PINS) torch $(BUILD_DEPS) $(TEST_DEPS)
	@echo "building robocache's CPU library against $$($(PINNED)/venv/bin/python -c 'import torch; print(torch.__version__)') ($(PINS))"
	cd $(PINNED)/src && PATH="$(abspath $(PINNED))/venv/bin:$$PATH" FORCE_CPU=1 MAX_JOBS=$(MAX_JOBS) \
	  ../venv/bin/python -m pip install -v --no-build-isolation --no-deps . $(call progress,../build.log)
	$(PINNED)/venv/bin/python -m pip list --format=freeze | grep -iE '^(torch|numpy|pyarrow|av|h5py|zarr|rosbags|mcap)==' | tr '\n' ' '; echo
	cd $(PINNED)/venv && bin/python -m pytest $(abspath tests) -q -p no:cacheprovider

# The CUDA wheel (CI, no GPU needed): every CUDA source compiled for
# $(CUDA_WHEEL_ARCHS) (machine code for each, PTX for the newest), built from a
# copy of the tracked files, its library loaded and its CUDA kernels checked,
# its machine code listed and its size reported.
CUDA_WHEEL_ARCHS ?= $(CUDA_ARCHS)
cuda-wheel: $(CUDA_VENV)/.deps
	test -x "$(CUDA_HOME)/bin/nvcc" || { echo "cuda-wheel: no nvcc under CUDA_HOME=$(CUDA_HOME)"; exit 1; }
	rm -rf build/cuda-src build/cuda-wheel dist-cuda
	mkdir -p build/cuda-src build/cuda-wheel
	git ls-files -z | xargs -0 cp --parents -t build/cuda-src
	@echo "building the CUDA wheel for $(CUDA_WHEEL_ARCHS) (many minutes on few cores)"
	cd build/cuda-src && PATH="$(abspath $(CUDA_VENV))/bin:$(CUDA_HOME)/bin:$$PATH" FORCE_CUDA=1 CUDA_HOME="$(CUDA_HOME)" \
	  TORCH_CUDA_ARCH_LIST="$(CUDA_WHEEL_ARCHS)" MAX_JOBS=$(MAX_JOBS) \
	  $(abspath $(CUDA_VENV))/bin/python -m pip wheel -v --no-build-isolation --no-deps -w $(abspath dist-cuda) . $(call progress,../cuda-wheel.log)
	cd build/cuda-wheel && unzip -q $(abspath dist-cuda)/*.whl
	$(CUDA_VENV)/bin/python .ci/check_cuda_build.py build/cuda-wheel
	@if [ -x "$(CUDA_HOME)/bin/cuobjdump" ]; then \
	  $(CUDA_HOME)/bin/cuobjdump --list-elf build/cuda-wheel/robocache/_C*.so | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/machine code \1/' | sort | uniq -c; \
	  $(CUDA_HOME)/bin/cuobjdump --list-ptx build/cuda-wheel/robocache/_C*.so | sed 's/.*\.\(sm_[0-9a-z]*\)\..*/PTX \1/' | sort | uniq -c; \
	else echo "no cuobjdump under $(CUDA_HOME)/bin: the machine code is not listed"; fi
	@ls -l dist-cuda/*.whl

clean:
	rm -rf build dist dist-cuda robocache/_C*.so robocache/_build_info.py $(VENV)/.built $(VENV)/.deps $(VENV)/.torch
