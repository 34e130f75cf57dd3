"""python -m benchmarks: the suite runs in quick mode and appends a well-formed results line (no timing thresholds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from device_env import device_site, prelude

from benchmarks.gpu import check as gpu_check
from benchmarks.suite import PARTS, main, results_markdown, rows

ROOT = Path(__file__).resolve().parents[1]


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_quick_suite_appends_a_well_formed_line_and_regenerates_results_md(tmp_path, capsys):
    out = tmp_path / "bench" / "results.jsonl"
    assert main(["--quick", "--only", "car_tag,engine,planning", "--out", str(out)]) == 0
    assert main(["--quick", "--only", "car_tag", "--out", str(out)]) == 0
    first, second = _lines(out)
    for line in (first, second):
        assert set(line) >= {"date", "machine", "git_sha", "quick", "figures", "errors"}
        assert line["quick"] is True and line["errors"] == {}
        assert line["machine"]["cores"] >= 1 and line["machine"]["cpu"]
        car = line["figures"]["car_tag"]
        assert car["steps_played"] == car["games"] * car["max_steps"]  # the pairing ran every step
        assert car["pairing_s"] > 0 and car["speedup"] > 0
    engine = first["figures"]["engine"]
    # 16 episodes of each game at its default length: one LLM decision per round in the simultaneous games
    rounds = {"ipd": 8, "auction": 6, "negotiation": 4, "negotiation_multi": 4}
    for game, n in rounds.items():
        assert engine["games"][game]["cold"]["decisions"] == engine["games"][game]["warm"]["decisions"] == 16 * n
    assert engine["games"]["kuhn"]["warm"]["fallback_rate"] > 0  # "PASS"/"BET" answers miss call/fold turns
    assert engine["games"]["ipd"]["warm"]["fallback_rate"] == 0
    assert engine["reference"]["us_per_decision"] > 0 and engine["reference"]["speedup"] > 0
    ipd_us = engine["games"]["ipd"]["warm"]["us_per_decision"]  # the goals as ratios within the run
    assert engine["vs_ipd"] == {g: round(r["warm"]["us_per_decision"] / ipd_us, 2) for g, r in engine["games"].items()}
    planning = first["figures"]["planning"]  # keyed rows plan exactly the call the searching planner did
    assert [b["batch"] for b in planning["batches"]] == [8, 16] and all(b["same_plan"] for b in planning["batches"])
    printed = capsys.readouterr().out
    assert "engine cost, ipd" in printed and "Car Tag pairing" in printed and "x IPD" in printed
    assert "KV prefix planning, batch 16" in printed
    md = (out.parent / "RESULTS.md").read_text()
    assert md == results_markdown([first, second]) and md.count("## ") == 2


def test_merge_appends_foreign_lines(tmp_path):
    src, dst = tmp_path / "gpu.jsonl", tmp_path / "results.jsonl"
    line = {"date": "2026-01-01T00:00:00+00:00", "machine": {"cpu": "x", "cores": 16, "gpu": "NVIDIA H200"},
            "git_sha": "abc", "quick": False, "figures": {}, "errors": {}}
    src.write_text(json.dumps(line) + "\n")
    assert main(["--merge", str(src), "--out", str(dst)]) == 0
    assert _lines(dst) == [line]
    assert "NVIDIA H200" in (tmp_path / "RESULTS.md").read_text()


def test_unknown_part_is_a_clear_error(capsys, tmp_path):
    assert main(["--only", "rollout,warp", "--out", str(tmp_path / "r.jsonl")]) == 2
    assert f"unknown part(s) ['warp']; choose from: {', '.join(PARTS)}" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def test_rows_name_their_baselines():
    figures = {"envs": {"ipd": {"turns": 200, "ours_ms_per_match": 1.0, "axelrod_ms_per_match": 3.0, "speedup": 3.0},
                        "kuhn": {"ours_ms_per_call": 0.1, "openspiel_ms_per_call": 2.0, "speedup": 20.0}}}
    text = " ".join(" ".join(r) for r in rows(figures))
    assert "Axelrod" in text and "OpenSpiel" in text and "3.0x" in text and "20.0x" in text


def _check_parts(check: dict) -> dict[str, dict]:
    return {e["part"]: e for e in check["parts"]}


def run_check_as_on_the_device(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    """benchmarks/gpu/check.py in a fresh interpreter where every package the lent H200 lacks (wandb, vllm,
    matplotlib, ...: tests/device_env.py) is missing, so an import the device would fail on fails here."""
    site, _hidden = device_site(tmp / "device-site")
    script = prelude(site, tmp / "device-site") + (
        f"import runpy\nsys.argv = ['benchmarks/gpu/check.py', *{args!r}]\n"
        "runpy.run_path('benchmarks/gpu/check.py', run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)


def test_the_device_site_hides_exactly_the_absent_packages(tmp_path):
    """The packages hidden for the smoke test are the ones the device lacks, and hidden means missing: `import`
    fails, `find_spec` (how libraries probe optional packages) answers None and the metadata does not know
    them; the device's own packages and the carried wheels still import."""
    site, hidden = device_site(tmp_path / "s")
    assert {"wandb", "vllm", "matplotlib", "gguf", "openai"} <= hidden
    assert not {"torch", "transformers", "peft", "accelerate", "trl", "datasets", "numpy", "dill"} & hidden
    probe = prelude(site, tmp_path / "s") + (
        "import importlib.util, importlib.metadata as md\n"
        "assert importlib.util.find_spec('wandb') is None and importlib.util.find_spec('vllm') is None\n"
        "assert 'wandb' not in {d.metadata['Name'] for d in md.distributions()}\n"
        "try:\n    import wandb\nexcept ImportError:\n    pass\nelse:\n    raise SystemExit('wandb imported')\n"
        "import torch, transformers, trl, datasets  # the device's, and the wheels make gpu-wheels carries\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_gpu_check_smoke_mode_runs_every_part_and_merges(tmp_path):
    """benchmarks/gpu/check.py --tiny --cpu with only the device's packages importable: every part runs on a
    tiny model in order of value, the JSON names other tools read are there, the arithmetic is right, and the
    results line merges into the suite's files (goals are not enforced on a tiny CPU model)."""
    done = run_check_as_on_the_device(["--tiny", "--cpu", "--out", str(tmp_path / "out")], tmp_path)
    tmp_path = tmp_path / "out"
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-6000:]
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    assert check["complete"] is True and check["goals_enforced"] is False
    assert [e["part"] for e in check["parts"]] == ["grpo_step", "rollout", "decode", "flops", "rollout_qwen3_5",
                                                   "rollout_gemma4"]  # one full recipe step first
    assert [e["arch"] for e in check["parts"]] == ["qwen3_5", "llama", "llama", "llama", "qwen3_5", "gemma4"]
    assert {e["status"] for e in check["parts"]} == {"ok"}
    assert {"torch", "trl", "datasets", "transformers"} <= set(check["versions"])
    assert check["device"]["nominal_bandwidth_tb_s"] == 4.8 and check["device"]["nominal_bf16_dense_tflops"] == 989
    assert set(check["estimate_s"]) == {e["part"] for e in check["parts"]}
    printed = done.stdout
    assert printed.index("estimate before starting") < printed.index("grpo_step (qwen3_5) ...")
    parts = _check_parts(check)
    for name in ("grpo_step", "rollout", "decode", "rollout_qwen3_5", "rollout_gemma4"):  # every generating part
        assert {"stored", "refused"} <= set(parts[name]["prefix_cache"])
    for name in ("grpo_step", "rollout", "rollout_qwen3_5", "rollout_gemma4"):  # KV reuse on every architecture
        counts = parts[name]["prefix_cache"]
        assert counts["stored"] > 0 and counts["refused"] == 0, (name, counts)

    step = parts["grpo_step"]["figures"]
    # per step, never summed: 1 warm-up step, then 2 timed steps whose mean is the figure
    assert step["warmup_steps"] == 1 and step["measured_steps"] == 2 and len(step["timed_steps_s"]) == 2
    assert parts["grpo_step"]["seconds_per_step"] == step["seconds_per_step"] == pytest.approx(
        sum(step["timed_steps_s"]) / 2)
    assert step["episodes_per_step"] == 12 and step["backward_calls"] == step["optimizer_calls"] * 3 == 3
    assert step["recipe"] == "configs/sepo/ipd_qwen35_4b.yaml" and "LoRA r16" in step["model"]
    # every part is timed on its own: disjoint windows inside the step add up to at most the step
    inside = step["generation_s"] + step["model_compute_s"] + step["sepo_rollout_s"] + step["sepo_rewards_s"] \
        + step["sepo_advantages_s"]
    assert inside <= step["seconds_per_step"] + 1e-6 and step["other_s"] >= 0
    pred = check["prediction"]
    assert pred["hours_per_100_steps"] == pytest.approx(100 * step["seconds_per_step"] / 3600)
    assert pred["slower_path"] is True and "vLLM colocate" in pred["note"] and pred["goal_hours_per_100_steps"] == 1
    assert sum(pred["share"].values()) == pytest.approx(1.0)

    decode = parts["decode"]["figures"]
    assert [a["batch"] for a in decode["batches"]] == [1, 8]
    # tiny Llama by hand: embeddings and head 2 x 512 x 64, two layers of q/k/v/o 4 x 64 x 64, MLP 3 x 64 x 128
    # and two norms of 64, a final norm of 64: 147,776 fp32 parameters, of which a decode step reads all but the
    # 32,768 of the input embedding; key/value cache per token 2 (k, v) x 2 layers x 2 heads x 32 x 4 bytes =
    # 1,024; 8 rows at a mean context of 16 + 8 / 2 tokens
    assert decode["weight_gb"] * 1e9 == pytest.approx(115_008 * 4)
    big = decode["batches"][1]
    assert big["new_tokens"] == 8
    assert big["roofline_tokens_per_s"] == pytest.approx(8 * 4.8e12 / (115_008 * 4 + 8 * 20 * 1024))
    assert big["decode_tokens_per_s"] > 0 and decode["prefix_cache"]["stored"] > 0
    flops = parts["flops"]["figures"]
    # forward FLOPs by hand: 2 x 81,920 body matmul weights per token, 2 x 32,768 for each token's logits,
    # causal attention 2 layers x 2 x batch x 2 heads x 32^2 positions x 32 dims
    assert flops["prefill"]["flops"] == 2 * 81_920 * 2 * 32 + 2 * 32_768 * 2 + 2 * 2 * 2 * 2 * 32**2 * 32
    attention = 2 * 2 * 2 * 2 * 32**2 * 32
    assert flops["train_forward"]["flops"] == 2 * 81_920 * 64 + 2 * 32_768 * 64 + attention
    assert flops["backward"]["flops"] == flops["train_forward"]["flops"] + attention
    assert flops["backward"]["mfu"] == pytest.approx(flops["backward"]["tflops_per_s"] / 989)

    dst = tmp_path / "merged" / "results.jsonl"
    assert main(["--merge", str(tmp_path / "results.jsonl"), "--out", str(dst)]) == 0
    md = (dst.parent / "RESULTS.md").read_text()
    assert "decode at batch 8" in md and "decode at batch 1:" in md and "SEPO overhead per GRPO step" in md
    assert "rollouts: 4 IPD episodes" in md and "a step, mean of 2 after a warm-up" in md


@pytest.mark.parametrize("signum", ["SIGKILL", "SIGTERM"])
def test_gpu_check_file_survives_a_kill_with_the_parts_done(tmp_path, signum):
    """The check rewrites gpu_check.json after every part (and every step of the step part): SIGKILL during
    the second part leaves a file with the first part's figures and the second marked running; SIGTERM (what
    `timeout` sends first) marks it killed."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "benchmarks/gpu/check.py", "--tiny", "--cpu", "--parts",
                             "rollout,grpo_step", "--out", str(tmp_path)], cwd=root, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path, seen = tmp_path / "gpu_check.json", None
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists():  # written atomically: always whole
                seen = json.loads(path.read_text())
                first, second = seen["parts"]
                if first["status"] == "ok" and second.get("progress", {}).get("steps_done", 0) >= 2:
                    break  # the warm-up and one timed step done, the last step running
            time.sleep(0.05)
        assert proc.poll() is None, "the check finished before it could be killed"
        proc.send_signal(getattr(signal, signum))
        if signum == "SIGTERM":
            assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    check = json.loads(path.read_text())
    assert check["complete"] is False
    first, second = check["parts"]
    assert first["part"] == "rollout" and first["status"] == "ok" and first["figures"]["speedup"] > 0
    assert first["prefix_cache"]["stored"] > 0
    assert second["part"] == "grpo_step" and second["progress"]["steps_done"] == 2
    if signum == "SIGKILL":
        assert second["status"] == "running" and "killed_by_signal" not in check
    else:
        assert second["status"] == "killed" and check["killed_by_signal"] == signal.SIGTERM
    so_far = second["progress"]["figures_so_far"]  # the step figures so far, and a provisional prediction
    assert so_far["measured_steps"] == 1
    assert so_far["seconds_per_step"] == pytest.approx(second["progress"]["step_s_so_far"][1], abs=1e-3)
    assert check["prediction"]["provisional"] is True
    assert check["prediction"]["hours_per_100_steps"] == pytest.approx(100 * so_far["seconds_per_step"] / 3600)
    lines = _lines(tmp_path / "results.jsonl")
    assert lines[0]["figures"]["rollout"]["episodes"] == 4 and "overhead" not in lines[0]["figures"]


def test_gpu_check_skips_parts_that_would_overrun_its_budget(tmp_path, capsys):
    """A part whose estimate exceeds what is left of the budget is skipped with a note; none starts once the
    budget is spent. The file says so for each part."""
    assert gpu_check.main(["--tiny", "--cpu", "--budget-s", "15", "--parts", "grpo_step", "--out", str(tmp_path)]) == 0
    (entry,) = json.loads((tmp_path / "gpu_check.json").read_text())["parts"]
    assert entry["status"] == "skipped" and "would overrun" in entry["note"] and "figures" not in entry
    assert gpu_check.main(["--tiny", "--cpu", "--budget-s", "0", "--parts", "decode,flops", "--out", str(tmp_path)]) == 0
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    assert [(e["status"], e["note"]) for e in check["parts"]] == [("skipped", "not started: the 0 s budget was spent")] * 2
    assert check["complete"] is True and check["prediction"] is None


def test_gpu_check_fails_a_full_attention_part_whose_batched_arm_never_stored(tmp_path, monkeypatch, capsys):
    """KV reuse silently off (the 4B shape's 7.2 GiB over a fixed 4 GiB budget) is a failed part, with the
    refusals counted in its figures, and the exit status says so."""
    from sepo.backends.prefix_cache import PrefixCache

    monkeypatch.setattr(PrefixCache, "budget", lambda self, device: 0)  # every store over budget
    assert gpu_check.main(["--tiny", "--cpu", "--parts", "rollout,decode", "--out", str(tmp_path)]) == 1
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    for entry in check["parts"]:
        assert entry["status"] == "failed" and entry["prefix_cache"]["stored"] == 0
        assert entry["prefix_cache"]["refused_over_budget"] > 0
    assert "KV reuse off" in _check_parts(check)["rollout"]["error"]
    assert "part rollout failed" in capsys.readouterr().err


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_check_refuses_to_run_without_cuda(tmp_path, capsys):
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "no CUDA device" in capsys.readouterr().err and not list(tmp_path.iterdir())
    assert gpu_check.main(["--tiny", "--out", str(tmp_path)]) == 2  # the 4B model never runs on the CPU
    assert gpu_check.main(["--tiny", "--cpu", "--parts", "warp", "--out", str(tmp_path)]) == 2


def test_gpu_check_goals():
    met = {"grpo_step": {"hours_per_100_steps": 0.9, "sepo_overhead_share": 0.01}, "rollout": {"speedup": 45.0},
           "decode": {"roofline_fraction": 0.31}}
    assert gpu_check.missed_goals(met) == []
    missed = gpu_check.missed_goals({"grpo_step": {"hours_per_100_steps": 2.5, "sepo_overhead_share": 0.01},
                                     "rollout": {"speedup": 12.0}, "decode": {"roofline_fraction": 0.5}})
    assert missed == ["grpo_step.hours_per_100_steps = 2.5, goal <= 1", "rollout.speedup = 12, goal >= 30"]
    assert gpu_check.missed_goals({}) == [f"{k}: not measured" for k in gpu_check.GOALS]


def test_overhead_figures_are_per_step_means_after_the_warm_up():
    """overhead.per_step: from cumulative per-step snapshots, each part is the mean over the steps after the
    warm-up (never their sum), the step's own wall times are listed, and the prefix counts are summed."""
    from benchmarks.overhead import per_step

    snapshots = [  # cumulative watch totals after each step, each with its own step's wall time
        {"step": 9.0, "logprob_forward": 3.0, "backward": 2.0, "optimizer": 0.1, "backward_calls": 7.0},
        {"step": 4.0, "logprob_forward": 5.0, "backward": 3.0, "optimizer": 0.2, "backward_calls": 14.0},
        {"step": 6.0, "logprob_forward": 7.0, "backward": 5.0, "optimizer": 0.3, "backward_calls": 21.0},
    ]
    logs = [{"sepo/time/generation_s": g, "sepo/time/rollout_overhead_s": 0.1, "sepo/prefix_cache/stored": 8,
             "sepo/prefix_cache/refused": 1} for g in (5.0, 1.0, 2.0)]
    got = per_step(snapshots, logs)
    assert got["warmup_steps"] == 1 and got["warmup_step_s"] == 9.0 and got["timed_steps_s"] == [4.0, 6.0]
    assert got["seconds_per_step"] == got["step_s"] == 5.0  # (4 + 6) / 2, the warm-up's 9 s left out
    assert got["generation_s"] == 1.5 and got["logprob_forward_s"] == 2.0 and got["backward_s"] == 1.5
    assert got["backward_calls"] == 7.0 and got["sepo_overhead_share"] == pytest.approx(0.1 / 5.0)
    assert got["prefix_cache"]["stored"] == 16 and got["prefix_cache"]["refused"] == 2


def test_gpu_check_step_part_stops_before_a_step_that_would_end_past_its_time_box():
    """The step part's callback: with its time box's end already passed, it stops training after the step just
    logged and says why; with time left it reports progress and lets training go on."""
    from types import SimpleNamespace

    from transformers import TrainerControl

    reported = []
    steps = SimpleNamespace(steps=[{"step": 5.0}, {"step": 4.0}])
    logs = [{"sepo/time/generation_s": 1.0}] * 2

    def ctx(deadline: float):
        return gpu_check.Context(tiny=True, cuda=False, device={}, progress=reported.append, deadline=deadline)

    for deadline, stops in ((float("-inf"), True), (float("inf"), False)):
        control = TrainerControl()
        callback = gpu_check.step_progress(steps, ctx(deadline), lambda history: {"from": len(history)})
        callback.on_log(SimpleNamespace(max_steps=3), SimpleNamespace(global_step=2, log_history=logs), control,
                        logs=logs[-1])
        assert control.should_training_stop is stops
        assert reported[-1]["steps_done"] == 2 and reported[-1]["figures_so_far"] == {"from": 2}
        assert ("stopped" in reported[-1]) is stops
    assert reported[0]["stopped"] == "after 2 of 3 steps: one more at 4 s would end past its time box"


def _wired_like_transformers(implementation, reference):
    """A test double of transformers' kernel wiring (`use_kernel_func_from_hub_with_fallback`): a function
    wrapping `reference` (functools.wraps) that calls `implementation`, the way a carried kernel is wired in."""
    import functools

    @functools.wraps(reference)
    def wired(*args, **kwargs):
        return implementation(*args, **kwargs)

    return wired


@pytest.mark.parametrize("kernel", ["fails", "wrong", "right"])
def test_linear_attention_kernels_are_checked_and_a_bad_one_is_unwired(monkeypatch, kernel):
    """A kernel wired into Qwen 3.5's chunked delta rule is run once against the PyTorch reference: one that
    raises or disagrees is unwired (the reference is put back), one that agrees stays and counts as fast."""
    import inspect

    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as qwen

    reference = inspect.unwrap(qwen.torch_chunk_gated_delta_rule)

    def fails(*args, **kwargs):
        raise RuntimeError("no kernel image is available for execution on the device")

    def wrong(*args, **kwargs):
        out, state = reference(*args, **kwargs)
        return torch.zeros_like(out), state

    implementation = {"fails": fails, "wrong": wrong, "right": lambda *a, **k: reference(*a, **k)}[kernel]
    monkeypatch.setattr(qwen, "torch_chunk_gated_delta_rule", _wired_like_transformers(implementation, reference))
    found = gpu_check.linear_attention_kernels("cpu")
    chunk = found["torch_chunk_gated_delta_rule"]
    assert found["torch_recurrent_gated_delta_rule"].startswith("reference (no kernel package")
    assert found["fast"] is False  # the recurrent rule has no kernel here
    if kernel == "right":
        assert chunk.startswith("fast (") and qwen.torch_chunk_gated_delta_rule is not reference
    else:
        assert chunk.startswith("reference (") and "failed here, unwired" in chunk
        assert ("RuntimeError" if kernel == "fails" else "differs from the reference") in chunk
        assert qwen.torch_chunk_gated_delta_rule is reference


def test_the_step_runs_on_qwen35_only_where_its_linear_attention_is_fast():
    slow, fast = {"fast": False}, {"fast": True}
    assert gpu_check.choose_step_arch("auto", False, fast)[0] == "qwen3_5"
    arch, why = gpu_check.choose_step_arch("auto", False, slow)
    assert arch == "llama" and "not the recipe's architecture" in why
    assert gpu_check.choose_step_arch("auto", True, slow)[0] == "qwen3_5"  # the smoke test: the recipe's
    assert gpu_check.choose_step_arch("gemma4", False, fast) == ("gemma4", "--step-arch")


def test_gpu_check_stops_a_part_at_its_time_box(tmp_path, monkeypatch, capsys):
    """A part still running at the end of its time box is interrupted there (status timed_out, a failed
    check), and the parts after it still run."""
    def slow_part(ctx):  # a test double for a part that overruns: sleeps well past its 0.5 s box
        time.sleep(30)
        return {}

    boxed = [replace(p, box_tiny_s=0.5, run=slow_part) if p.name == "decode" else p for p in gpu_check.parts()]
    monkeypatch.setattr(gpu_check, "parts", lambda step_arch="qwen3_5": boxed)
    assert gpu_check.main(["--tiny", "--cpu", "--parts", "decode,flops", "--out", str(tmp_path)]) == 1
    check = json.loads((tmp_path / "gpu_check.json").read_text())
    decode, flops = check["parts"]
    assert decode["status"] == "timed_out" and "time box" in decode["error"] and decode["seconds"] < 30
    assert flops["status"] == "ok"
    assert "part decode timed_out" in capsys.readouterr().err


def test_fused_head_entropy_times_the_same_log_probabilities_both_ways(tiny_model_dir):
    """The entropy benchmark compares two heads doing the same work plus the entropy: on a tiny model both give the
    same log-probabilities, each head is timed `repeats` times, and the ratio is the medians'."""
    from benchmarks.fused_head_entropy import run

    result = run(tiny_model_dir, rows=3, length=10, scored=4, repeats=3)
    assert result["same_log_probs"] is True
    assert [len(v) for v in result["seconds"].values()] == [3, 3]
    median = result["median_seconds"]
    assert result["ratio"] == round(median["entropy"] / median["baseline"], 3)


def test_first_tokens_lists_the_first_token_distribution_and_the_canonical_share(tiny_model_dir):
    """benchmarks.first_tokens: at every Kuhn decision state, the listed tokens are the next-token distribution's
    most probable in order, and `canonical_first` is the probability of the legal answers' first tokens, both
    recomputed here from the model's own logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.first_tokens import first_tokens
    from envs.kuhn_tabular import infoset_messages
    from sepo.eval.exact import require
    from sepo.rollout.chat import ChatRenderer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    params = {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}
    table = first_tokens(model, tok, "kuhn", params, top=3)
    states = require("kuhn").states(params)
    assert list(table) == [s.key for s in states]
    renderer = ChatRenderer(tok)
    for state in states:
        ids = renderer.prompt_ids(infoset_messages(state.key, params))
        with torch.no_grad():
            probs = torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        firsts = {tok.encode(a, add_special_tokens=False)[0] for a in state.legal}
        assert table[state.key]["canonical_first"] == pytest.approx(float(sum(probs[t] for t in firsts)), abs=1e-4)
        listed = [p for _, p in table[state.key]["top"]]
        assert listed == sorted(listed, reverse=True) and listed[0] == pytest.approx(float(probs.max()), abs=1e-4)
        assert table[state.key]["top"][0][0] == tok.decode([int(probs.argmax())])


def test_first_token_nudges_raise_their_target_from_the_same_start_each_time(tiny_model_dir):
    """benchmarks.first_tokens' nudges: at every state, each action's one step raises that action's first token,
    every step starts from the same weights (a second pass gives the same table, and the weights are restored),
    the gainers exclude the legal first tokens and are listed by their gain, and the LoRA is the study's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from benchmarks.first_tokens import canonical_fell, nudges, trainable_lora
    from sepo.eval.exact import require

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    recipe = {"train": {"lora_r": 4, "lora_alpha": 8}}
    model = trainable_lora(AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), recipe)
    assert {m.r["default"] for m in model.modules() if hasattr(m, "lora_A")} == {4}
    start = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    params = {"num_hands": 1, "first_mover": "random", "prompt_style": "compact"}
    table = nudges(model, tok, "kuhn", params, lr=1e-2, top=3)
    assert all(torch.equal(p, start[n]) for n, p in model.named_parameters() if p.requires_grad)
    assert nudges(model, tok, "kuhn", params, lr=1e-2, top=3) == table
    states = require("kuhn").states(params)
    assert list(table) == [s.key for s in states]
    for state in states:
        firsts = {tok.decode([tok.encode(a, add_special_tokens=False)[0]]) for a in state.legal}
        assert list(table[state.key]) == list(state.legal)
        for action, row in table[state.key].items():
            token, before, after = row["first"]
            assert token == tok.decode([tok.encode(action, add_special_tokens=False)[0]]) and after > before
            assert not {t for t, _, _ in row["gainers"]} & firsts
            gains = [a - b for _, b, a in row["gainers"]]
            assert gains == sorted(gains, reverse=True)
    # the summary names the steps after which the canonical first tokens held less, and only those
    made_up = {"s": {"up": {"canonical_first": [0.9, 0.95]}, "down": {"canonical_first": [0.9, 0.85]}},
               "t": {"same": {"canonical_first": [0.5, 0.5]}}}
    assert canonical_fell(made_up) == ["s down"]


def test_first_tokens_reads_the_game_from_a_study_recipe_or_the_command_line():
    """`--study` asks a study's checkpoints what they were trained on: the recipe's game and its parameters, as
    the YAML file has them; `--game` and `--study` together, or neither, is a usage error."""
    import yaml

    from benchmarks.first_tokens import FirstTokensConfig, game_of
    from sepo.config.checks import UsageError

    path = ROOT / "configs/experiments/lm_kuhn/study.yaml"
    train = yaml.safe_load(path.read_text())["train"]
    game, params, recipe = game_of(FirstTokensConfig(model="m", study=str(path)))
    assert (game, params) == (train["games"][0], train["game_params"][train["games"][0]])
    assert recipe["train"]["lora_r"] == train["lora_r"]  # the nudges' LoRA is the study's
    assert game_of(FirstTokensConfig(model="m", game=game, game_params='{"num_hands": 2}')) == (
        game, {"num_hands": 2}, None)
    for wrong in (FirstTokensConfig(model="m"), FirstTokensConfig(model="m", game=game, study=str(path))):
        with pytest.raises(UsageError, match="either --game"):
            game_of(wrong)
    # a follow-up that changes the game: its parameters over the study's
    followups = yaml.safe_load(path.read_text())["followups"]
    name = next(n for n, f in followups.items() if f.get("game_params"))
    _, changed, _ = game_of(FirstTokensConfig(model="m", study=str(path), followup=name))
    assert changed == {**params, **followups[name]["game_params"]} and changed != params
    with pytest.raises(UsageError, match="no follow-up 'nope'"):
        game_of(FirstTokensConfig(model="m", study=str(path), followup="nope"))
    with pytest.raises(UsageError, match="--followup needs --study"):
        game_of(FirstTokensConfig(model="m", game=game, followup=name))
