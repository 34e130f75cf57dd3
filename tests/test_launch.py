"""The launch scripts: SLURM scripts parse (`bash -n`), print their commands in dry-run mode, and pass overrides
through intact when run for real against stand-ins for srun / scontrol / accelerate / curl / vllm that record
what they were given; the accelerate configs' notes and defaults."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SLURM = sorted((REPO / "launch" / "slurm").glob("*.sbatch"))
JSON_OVERRIDE = ["--pool_mix", '{"training": 2, "exploit": 1}', "--run_name", "two words"]
NEEDS = {"colocate_multinode.sbatch": {}, "trainer_vllm_server.sbatch": {"MODEL": "runs/sft/m y/merged"}}


def test_the_slurm_scripts_and_the_vllm_script_parse():
    scripts = [*SLURM, REPO / "launch" / "vllm_server.sh"]
    assert {p.name for p in SLURM} == set(NEEDS)
    for script in scripts:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, (script.name, proc.stderr)
    assert (REPO / "logs").is_dir()  # `#SBATCH --output=logs/...`: sbatch does not create it


def _env(script: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "RECIPE": "configs/sepo/ipd_default.yaml", **NEEDS[script.name], **extra}


def _train_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(accelerate launch's arguments, sepo train's) of an `accelerate launch ... -m sepo.cli train ...` argv."""
    start = argv.index("launch")
    module = argv.index("-m", start)
    assert argv[module + 1 : module + 3] == ["sepo.cli", "train"]
    return argv[start + 1 : module], argv[module + 3 :]


@pytest.mark.parametrize("script", SLURM, ids=lambda p: p.name)
def test_dry_run_prints_the_commands_with_overrides_as_single_arguments(script, tmp_path):
    proc = subprocess.run(["bash", str(script), *JSON_OVERRIDE], cwd=REPO, capture_output=True, text=True,
                          env=_env(script, DRY_RUN="1"), timeout=30)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    commands = [shlex.split(line) for line in proc.stdout.splitlines()]
    assert all(c[0] == "srun" for c in commands)
    launch, train = _train_args(commands[-1])
    assert train[-len(JSON_OVERRIDE) :] == JSON_OVERRIDE
    config = launch[launch.index("--config_file") + 1]
    assert config == "launch/accelerate/multi_gpu.yaml"  # the default needs no DeepSpeed
    assert "deepspeed_config" not in yaml.safe_load((REPO / config).read_text())
    if script.name == "trainer_vllm_server.sbatch":
        assert commands[0][-3:] == ["launch/vllm_server.sh", "runs/sft/m y/merged", "8000"]
        assert train[train.index("--vllm_server_host") + 1] == "node3" and "--nodelist=node1,node2" in commands[1]


FAKES = {
    # srun: drop its own options, run the command once per task with that task's SLURM_PROCID
    "srun": '#!/bin/bash\nn=1\nwhile [[ $# -gt 0 && $1 == --* ]]; do [[ $1 == --ntasks=* ]] && n=${1#--ntasks=}; '
            'shift; done\nfor ((i = 0; i < n; i++)); do SLURM_PROCID=$i "$@" || exit $?; done\n',
    "scontrol": '#!/bin/bash\n[[ "$*" == "show hostnames nodes[1-3]" ]] && printf "gpu1\\ngpu2\\ngpu3\\n"\n',
    "curl": "#!/bin/bash\nexit 0\n",
    "accelerate": '#!/usr/bin/env python3\nimport json, os, sys\nwith open(os.environ["RECORD"], "a") as f:\n'
                  '    f.write(json.dumps(["accelerate", *sys.argv[1:]]) + "\\n")\n',
}
FAKES["vllm"] = FAKES["accelerate"].replace('["accelerate"', '["vllm"')


@pytest.mark.parametrize("script", SLURM, ids=lambda p: p.name)
def test_a_real_run_hands_every_override_through_unchanged(script, tmp_path):
    """Run the script for real (not dry), with recording stand-ins on PATH: each node's launcher gets its own
    machine rank and the overrides arrive as the same arguments, JSON and spaces included."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in FAKES.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "calls.jsonl"
    env = _env(script, PATH=f"{bin_dir}:{os.environ['PATH']}", RECORD=str(record), SLURM_JOB_NODELIST="nodes[1-3]")
    proc = subprocess.run(["bash", str(script), *JSON_OVERRIDE], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    launches = [c for c in calls if c[0] == "accelerate"]
    trainers = 3 if script.name == "colocate_multinode.sbatch" else 2
    assert len(launches) == trainers
    for rank, argv in enumerate(launches):
        launch, train = _train_args(argv)
        assert launch[launch.index("--machine_rank") + 1] == str(rank)
        assert launch[launch.index("--num_processes") + 1] == str(8 * trainers)
        assert launch[launch.index("--main_process_ip") + 1] == "gpu1"
        assert train[-len(JSON_OVERRIDE) :] == JSON_OVERRIDE
    if script.name == "trainer_vllm_server.sbatch":
        (serve,) = [c for c in calls if c[0] == "vllm"]
        assert serve[1:3] == ["serve", "runs/sft/m y/merged"]


def test_zero3_says_keep_best_by_safety_false():
    text = (REPO / "launch" / "accelerate" / "zero3.yaml").read_text()
    assert "keep_best_by_safety: false" in text


def _stand_ins(tmp_path: Path, **override: str) -> dict[str, str]:
    """FAKES (with `override`) on PATH, recording to tmp_path/calls.jsonl: the environment to run a script in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {**FAKES, **override}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "RECORD": str(tmp_path / "calls.jsonl"),
            "SLURM_JOB_NODELIST": "nodes[1-3]"}


def test_vllm_server_passes_data_parallel_size_and_extra_arguments(tmp_path):
    env = {**os.environ, **_stand_ins(tmp_path), "DP": "8", "TP": "1"}
    proc = subprocess.run(["bash", "launch/vllm_server.sh", "m", "8001", "--enable-prefix-caching", "--seed", "3"],
                          cwd=REPO, capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    (serve,) = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert serve[serve.index("--data-parallel-size") + 1] == "8" and serve[serve.index("--port") + 1] == "8001"
    assert serve[-3:] == ["--enable-prefix-caching", "--seed", "3"]


def test_the_server_node_gets_vllm_args(tmp_path):
    script = REPO / "launch" / "slurm" / "trainer_vllm_server.sbatch"
    env = _env(script, **_stand_ins(tmp_path), VLLM_ARGS="--enable-prefix-caching --seed 3", DP="8")
    proc = subprocess.run(["bash", str(script)], cwd=REPO, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    (serve,) = [c for c in calls if c[0] == "vllm"]
    assert serve[-3:] == ["--enable-prefix-caching", "--seed", "3"] and "--data-parallel-size" in serve


@pytest.mark.parametrize("vllm,wait,message", [
    ("#!/bin/bash\nexit 3\n", "600", "the vLLM server on gpu3 exited (status 3) before answering /health; see this job's log"),
    ("#!/bin/bash\nsleep 60\n", "1", "the vLLM server on gpu3 did not answer /health within 1 s (SERVER_WAIT_S)"),
])
def test_the_health_wait_ends_when_the_server_dies_or_the_wait_runs_out(vllm, wait, message, tmp_path):
    script = REPO / "launch" / "slurm" / "trainer_vllm_server.sbatch"
    env = _env(script, **_stand_ins(tmp_path, vllm=vllm, curl="#!/bin/bash\nexit 7\n"),
               SERVER_WAIT_S=wait, HEALTH_POLL_S="0.2")
    proc = subprocess.run(["bash", str(script)], cwd=REPO, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == f"trainer_vllm_server.sbatch: {message}"
    record = tmp_path / "calls.jsonl"
    assert not record.exists() or "accelerate" not in record.read_text()  # no trainer was started
