"""The command lines as a new user meets them: mistakes end in one clear line (key, value, allowed range) with
exit status 2 and no traceback; help names the subcommand and lists the project's keys first; recipe paths
resolve against the recipe; `--out` is honoured. Everything runs through the real entry points
(`sepo.cli.main`, `fmsp.cli.main`) and stops before any model is loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fmsp.cli import main as fmsp
from sepo.cli import main as sepo
from sepo.config.recipes import UNDOCUMENTED

REPO = Path(__file__).resolve().parent.parent
TRAIN_RECIPE = str(REPO / "configs" / "sepo" / "ipd_default.yaml")


def not_a_model(tmp_path: Path) -> str:
    """A directory with an empty config.json: it passes the model-path check (a directory without one is
    refused there), and a command that got past its other checks fails at once loading it (instead of
    loading a real model)."""
    (tmp_path / "empty_model").mkdir(exist_ok=True)
    (tmp_path / "empty_model" / "config.json").write_text("{}")
    return str(tmp_path / "empty_model")


def error_of(capsys, rc: int) -> str:
    """The one error line a failed command printed (and that it failed with status 2, without a traceback)."""
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert "Traceback" not in captured.err
    return captured.err


# --- the console scripts ------------------------------------------------------------------------


def test_no_arguments_prints_help_and_exits_2_and_version(capsys):
    assert sepo([]) == 2
    assert "usage: sepo <command>" in capsys.readouterr().err
    assert fmsp([]) == 2
    assert "usage: fmsp <command>" in capsys.readouterr().err
    assert sepo(["--version"]) == 0
    assert capsys.readouterr().out.strip() == "sepo 0.1.0"
    assert sepo(["trian"]) == 2
    assert "unknown command 'trian' (did you mean 'train'?)" in capsys.readouterr().err


def test_usage_error_has_no_traceback_unless_debug(tmp_path):
    """As a console script: one line and status 2; `--debug` shows the traceback."""
    cmd = [sys.executable, "-m", "sepo.cli", "tournament", "--game", "chess"]
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().splitlines()[-1].startswith("sepo tournament: error: unknown game 'chess'")
    for debug in ([*cmd[:3], "--debug", *cmd[3:]], [*cmd, "--debug"]):  # before or after the command
        shown = subprocess.run(debug, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert shown.returncode == 1 and "Traceback" in shown.stderr and "UsageError" in shown.stderr


# --- sepo train: every mistake before a model is loaded -------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max_steps", "0"], "max_steps must be an integer >= 1 (or -1), got 0"),
        (["--num_generations", "1"], "num_generations must be an integer >= 2 (or null), got 1"),
        (["--per_device_train_batch_size", "0"], "per_device_train_batch_size must be an integer >= 1, got 0"),
        (["--max_turn_tokens", "-4"], "max_turn_tokens must be an integer >= 1, got -4"),
        (["--seat", "2"], "seat must be an integer in [0, 1], got 2"),
        (["--top_p", "1.5"], "top_p must be a number in (0, 1], got 1.5"),
        (["--lerning_rate", "1e-5"], "unknown option --lerning_rate (did you mean '--learning_rate'?)"),
        (["--max_steps", "two"], "argument --max_steps/--max-steps: invalid int value: 'two'"),
        (["--games", "chess"], "unknown game 'chess'; choose one of: ipd, auction"),
        (["--games", "ipdd"], "unknown game 'ipdd' (did you mean 'ipd'?)"),
        (["--pool_mix", "{exploitt: 1}"], "unknown pool in pool_mix 'exploitt' (did you mean 'exploit'?)"),
        (["--pool_mix", "{exploit: two}"], "pool_mix['exploit'] must be 'all', a number of groups >= 0"),
        (["--pool_mix", "{training: [always_defect]}"], "not in the 'training' pool of 'ipd'; that pool holds"),
        (["--pool_mix", "{training: [tit_for_tatt]}"], "names ['tit_for_tatt'], which are not in the 'training' pool of 'ipd'"),
        (["--model_name_or_path", "runs/nope/merged"], "model_name_or_path 'runs/nope/merged': no such directory, "
         "and not a hub id"),
    ],
)
def test_train_flags_are_checked_at_parse_time(flags, message, tmp_path, capsys):
    out = tmp_path / "run"
    rc = sepo(["train", "--config", TRAIN_RECIPE, "--model_name_or_path", not_a_model(tmp_path), "--output_dir",
               str(out), *flags])
    err = error_of(capsys, rc)
    assert err.startswith("sepo train: error: ") and message in err
    assert not out.exists()  # nothing trained, nothing written


def test_train_output_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    for path, words in ((tmp_path / "taken", "is a file"), (tmp_path / "taken" / "sub", "lies under")):
        rc = sepo(["train", "--config", TRAIN_RECIPE, "--model_name_or_path", not_a_model(tmp_path), "--output_dir",
                   str(path)])
        assert f"output_dir '{path}' {words}" in error_of(capsys, rc)


def test_recipe_mistakes_name_file_line_and_key(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"model_name_or_path: {not_a_model(tmp_path)}\ngames: [ipd]\nlerning_rate: 1.0e-5\n")
    assert f"{recipe}, line 3: unknown key 'lerning_rate' (did you mean 'learning_rate'?)" in error_of(
        capsys, sepo(["train", "--config", str(recipe)]))
    recipe.write_text("model_name_or_path: x\ngames: [ipd\nmax_steps: 2\n")
    err = error_of(capsys, sepo(["train", "--config", str(recipe)]))
    assert f"{recipe}, line 3, column 10: invalid YAML" in err
    recipe.write_text(f"model_name_or_path: {not_a_model(tmp_path)}\nmax_steps: [2]\n")
    assert f"{recipe}, line 2: max_steps must be an integer, got [2]" in error_of(
        capsys, sepo(["train", "--config", str(recipe)]))
    recipe.write_text(f"model_name_or_path: {not_a_model(tmp_path)}\nsave_strategy: no\n")  # YAML 1.1: `no` is false
    assert "quote the word" in error_of(capsys, sepo(["train", "--config", str(recipe)]))
    assert "recipe 'missing.yaml': no such file" in error_of(capsys, sepo(["train", "--config", "missing.yaml"]))


def test_cpu_falls_back_from_bf16_to_fp32_with_a_warning(tmp_path):
    import torch

    from sepo.grpo.config import SEPOConfig
    from sepo.sft.train import SEPOSFTConfig

    if torch.cuda.is_available():
        pytest.skip("the fallback is for machines without a bf16-capable GPU")
    for config in (SEPOConfig, SEPOSFTConfig):  # a recipe without use_cpu / bf16 keys: TRL defaults bf16 to true
        with pytest.warns(UserWarning, match="no bf16-capable GPU here: training in fp32"):
            args = config(output_dir=str(tmp_path / config.__name__))
        assert args.bf16 is False and args.use_cpu is False


# --- sepo eval, sft, data, tournament -------------------------------------------------------------


def test_eval_model_and_output_paths_are_checked(tmp_path, capsys):
    out = tmp_path / "eval"
    model = not_a_model(tmp_path)
    rc = sepo(["eval", "--models", f"Base={model}", "SFT=runs/nope/merged", "--output_dir", str(out)])
    assert "models 'runs/nope/merged': no such directory, and not a hub id" in error_of(capsys, rc)
    (tmp_path / "file").write_text("x")
    rc = sepo(["eval", "--models", model, "--output_dir", str(tmp_path / "file")])
    assert f"output_dir '{tmp_path / 'file'}' is a file" in error_of(capsys, rc)
    assert "unknown option --episodes (did you mean '--episodes_per_opponent'?)" in error_of(
        capsys, sepo(["eval", "--models", model, "--episodes", "2"]))
    assert not out.exists()


def test_eval_retired_per_game_keys_name_their_new_form(tmp_path, capsys):
    """`<game>_exact` and `<game>_rationale_samples` (one key per game before `exact`, `exact_skip` and
    `rationale_samples` served every game) are refused with the key that replaces them, on the command line
    and in a recipe."""
    from envs.tabular import exact_games

    model = not_a_model(tmp_path)
    for game in exact_games():
        assert f"unknown option --{game}_exact (renamed: use exact_skip: [{game}]" in error_of(
            capsys, sepo(["eval", "--models", model, f"--{game}_exact", "false"]))
        recipe = tmp_path / f"{game}.yaml"
        recipe.write_text(f"models: [{model}]\n{game}_rationale_samples: 2\n")
        assert f"line 2: unknown key '{game}_rationale_samples' (renamed: use rationale_samples)" in error_of(
            capsys, sepo(["eval", "--config", str(recipe)]))



def test_sft_flags_are_checked(tmp_path, capsys):
    base = ["sft", "--config", str(REPO / "configs" / "sft" / "default.yaml"), "--output_dir", str(tmp_path / "o"),
            "--model_name_or_path", not_a_model(tmp_path)]
    assert "lora_r must be an integer >= 1, got 0" in error_of(capsys, sepo([*base, "--lora_r", "0"]))
    assert "episodes_scale must be a number > 0, got -1.0" in error_of(capsys, sepo([*base, "--episodes-scale", "-1"]))
    assert "unknown game 'chess'" in error_of(capsys, sepo([*base, "--game", "chess"]))
    assert "max_steps must be an integer >= 1 (or -1), got 0" in error_of(capsys, sepo([*base, "--max_steps", "0"]))


def test_data_rejects_bad_sizes_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "data"
    rc = sepo(["data", "--games", "ipd", "--out", str(out), "--episodes-scale", "-1"])
    assert "--episodes-scale must be a number > 0, got -1.0" in error_of(capsys, rc)
    rc = sepo(["data", "--games", "ipd", "--out", str(out), "--episodes_scale", "0"])  # both spellings
    assert "--episodes-scale must be a number > 0, got 0.0" in error_of(capsys, rc)
    rc = sepo(["data", "--games", "ipd", "--out", str(out), "--validation-fraction", "1"])
    assert "--validation-fraction must be a number in [0, 1), got 1.0" in error_of(capsys, rc)
    assert "unknown game 'kuhm' (did you mean 'kuhn'?)" in error_of(capsys, sepo(["data", "--games", "ipd,kuhm"]))
    assert not out.exists()
    (tmp_path / "file").write_text("x")
    assert "--out '" in error_of(capsys, sepo(["data", "--games", "ipd", "--out", str(tmp_path / "file")]))


def test_data_samples_go_under_out(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rc = sepo(["data", "--games", "ipd", "kuhn", "--out", "X", "--episodes-scale", "0.005", "--samples", "1"])
    assert rc == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "X" / "samples").iterdir()) == ["ipd.jsonl", "kuhn.jsonl"]
    assert len((tmp_path / "X" / "samples" / "ipd.jsonl").read_text().splitlines()) == 1
    assert not (tmp_path / "sft_data").exists()
    assert json.loads((tmp_path / "X" / "stats.json").read_text())["games"] == ["ipd", "kuhn"]


def test_tournament_accepts_games_spelling(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert sepo(["tournament", "--games", "ipd", "--strategies", "tit_for_tat", "always_defect", "--episodes",
                 "1", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["game"] == "ipd"


# --- fmsp ---------------------------------------------------------------------------------------


def test_fmsp_run_mistakes(tmp_path, capsys):
    recipe = str(REPO / "configs" / "fmsp" / "ipd_qdsp_scripted.yaml")
    out = ["--output_dir", str(tmp_path / "run")]
    assert "argument --iterations: invalid int value: 'two'" in error_of(
        capsys, fmsp(["run", "--config", recipe, *out, "--iterations", "two"]))
    err = error_of(capsys, fmsp(["run", "--config", recipe, *out, "--domain", "chess"]))
    assert "unknown domain 'chess'; choose one of: car_tag, gandalf, ipd" in err
    assert "max_repairs must be an integer >= 0, got -1" in error_of(
        capsys, fmsp(["run", "--config", recipe, *out, "--max_repairs", "-1"]))
    assert "unknown option --iteratons (did you mean '--iterations'?)" in error_of(
        capsys, fmsp(["run", "--config", recipe, *out, "--iteratons", "3"]))
    (tmp_path / "file").write_text("x")
    assert "output_dir '" in error_of(capsys, fmsp(["run", "--config", recipe, "--output_dir", str(tmp_path / "file")]))
    (tmp_path / "held" / "state.json").parent.mkdir()
    (tmp_path / "held" / "state.json").write_text("{}")
    assert f"output_dir '{tmp_path / 'held'}' already holds a run; pass --resume true" in error_of(
        capsys, fmsp(["run", "--config", recipe, "--output_dir", str(tmp_path / "held"), "--resume", "false"]))
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: ipd\nvariant: [qdsp\n")
    assert f"{bad}, line 3, column 1: invalid YAML" in error_of(capsys, fmsp(["run", "--config", str(bad)]))
    assert not (tmp_path / "run").exists()


def test_fmsp_recipe_paths_resolve_against_the_recipe(tmp_path, monkeypatch):
    from fmsp.config import FMSPConfig
    from fmsp.run import build_fm
    from sepo.config.recipes import parse_config

    recipe = REPO / "configs" / "fmsp" / "ipd_qdsp_scripted.yaml"
    monkeypatch.chdir(tmp_path)  # not the repository
    (config,) = parse_config((FMSPConfig,), ["--config", str(recipe)], prog="fmsp run")
    assert Path(config.fm_policies_path).resolve() == (REPO / "configs" / "fmsp" / "scripted" / "ipd").resolve()
    assert build_fm(config).get_state() is not None  # the scripted double found its policy files
    (tmp_path / "mine").mkdir()  # on the command line a path is relative to the working directory
    (config,) = parse_config((FMSPConfig,), ["--config", str(recipe), "--fm_policies_path", "mine"], prog="fmsp run")
    assert config.fm_policies_path == "mine"


def test_fmsp_eval_sizes_are_checked(tmp_path, capsys):
    base = ["eval", "--run", str(tmp_path), "--out", str(tmp_path / "eval")]
    assert "--bootstrap must be an integer >= 20, got 0" in error_of(capsys, fmsp([*base, "--bootstrap", "0"]))
    assert "--cells must be an integer >= 1, got 0" in error_of(capsys, fmsp([*base, "--cells", "0"]))
    (tmp_path / "file").write_text("x")
    assert "--out '" in error_of(capsys, fmsp(["eval", "--run", str(tmp_path), "--out", str(tmp_path / "file")]))
    assert not (tmp_path / "eval").exists()


# --- help ---------------------------------------------------------------------------------------


def _parsers():
    """Every command's parser, built the way its main() builds it."""
    import importlib

    from fmsp.config import FMSPConfig
    from fmsp.evaluation import parser as fmsp_eval_parser
    from fmsp.export import parser as fmsp_export_parser
    from sepo.config.recipes import RecipeParser
    from sepo.eval.tournament import parser as tournament_parser
    from sepo.grpo.config import SEPOConfig
    from sepo.lora import SEPOModelConfig as ModelConfig
    from sepo.sft.data import parser as data_parser
    from sepo.sft.train import SEPOSFTConfig

    parsers = {
        "sepo train": RecipeParser((SEPOConfig, ModelConfig), prog="sepo train"),
        "sepo sft": RecipeParser((SEPOSFTConfig,), prog="sepo sft"),
        "fmsp run": RecipeParser((FMSPConfig,), prog="fmsp run"),
        "sepo data": data_parser(),
        "sepo tournament": tournament_parser(),
        "fmsp eval": fmsp_eval_parser(),
        "fmsp export": fmsp_export_parser(),
    }
    return parsers | {command: importlib.import_module(spec[2]).parser() for command, spec in COMMANDS.items()}


def test_every_option_has_a_description_and_one_default():
    for name, parser in _parsers().items():
        for action in parser._actions:
            assert action.help and action.help.strip() and action.help != UNDOCUMENTED, (name, action.option_strings)
        text = parser.format_help()
        assert text.startswith(f"usage: {name} "), name
        blocks = text.split("\n  -")  # one block per option
        assert all(block.count("(default") <= 1 for block in blocks), name  # never "(default: a) (default: b)"


def test_train_help_shows_sepo_keys_first(capsys, monkeypatch):
    # transformers prints "[INFO] Running in WANDB offline mode" to stdout when its integrations module is first
    # imported with WANDB_MODE=offline (as CI sets it); that third-party line is not what this test is about
    monkeypatch.delenv("WANDB_MODE", raising=False)
    with pytest.raises(SystemExit) as exit_:
        sepo(["train", "--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "usage: sepo train [--config RECIPE.yaml] [--key value ...]"
    first_screen = "\n".join(lines[:60])
    assert "--config RECIPE.yaml" in first_screen and "SEPOConfig options:" in first_screen
    for key in ("--games", "--pool_mix", "--credit", "--max_turn_tokens"):
        assert key in first_screen, key
    text = "\n".join(lines)
    assert text.index("SEPOConfig options:") < text.index("trl.ModelConfig options:") < text.index(
        "trl.GRPOConfig / transformers.TrainingArguments options:")
    assert "--no_fallback set fallback to false (same as --fallback false)" in " ".join(text.split())


def test_eval_help_prints_each_default_once(capsys):
    """EvalConfig is documented by `sepo eval`'s own module; add "sepo eval" to `_parsers` once every key has a
    description."""
    with pytest.raises(SystemExit):
        sepo(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: sepo eval [--config RECIPE.yaml]")
    assert "--dtype STR model dtype, e.g. bfloat16 (default: as saved) --" in text  # not "... (default: None)"
    assert "--no_exact set exact to false (same as --exact false)" in text
    assert "--episodes_per_opponent INT episodes per (pool, opponent), >= 1 (default: 16)" in text


def test_fmsp_run_help_lists_config_keys(capsys):
    with pytest.raises(SystemExit):
        fmsp(["run", "--help"])
    text = capsys.readouterr().out
    assert text.startswith("usage: fmsp run [--config RECIPE.yaml]")
    assert "--iterations INT" in text and "(default: 20)" in text and "--fm_policies_path STR" in text


def test_model_card_names_the_base_model(tmp_path):
    from trl.trainer.utils import generate_model_card

    from sepo.export.card import EMBEDDED_HUB_ID, name_base_model

    card = generate_model_card(base_model=None, model_name="m", hub_model_id="m", dataset_name=None, tags=[],
                               wandb_url=None, trackio_url=None, trainer_name="GRPO")
    path = tmp_path / "README.md"
    path.write_text(str(card))
    assert "fine-tuned version of [None]" in path.read_text()  # what TRL writes for a local checkpoint
    assert name_base_model(path, "default")
    text = path.read_text()
    assert f"fine-tuned version of [{EMBEDDED_HUB_ID}](https://huggingface.co/{EMBEDDED_HUB_ID})" in text
    assert f"base_model: {EMBEDDED_HUB_ID}" in text and "[None]" not in text
    path.write_text(str(card))
    assert name_base_model(path, str(tmp_path))
    assert f"fine-tuned version of the local checkpoint `{tmp_path}`" in path.read_text()
    assert not name_base_model(path, "default")  # nothing left to replace


# --- one name per concept -------------------------------------------------------------------------


def test_pool_dir_is_the_one_name_and_pools_dir_a_warning_alias(tmp_path):
    """`pool_dir` for sepo train and sepo eval; `pools_dir` (eval's old name) still works, in a recipe and
    on the command line, with a FutureWarning naming the new key."""
    from trl import ModelConfig

    from sepo.config.recipes import parse_config
    from sepo.eval.config import EvalConfig
    from sepo.grpo.config import SEPOConfig

    out = ["--output_dir", str(tmp_path / "o")]
    for types in ((EvalConfig,), (SEPOConfig, ModelConfig)):
        assert parse_config(types, ["--pool_dir", "pools/x", *out], prog="p")[0].pool_dir == "pools/x"
        with pytest.warns(FutureWarning, match=r"command line: --pools_dir is deprecated, use --pool_dir"):
            assert parse_config(types, ["--pools_dir", "pools/y", *out], prog="p")[0].pool_dir == "pools/y"
        recipe = tmp_path / "r.yaml"
        recipe.write_text("pools_dir: pools/z\n")
        with pytest.warns(FutureWarning, match=rf"{recipe}, line 1: pools_dir is deprecated, use pool_dir"):
            assert parse_config(types, ["--config", str(recipe), *out], prog="p")[0].pool_dir == "pools/z"
    assert "pools_dir" in EvalConfig(pool_dir="d").play_settings()  # the stored name: old evaluations resume


def test_torch_threads_on_every_command_that_runs_a_model(tmp_path):
    from trl import ModelConfig

    from fmsp.config import FMSPConfig
    from sepo.config.recipes import parse_config
    from sepo.eval.config import EvalConfig
    from sepo.grpo.config import SEPOConfig
    from sepo.sft.train import SEPOSFTConfig

    out = ["--output_dir", str(tmp_path / "o")]
    for types in ((SEPOConfig, ModelConfig), (SEPOSFTConfig,), (EvalConfig,), (FMSPConfig,)):
        assert parse_config(types, ["--torch_threads", "1", *out], prog="p")[0].torch_threads == 1
        with pytest.raises(ValueError, match="torch_threads must be an integer >= 1"):
            parse_config(types, ["--torch_threads", "0", *out], prog="p")


def test_prepare_machine_sets_threads_and_the_wandb_directory(tmp_path, monkeypatch):
    """One rule for wandb's files (train, sft, eval, fmsp run): $WANDB_DIR when the user set it, else the
    run's output_dir; and torch_threads reaches torch."""
    from types import SimpleNamespace

    import torch

    from sepo.config.recipes import prepare_machine, wandb_dir

    monkeypatch.delenv("WANDB_DIR", raising=False)
    threads = torch.get_num_threads()
    try:
        prepare_machine(SimpleNamespace(torch_threads=1, report_to=["wandb"], output_dir=str(tmp_path / "a")))
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(threads)
    assert wandb_dir(tmp_path / "a") == str(tmp_path / "a") and (tmp_path / "a").is_dir()
    import os

    assert os.environ["WANDB_DIR"] == str(tmp_path / "a")
    prepare_machine(SimpleNamespace(torch_threads=None, report_to=["wandb"], output_dir=str(tmp_path / "b")))
    assert os.environ["WANDB_DIR"] == str(tmp_path / "b")  # the next run (a study arm) gets its own
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "mine"))
    assert wandb_dir(tmp_path / "c") == str(tmp_path / "mine")


def test_prepare_machine_takes_the_loaded_objects_out_of_later_collections(tmp_path):
    """After `prepare_machine` (sepo train / sft; sepo eval calls `freeze_loaded_objects` itself) the objects
    alive at that point (the libraries) are in the permanent generation: a full collection during a rollout
    no longer walks them (it took ~240 ms a time with transformers loaded), and garbage made later is still
    collected."""
    import gc
    from types import SimpleNamespace

    from sepo.config.recipes import prepare_machine

    gc.unfreeze()  # what an earlier test's prepare_machine froze is walked again, as in a fresh process
    gc.collect()
    before = len(gc.get_objects(generation=2))
    try:
        prepare_machine(SimpleNamespace(torch_threads=None, report_to=[], output_dir=str(tmp_path)))
        assert before > 10_000 and len(gc.get_objects(generation=2)) < before / 100
        assert gc.get_freeze_count() >= before
        cycle: list = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # later garbage is collected as before
    finally:
        gc.unfreeze()


# --- start-up: mistakes reported before TRL is imported ---------------------------------------------

QUICK_MISTAKES = [  # (command line, the start of the message)
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--learnin_rate", "1"], "unknown option --learnin_rate"),
    (["sft", "--config", "configs/sft/default.yaml", "--max-step", "2"], "unknown option --max-step"),
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--max_steps", "0"], "max_steps must be an integer"),
    (["sft", "--learning_rate=-1"], "learning_rate must be a number >= 0"),
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--top_p", "2"], "top_p must be a number in (0, 1]"),
    (["sft", "--model_name_or_path", "no/such/dir"], "model_name_or_path 'no/such/dir': no such directory"),
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--output_dir", "README.md"], "output_dir 'README.md' is a file"),
    (["tiny-model", "--ot", "x"], "unknown option --ot (did you mean '--out'?)"),
    (["train", "--config", "no/such.yaml"], "recipe 'no/such.yaml': no such file"),
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--model_name_or_path", "default", "--games", "chess"],
     "unknown game 'chess'; choose one of: ipd"),
    (["sft", "--model_name_or_path", "docs"], "model_name_or_path 'docs' is a directory but not a model"),
    (["train", "--config", "configs/sepo/ipd_default.yaml", "--model_name_or_path", "docs"],
     "model_name_or_path 'docs' is a directory but not a model"),
]  # fmt: skip


def test_mistakes_are_reported_before_trl_or_torch_is_imported(tmp_path):
    """Each mistake gets the full parser's message (computed below, in this process) from a process that
    never imported trl, transformers or torch; a recipe key typo names the recipe's line."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("games: [ipd]\nnum_generation: 4\n")
    mistakes = [*QUICK_MISTAKES, (["train", "--config", str(recipe)], f"{recipe}, line 2: unknown key 'num_generation'")]
    code = ("import json, sys\nfrom sepo.cli import main\nout = []\nfor argv in json.loads(sys.argv[1]):\n"
            "    out.append([main(argv), [m for m in ('trl', 'transformers', 'torch') if m in sys.modules]])\n"
            "print(json.dumps(out))\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([m for m, _ in mistakes])], cwd=REPO,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    results, lines = json.loads(proc.stdout), proc.stderr.strip().splitlines()
    assert len(lines) == len(mistakes)
    for (argv, start), (rc, imported), line in zip(mistakes, results, lines):
        assert rc == 2 and imported == [], (argv, imported)
        prefix = f"sepo {argv[0]}: error: "
        assert line.startswith(prefix + start), (argv, line)
        assert line == prefix + _full_parser_error(argv), argv  # the full parser (imports trl) says the same


STUDY_TYPOS = [  # (the recipe's line, its misspelling, the message's end)
    ("  beta: 0.1", "  betta: 0.1", "unknown key 'betta' in its train block (did you mean 'beta'?)"),
    ("    per_device_train_batch_size: 12", "    per_device_train_batchsize: 12",
     "unknown key 'per_device_train_batchsize' in arm 'per_pool' (did you mean 'per_device_train_batch_size'?)"),
    ("  episodes_per_opponent: 2", "  episode_per_opponent: 2",
     "unknown key 'episode_per_opponent' in its eval block (did you mean 'episodes_per_opponent'?)"),
    ("eval_base: true", "evalbase: true", "unknown key 'evalbase' in the study recipe (did you mean 'eval_base'?)"),
]


def test_study_recipe_typos_are_reported_before_trl_is_imported(tmp_path):
    """A misspelt key anywhere in a study recipe (its own keys, the train block, an arm, the eval block) is a
    one-line error naming its line, from a process that never imported trl, transformers or torch; the
    committed study recipes pass; and the study's own arm builder (which imports TRL) rejects the same key."""
    from sepo.study.config import StudyConfig, arm_configs

    source = (REPO / "configs" / "study" / "ipd_default.yaml").read_text()
    argvs, expected = [], []
    for i, (line, typo, end) in enumerate(STUDY_TYPOS):
        assert source.count(f"\n{line}") == 1, line
        recipe = tmp_path / f"typo{i}.yaml"
        recipe.write_text(source.replace(f"\n{line}", f"\n{typo}"))
        number = next(n for n, text in enumerate(recipe.read_text().splitlines(), 1) if text.startswith(typo))
        argvs.append(["study", "--config", str(recipe)])
        expected.append(f"sepo study: error: {recipe}, line {number}: {end}")
    argvs += [["study", "--config", str(p), "--arms", "x"] for p in sorted((REPO / "configs" / "study").glob("*.yaml"))]
    code = ("import json, sys\nfrom sepo.config.recipe_keys import check\nout = []\nfor argv in json.loads(sys.argv[1]):\n"
            "    try:\n        check('sepo', argv[0], argv[1:])\n        out.append('ok')\n"
            "    except ValueError as exc:\n        out.append(f'sepo study: error: {exc}')\n"
            "print(json.dumps([out, [m for m in ('trl', 'transformers', 'torch') if m in sys.modules]]))\n")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(argvs)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out, imported = json.loads(proc.stdout)
    assert imported == [] and out == expected + ["ok"] * (len(argvs) - len(expected))
    for i, (_, typo, _) in enumerate(STUDY_TYPOS):  # the slow path names the same key
        key = typo.split(":")[0].strip()
        with pytest.raises(ValueError, match=key):
            cfg = StudyConfig.from_yaml(tmp_path / f"typo{i}.yaml")
            for arm in cfg.arms:
                arm_configs(cfg, arm, cfg.seeds[0])


def _full_parser_error(argv: list[str]) -> str:
    """What `sepo train` / `sepo sft` / `sepo tiny-model` report for `argv` without the quick check (their own
    parse and checks)."""
    from sepo.config.models import check_model
    from sepo.config.recipes import parse_config
    from sepo.grpo.train import parse as train_parse
    from sepo.sft.train import SEPOSFTConfig
    from sepo.tiny_models import parser as tiny_model_parser

    try:
        if argv[0] == "train":
            train_parse(argv[1:])
        elif argv[0] == "tiny-model":
            tiny_model_parser().parse(argv[1:])
        else:
            (config,) = parse_config((SEPOSFTConfig,), argv[1:], prog="sepo sft")
            check_model("model_name_or_path", config.model_name_or_path)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"the full parser accepts {argv}")


def test_the_quick_check_knows_every_key_of_the_full_parsers():
    """sepo.config.recipe_keys' key lists (the project's source + upstream_keys.json) against the live parsers: the
    same recipe keys, and every option the full parser accepts (so it never rejects a valid flag)."""
    from trl import ModelConfig

    from sepo.config import recipe_keys
    from sepo.config.recipes import RecipeParser
    from sepo.grpo.config import SEPOConfig
    from sepo.sft.train import SEPOSFTConfig
    from sepo.tiny_models import TinyModelConfig

    assert recipe_keys.upstream_keys() == recipe_keys.live_upstream_keys(), (
        "TRL's keys changed: run `python -m sepo.config.recipe_keys` to rewrite sepo/config/upstream_keys.json")
    for command, types in (("train", (SEPOConfig, ModelConfig)), ("sft", (SEPOSFTConfig,)),
                           ("tiny-model", (TinyModelConfig,))):
        parser = RecipeParser(types, prog=command)
        keys, deprecated, options = recipe_keys.command_keys(command)
        assert keys == set(parser._hints) and deprecated == parser._renamed, command
        live = {o[2:].replace("-", "_") for a in parser._actions for o in a.option_strings if o.startswith("--")}
        assert live <= options, (command, sorted(live - options))


def test_yaml_flow_without_spaces_is_a_clear_error(tmp_path, capsys):
    """`{ipd:{num_rounds:8}}` is YAML for the key 'num_rounds:8' with no value; say so instead of failing
    later with "unexpected keyword argument 'num_rounds:8'"."""
    from sepo.config.recipes import parse_config
    from sepo.eval.config import EvalConfig

    err = error_of(capsys, sepo(["eval", "--game_params", "{ipd:{num_rounds:8}}", "--output_dir", str(tmp_path)]))
    assert "argument --game_params/--game-params: '{ipd:{num_rounds:8}}' reads 'num_rounds:8' as one key with " \
           "no value: YAML flow needs a space after each colon ('{num_rounds: 8}'), or write JSON" in err
    recipe = tmp_path / "r.yaml"
    recipe.write_text("games: [ipd]\ngame_params: {ipd: {num_rounds:8}}\n")
    with pytest.raises(ValueError, match=rf"{recipe}, line 2: game_params reads 'num_rounds:8' as one key"):
        parse_config((EvalConfig,), ["--config", str(recipe)], prog="sepo eval")
    (cfg,) = parse_config((EvalConfig,), ["--game_params", "{ipd: {num_rounds: 8}}"], prog="sepo eval")
    assert cfg.game_params == {"ipd": {"num_rounds": 8}}
    (cfg,) = parse_config((EvalConfig,), ["--game_params", '{"ipd":{"num_rounds":8}}'], prog="sepo eval")
    assert cfg.game_params == {"ipd": {"num_rounds": 8}}  # JSON needs no spaces


def test_quickstart_help_states_its_measured_duration(capsys):
    with pytest.raises(SystemExit):
        sepo(["quickstart", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "in minutes" not in text and "about 10 min on 2 idle cores" in text  # benchmarks/quickstart/full: 9.1


# --- every command reads its keys the same way (RecipeParser) -------------------------------------

def _levels(argv: list[str]) -> int:
    """`python -m fmsp.gandalf_levels` as its `__main__` runs it."""
    from fmsp.gandalf_levels import PROG, main
    from sepo.config.subcommands import report_usage_errors

    return report_usage_errors(PROG, lambda: main(argv))


def _curves(argv: list[str]) -> int:
    """`python -m sepo.study.curves` as its `__main__` runs it."""
    from sepo.config.subcommands import report_usage_errors
    from sepo.study.curves import main

    return report_usage_errors("python -m sepo.study.curves", lambda: main(argv))


# command -> (its entry point, the arguments that name it, its parser's module, a misspelt flag, the flag meant,
# a recipe of its keys ({tmp}: the test's directory), what that recipe must give)
COMMANDS = {
    "sepo data": (sepo, ["data"], "sepo.sft.data", "--seeed", "--seed",
                  "games: [kuhn]\nseed: 3\nepisodes_scale: 0.5\nout: {tmp}/d\n",
                  {"games": ["kuhn"], "seed": 3, "episodes_scale": 0.5, "out": "{tmp}/d"}),
    "sepo tournament": (sepo, ["tournament"], "sepo.eval.tournament", "--episods", "--episodes",
                        "game: ipd\nepisodes: 2\nstrategies: [tit_for_tat, always_defect]\n",
                        {"game": "ipd", "episodes": 2, "strategies": ["tit_for_tat", "always_defect"]}),
    "sepo quickstart": (sepo, ["quickstart"], "sepo.quickstart", "--scal", "--scale",
                        "scale: ci\nout: {tmp}/q\nrecord: ''\n", {"scale": "ci", "out": "{tmp}/q", "record": ""}),
    "sepo tiny-model": (sepo, ["tiny-model"], "sepo.tiny_models", "--arh", "--arch",
                        "out: {tmp}/m\narch: gemma4\nseed: 2\n", {"out": "{tmp}/m", "arch": "gemma4", "seed": 2}),
    "sepo study": (sepo, ["study"], "sepo.study.run", "--retrian", "--retrain", None, None),
    "sepo export": (sepo, ["export"], "sepo.export.run", "--keep_adaptor", "--keep_adapter",
                    "run: r\nout: {tmp}/x\nkeep_adapter: true\npush_to_hub: org/name\n",
                    {"run": "r", "out": "{tmp}/x", "keep_adapter": True, "push_to_hub": "org/name"}),
    "fmsp eval": (fmsp, ["eval"], "fmsp.evaluation", "--cels", "--cells",
                  "runs: [a=x, y]\nout: {tmp}/e\ntop: 1\ndomain_config: {{n_games: 2}}\n",
                  {"runs": ["a=x", "y"], "out": "{tmp}/e", "top": 1, "domain_config": {"n_games": 2}}),
    "fmsp export": (fmsp, ["export"], "fmsp.export", "--prefx", "--prefix",
                    "run: r\npool: exploit\ngame: ipd\nout: {tmp}/p\nselect: top:1\n",
                    {"run": "r", "pool": "exploit", "game": "ipd", "out": "{tmp}/p", "select": "top:1"}),
    "fmsp match": (fmsp, ["match"], "fmsp.match", "--timout", "--timeout",
                   "domain: car_tag\na: p.py\nb: q.py\njson: {tmp}/m.json\ngames: 3\n",
                   {"domain": "car_tag", "a": "p.py", "b": "q.py", "json": "{tmp}/m.json", "games": 3}),
    "python -m fmsp.gandalf_levels": (_levels, [], "fmsp.gandalf_levels", "--ot", "--out",
                                              "runs: [x]\nout: {tmp}/l\n", {"runs": ["x"], "out": "{tmp}/l"}),
    "python -m sepo.study.curves": (_curves, [], "sepo.study.curves", "--titel", "--title",
                                         "study: s\nout: {tmp}/c\ngame: ipd\n",
                                         {"study": "s", "out": "{tmp}/c", "game": "ipd"}),
}  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS)
def test_a_misspelt_flag_is_one_line_with_did_you_mean(command, capsys):
    entry, name, _, typo, meant, _, _ = COMMANDS[command]
    err = error_of(capsys, entry([*name, typo, "1"]))
    assert err.strip() == f"{command}: error: unknown option {typo} (did you mean '{meant}'?); `{command} --help` " \
                          "lists the options"  # fmt: skip


@pytest.mark.parametrize("command", [c for c, spec in COMMANDS.items() if spec[5] is not None])
def test_a_recipe_of_flat_keys_sets_the_keys_and_a_misspelt_key_names_its_line(command, tmp_path, capsys):
    import importlib

    entry, name, module, typo, meant, text, expected = COMMANDS[command]
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(text.format(tmp=tmp_path))
    (config,) = importlib.import_module(module).parser().parse(["--config", str(recipe)])
    for key, value in expected.items():
        assert getattr(config, key) == (value.format(tmp=tmp_path) if isinstance(value, str) else value), key
    recipe.write_text(text.format(tmp=tmp_path) + f"{typo[2:]}: 1\n")
    line = len(recipe.read_text().splitlines())
    assert error_of(capsys, entry([*name, "--config", str(recipe)])).strip() == \
        f"{command}: error: {recipe}, line {line}: unknown key '{typo[2:]}' (did you mean '{meant[2:]}'?)"


def test_a_run_flag_may_be_repeated_and_replaces_the_recipes_runs(tmp_path):
    """`fmsp eval --run a --run b` as before (argparse's append), `--run a b` too, and on top of a recipe the
    command line's runs replace the recipe's (as every other key)."""
    from fmsp.evaluation import parser

    out = ["--out", str(tmp_path / "e")]
    assert parser().parse(["--run", "a=x", "--run", "y", *out])[0].runs == ["a=x", "y"]
    assert parser().parse(["--run", "a=x", "y", *out])[0].runs == ["a=x", "y"]
    recipe = tmp_path / "r.yaml"
    recipe.write_text("runs: [p, q]\n")
    assert parser().parse(["--config", str(recipe), *out])[0].runs == ["p", "q"]
    assert parser().parse(["--config", str(recipe), "--run", "z", "--run", "w", *out])[0].runs == ["z", "w"]


def test_an_unknown_flag_is_named_before_a_missing_required_one(capsys):
    err = error_of(capsys, fmsp(["export", "--rnu", "x"]))
    assert "unknown option --rnu (did you mean '--run'?)" in err and "required" not in err


def test_study_config_is_its_recipe_not_a_recipe_of_its_flags(capsys):
    """`sepo study --config` names the study recipe (StudyConfig), as before: its parser reads no flat recipe."""
    from sepo.study.run import parser

    (ns,) = parser().parse(["--config", "configs/study/ipd_default.yaml", "--arms", "shared"])
    assert (ns.config, ns.arms, ns.report_only) == ("configs/study/ipd_default.yaml", "shared", False)
    assert "the following arguments are required: --config" in error_of(capsys, sepo(["study"]))


def test_an_unrelated_flag_gets_no_suggestion(capsys):
    """The shared leading dashes do not make two options alike: `--no_such_key` is not `--rng_key`."""
    err = error_of(capsys, sepo(["train", "--config", "configs/sepo/ipd_default.yaml", "--no_such_key", "1"]))
    assert err.strip() == "sepo train: error: unknown option --no_such_key; `sepo train --help` lists the options"


def test_tiny_model_help_says_what_it_makes_in_whole(capsys):
    with pytest.raises(SystemExit):
        sepo(["tiny-model", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "a tiny random-weight model for a smoke test of a setup (every stage runs on it in seconds; its play " \
           "is noise)" in text  # fmt: skip


def test_quickstart_records_in_benchmarks_only_when_asked(tmp_path):
    """A user's `sepo quickstart` writes under --out alone (tracked files stay as they are); `--record DIR` is
    the explicit choice that records the figures (make figures-quickstart)."""
    from sepo.quickstart import parser, record_dir

    (args,) = parser().parse(["--scale", "ci", "--out", str(tmp_path / "q")])
    assert record_dir(args) is None
    (args,) = parser().parse(["--scale", "ci", "--record", "benchmarks/quickstart/ci"])
    assert record_dir(args) == Path("benchmarks/quickstart/ci")


def test_quickstart_ci_scale_plays_every_opponent_of_every_pool(tmp_path):
    """Safety J needs every pool's term (λe, λc, λx are all non-zero): the CI scale's evaluation (stage 3), as
    `sepo eval` parses its recipe and overrides, plays at least one episode against every opponent of every
    pool of every game; stage 4 (the answer format) may play fewer."""
    from sepo.config.recipes import parse_config
    from sepo.eval.config import EvalConfig
    from sepo.eval.episodes import units
    from sepo.pools import POOL_NAMES, load_pools
    from sepo.quickstart import _recipe, parser, stage_overrides

    (args,) = parser().parse(["--scale", "ci", "--out", str(tmp_path / "q")])
    argv = ["--config", _recipe("eval"), "--output_dir", str(tmp_path / "e"), "--models", "M=m",
            *stage_overrides(args)["eval"]]
    (cfg,) = parse_config((EvalConfig,), argv, prog="sepo eval")
    assert cfg.episodes_per_opponent >= 1
    for game in cfg.games:
        pools = load_pools(game)
        played = {(u.pool, u.opponent) for u in units(game, pools, cfg.pools)}
        assert played == {(pool, name) for pool in POOL_NAMES for name in pools.names(pool)}


def test_quickstart_passes_the_thread_count_to_every_stage(capsys):
    """`--torch_threads N` reaches the SFT, GRPO and evaluation stages (stage 4 inherits stage 3's); a count
    below 1 is a one-line error before anything runs."""
    from sepo.quickstart import parser, stage_overrides

    (args,) = parser().parse(["--scale", "ci", "--torch_threads", "1"])
    stages = stage_overrides(args)
    for stage in ("sft", "sepo", "eval"):
        assert stages[stage][-2:] == ["--torch_threads", "1"], stage
    (args,) = parser().parse(["--scale", "ci"])
    assert not any("--torch_threads" in extra for extra in stage_overrides(args).values())
    assert sepo(["quickstart", "--torch_threads", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torch_threads" in err[0]
