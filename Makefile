# Set-up and tests (what the README and .ci/run call), and nvcc compilation of generated sources.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: setup test test-gpu specs cubins clean

setup:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'

test:
	$(BIN)/python -m pytest -q

# On a GPU machine: pytest -m gpu (torch + torchvision needed, e.g. pip install -e '.[gpu]').
test-gpu:
	$(BIN)/python -m pytest -q -m gpu tests/gpu

specs:
	$(BIN)/python network_specs/generate.py

# nvcc: *.cu -> *.cubin in GEN (a folder of generated sources, e.g. a bundle's src/), run in parallel with -j:
#   make cubins GEN=generated/resnet152/h100/src CUBIN_DIR=/tmp/cubins -j 8
# `snn-codegen build` drives this same target on the compiler cache's misses (staged in a folder of the
# cache, with GEN=CUBIN_DIR=that folder and NVCC_FLAGS as it hashes them); the Makefile is installed with
# the package for that. Each kernel's ptxas report
# lands in <kernel>.ptxas; on failure it holds the compiler's message, also shown on stderr. A cubin
# appears only whole (temp + mv), and "cubin <kernel>" on stdout marks it (the build's progress bar).
GEN   ?= generated
ARCH  ?= sm_90
NVCC  ?= nvcc
NVCC_FLAGS ?= -O3 -std=c++17 -Xptxas -v
CUBIN_DIR ?= $(GEN)
SOURCES := $(wildcard $(GEN)/*.cu)
CUBINS  := $(patsubst $(GEN)/%.cu,$(CUBIN_DIR)/%.cubin,$(SOURCES))

cubins: $(CUBINS)
	@$(if $(SOURCES),:,echo "make cubins: no .cu files in GEN=$(GEN); name a folder of sources, e.g. make cubins GEN=generated/resnet152/h100/src CUBIN_DIR=/tmp/cubins" >&2; exit 1)

$(CUBIN_DIR)/%.cubin: $(GEN)/%.cu
	@mkdir -p $(CUBIN_DIR)
	@$(NVCC) -cubin -arch=$(ARCH) $(NVCC_FLAGS) -o $@.tmp $< 2> $(CUBIN_DIR)/$*.ptxas || { cat $(CUBIN_DIR)/$*.ptxas >&2; rm -f $@.tmp; exit 1; }
	@mv $@.tmp $@
	@echo "cubin $*"

clean:
	rm -rf generated/*/ .pytest_cache
