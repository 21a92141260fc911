# The README's two commands (`make run`, `make test`; .ci/run calls `make test`), set-up, and nvcc
# compilation of generated sources.
PYTHON ?= python3
VENV   ?= .venv
BIN    ?= $(VENV)/bin
NET    ?= resnet152
# --weights for `make run`: torchvision's pretrained weights (downloaded once); empty: seeded random weights
WEIGHTS ?= torchvision

.PHONY: setup run run-gpu run-cpu test test-gpu specs cubins clean

setup: $(VENV)/.snn-installed

$(VENV)/.snn-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $@

# The main job on shipped defaults: the NET bundle, then on a machine with an NVIDIA GPU the GPU extra,
# calibration and the sample photos classified (per-layer split, time against the dense path).
run: setup
	@if $(BIN)/python -c "import sys; from snn.runtime.cuda import gpu_missing; sys.exit(1 if gpu_missing() else 0)"; \
	then $(MAKE) --no-print-directory run-gpu; else $(MAKE) --no-print-directory run-cpu; fi

run-cpu:
	$(BIN)/snn-codegen build $(NET) --batch 1,8
	@echo "Bundle built. Classifying needs an NVIDIA GPU and its driver: on such a machine run 'make run' (or copy generated/$(NET) there and run 'snn-run infer --spec $(NET)')."

run-gpu:
	@$(BIN)/python -c "import torch, torchvision, PIL" 2>/dev/null || $(BIN)/pip install --quiet -e '.[gpu]'
	$(BIN)/snn-codegen build $(NET) --batch 1,8
	$(BIN)/snn-run calibrate --spec $(NET) --batch 8 --levels 0.4:0.9:0.1 --images runtime/samples $(if $(WEIGHTS),--weights $(WEIGHTS))
	$(BIN)/snn-run infer --spec $(NET) --batch 8 --trace --compare-dense $(if $(WEIGHTS),--weights $(WEIGHTS))

test: setup
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
