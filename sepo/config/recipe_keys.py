"""Unknown keys caught before TRL is imported: the first check of `sepo train`, `sepo sft`, `sepo study` (and
`sepo tiny-model`).

Their configs subclass TRL's (`SEPOConfig(GRPOConfig)`, `SEPOSFTConfig(SFTConfig)`), so building their parser
imports trl, transformers' Trainer, peft and torch: 8 s on a loaded 2-core machine (`python -X importtime`),
before a misspelt flag can be named. This module knows every key without importing any of them: the project's
own fields are read from its source with `ast`, TRL's and transformers' from `upstream_keys.json`, a list
written for the installed trl / transformers versions (`python -m sepo.config.recipe_keys` rewrites it; a test checks
it against the live classes). When the installed versions differ from the list's, the check steps aside and
the full parser (`sepo.config.recipes`) reports everything, as before. It rejects, in the words the full parser would
use: unknown keys and options, numbers outside the ranges the config declares (its `*_RANGES` table, read from
the same source), an output_dir that is a file, and a model that is neither `default`, a directory nor a hub id.
For `sepo study` it checks the recipe's own keys, its `train` block's and every arm's (`sepo train` keys) and
its `eval` block's, naming the recipe's line; the study's arm builder rejects the same keys when it runs.
Whatever it cannot judge (types, choices, pools) is left to the full parser.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import yaml

import sepo.config.checks
from envs import GAMES
from sepo.config.checks import UsageError, check_names, check_output_dir, check_recipe_file, did_you_mean
from sepo.config.models import check_model
from sepo.config.provenance import PROVENANCE_KEY

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_FILE = Path(__file__).with_name("upstream_keys.json")
UPSTREAM_PACKAGES = ("trl", "transformers")
GENERAL_OPTIONS = {"config", "debug", "help"}  # every RecipeParser's own

# command -> (the project's own config classes as (source file, class), TRL's classes its parser also reads,
# the (source file, name) of the ranges table the config checks, if any). `sepo tiny-model` is here because
# its module imports torch at the top (its functions' signatures use torch.dtype): 6 s before a typo is named.
COMMANDS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[str, str] | None]] = {
    "train": ((("sepo/grpo/config.py", "SEPOConfig"), ("sepo/lora.py", "SEPOModelConfig")), ("GRPOConfig", "ModelConfig"),
              ("sepo/grpo/config.py", "SEPO_RANGES")),
    "sft": ((("sepo/sft/train.py", "SEPOSFTConfig"),), ("SFTConfig",), ("sepo/sft/train.py", "SFT_RANGES")),
    "tiny-model": ((("sepo/tiny_models.py", "TinyModelConfig"),), (), None),
}  # fmt: skip


@cache
def own_keys(path: str, class_name: str) -> tuple[frozenset[str], dict[str, str], frozenset[str], frozenset[str]]:
    """(fields, _DEPRECATED_KEYS, list fields, booleans defaulting to true) of `class_name` as written in
    `path` (annotated class attributes; private names are class constants, not fields)."""
    tree = ast.parse((ROOT / path).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    fields, lists, true_bools, deprecated = set(), set(), set(), {}
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            name, annotation = item.target.id, ast.unparse(item.annotation)
            if not name.startswith("_"):
                fields.add(name)
                if annotation.startswith("list["):
                    lists.add(name)
                if annotation.startswith("bool") and _default(item.value) is True:
                    true_bools.add(name)
        elif isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "_DEPRECATED_KEYS" for t in item.targets):
            deprecated = ast.literal_eval(item.value)
    return frozenset(fields), deprecated, frozenset(lists), frozenset(true_bools)


def _default(value: ast.expr | None) -> object:
    """The literal default of `name: T = value` or `= field(default=value, ...)`; None when not a literal."""
    if isinstance(value, ast.Call):
        value = next((k.value for k in value.keywords if k.arg == "default"), None)
    try:
        return ast.literal_eval(value) if value is not None else None
    except ValueError:
        return None


def installed_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in UPSTREAM_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def upstream_keys() -> dict[str, dict[str, list[str]]] | None:
    """TRL's classes' keys from upstream_keys.json, or None when the installed versions are not the list's."""
    if not UPSTREAM_FILE.is_file():
        return None
    data = json.loads(UPSTREAM_FILE.read_text())
    return data["classes"] if data["versions"] == installed_versions() else None


def live_upstream_keys() -> dict[str, dict[str, list[str]]]:
    """For every TRL class `COMMANDS` names: its keys and the option names its parser adds (without `--`,
    `_` spelling), from the classes themselves (imports trl)."""
    # deferred: trl and sepo.config.recipes (transformers' argument parser) take seconds to import; this module exists
    # so that the quick check runs without them, and only the key-list refresh and its test call this function
    import trl

    from sepo.config.recipes import RecipeParser

    out = {}
    for name in sorted({n for _, upstream, _ in COMMANDS.values() for n in upstream}):
        cls = getattr(trl, name)
        parser = RecipeParser([cls], prog=name)
        options = {o[2:].replace("-", "_") for a in parser._actions for o in a.option_strings if o.startswith("--")}
        out[name] = {"keys": sorted(f.name for f in dataclasses.fields(cls) if f.init),
                     "options": sorted(options - GENERAL_OPTIONS)}  # fmt: skip
    return out


def write_upstream_keys() -> Path:
    data = {"versions": installed_versions(), "classes": live_upstream_keys()}
    UPSTREAM_FILE.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return UPSTREAM_FILE


def command_keys(command: str) -> tuple[set[str], dict[str, str], set[str]] | None:
    """(keys, deprecated names, option names) of a command's parser, or None when they are not known here."""
    if command not in COMMANDS:
        return None
    own, classes, _ = COMMANDS[command]
    upstream = upstream_keys() if classes else {}
    if upstream is None:
        return None
    keys, deprecated, options = set(), {}, set()
    for path, class_name in own:
        fields, renamed, _, _ = own_keys(path, class_name)
        keys |= fields
        deprecated.update(renamed)
    for name in classes:
        keys |= set(upstream[name]["keys"])
        options |= set(upstream[name]["options"])
    options |= own_options(own) | set(deprecated) | GENERAL_OPTIONS
    return keys, deprecated, options


def own_options(own: tuple[tuple[str, str], ...]) -> set[str]:
    """The project's own keys as options: each key, `no_<key>` for a boolean that defaults to true (as
    HfArgumentParser adds), and the singular of a list key (`game` for `games`)."""
    options: set[str] = set()
    for path, class_name in own:
        fields, _, lists, true_bools = own_keys(path, class_name)
        options |= fields | {f"no_{k}" for k in true_bools} | {k[:-1] for k in lists if k.endswith("s")}
    return options


def _spellings(names: set[str]) -> list[str]:
    return sorted({f"--{n}" for n in names} | {f"--{n.replace('_', '-')}" for n in names})


def check(prog: str, command: str, argv: list[str]) -> None:
    """Raise the full parser's UsageError for the first unknown recipe key or option of `argv`; do nothing
    when the keys are not known here or when help is asked for. `study` has its own check (`check_study`)."""
    if any(token in ("-h", "--help") for token in argv):
        return
    if command == "study":
        check_study(prog, argv)
        return
    known = command_keys(command)
    if known is None:
        return
    keys, deprecated, options = known
    values: dict[str, object] = {}
    for path in _config_paths(argv):
        values.update(_check_recipe(path, keys | set(deprecated)))
    values.update(_check_options(prog, command, argv, options, skip=("--config", "--debug")))
    _check_values(command, values)


def _config_paths(argv: list[str]) -> list[str]:
    """The values of every `--config` in `argv`."""
    return [token.partition("=")[2] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            for i, token in enumerate(argv) if token == "--config" or token.startswith("--config=")]


def _check_options(prog: str, command: str, argv: list[str], options: set[str],
                   skip: tuple[str, ...] = ()) -> dict[str, object]:  # fmt: skip
    """Raise for the first option of `argv` not in `options` (its spelling `--a-b` or `--a_b`); return the
    single values given to the others, by key. Options in `skip` are not looked at."""
    values: dict[str, object] = {}
    for i, token in enumerate(argv):
        if not token.startswith("--") or token.split("=", 1)[0] in skip:
            continue
        word = token.split("=", 1)[0]
        if word[2:].replace("-", "_") not in options:
            raise UsageError(f"unknown option {word}{did_you_mean(word, _spellings(options))}; "
                             f"`{prog} {command} --help` lists the options")  # fmt: skip
        given = [token.partition("=")[2]] if "=" in token else _following(argv, i)
        if len(given) == 1:
            values[word[2:].replace("-", "_")] = given[0]
    return values


# `sepo study`: its options (StudyCommand), its recipe's top-level keys (StudyConfig), and the keys of the
# recipe's blocks: `train` and every arm are `sepo train` keys, `eval` is `sepo eval`'s (EvalConfig).
STUDY_COMMAND = ("sepo/study/run.py", "StudyCommand")
STUDY_RECIPE = ("sepo/study/config.py", "StudyConfig")
EVAL_CONFIG = ("sepo/eval/config.py", "EvalConfig")


def check_study(prog: str, argv: list[str]) -> None:
    """Raise for the first unknown option of `sepo study`, or unknown key of its recipe, of the recipe's
    `train` block, of one of its `arms` or of its `eval` block, naming the recipe's line; do nothing when
    TRL's keys are not known here (the study's own checks report them when its arms are built)."""
    train = command_keys("train")
    if train is None:
        return
    _check_options(prog, "study", argv, own_options((STUDY_COMMAND,)) | GENERAL_OPTIONS, skip=("--debug",))
    train_keys = train[0] | set(train[1])
    eval_fields, eval_renamed, _, _ = own_keys(*EVAL_CONFIG)
    blocks = {"train": train_keys, "eval": set(eval_fields) | set(eval_renamed)}
    for path in _config_paths(argv):
        read = _recipe_node(path)
        if read is None:
            continue  # a missing file or bad YAML: the study's own reader says which
        node = read[0]
        top = _check_keys(path, node, own_keys(*STUDY_RECIPE)[0], "the study recipe")
        for name, keys in blocks.items():
            if isinstance(top.get(name), yaml.MappingNode):
                _check_keys(path, top[name], keys, f"its {name} block")
        if isinstance(top.get("arms"), yaml.MappingNode):
            for arm, overrides in _check_keys(path, top["arms"], None, "").items():
                if isinstance(overrides, yaml.MappingNode):
                    _check_keys(path, overrides, train_keys, f"arm {arm!r}")


def _recipe_node(path: str) -> tuple[yaml.MappingNode, str] | None:
    """The YAML node of a recipe (with line numbers) and its text, or None when it cannot be read or is not a
    mapping."""
    try:
        text = Path(path).read_text()
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return None
    return (node, text) if isinstance(node, yaml.MappingNode) else None


def _check_keys(path: str, node: yaml.MappingNode, keys: set[str] | frozenset[str] | None,
                where: str) -> dict[str, yaml.Node]:  # fmt: skip
    """Raise for the first key of mapping `node` not in `keys` (None: any key), naming its line and `where`;
    return the mapping's value nodes by key."""
    out = {}
    for key_node, value in node.value:
        key = str(key_node.value)
        if keys is not None and key.replace("-", "_") not in keys:
            raise UsageError(f"{path}, line {key_node.start_mark.line + 1}: unknown key {key!r} in {where}"
                             f"{did_you_mean(key.replace('-', '_'), sorted(keys))}")  # fmt: skip
        out[key] = value
    return out


def _following(argv: list[str], i: int) -> list[str]:
    """The values after option `argv[i]` (up to the next option)."""
    out = []
    for token in argv[i + 1 :]:
        if token.startswith("--"):
            break
        out.append(token)
    return out


@cache
def ranges(path: str, name: str) -> dict[str, object] | None:
    """A config's ranges table (`NAME = {...}` in `path`), evaluated with sepo.config.checks' names only (the tables
    are written with them); None when it uses anything else."""
    tree = ast.parse((ROOT / path).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            try:
                return eval(compile(ast.Expression(node.value), path, "eval"), dict(vars(sepo.config.checks)))
            except Exception:  # noqa: BLE001 - a table written differently: leave it to the full parser
                return None
    return None


def _number(value: object, integer: bool) -> object:
    """A command-line string as the number the full parser would make of it; the value itself otherwise; a
    string that is no number comes back unchanged (the full parser names the type)."""
    if not isinstance(value, str):
        return value
    if value.strip().lower() in ("none", "null"):
        return None
    try:
        return int(value) if integer else float(value)
    except ValueError:
        return value


def _check_values(command: str, values: dict[str, object]) -> None:
    source = COMMANDS[command][2]
    table = (ranges(*source) if source else None) or {}
    for key, allowed in table.items():
        if key in values:
            value = _number(values[key], allowed.integer)
            if value is None or isinstance(value, int | float) and not isinstance(value, bool):
                allowed.check(key, value)
    if isinstance(values.get("output_dir"), str):
        check_output_dir("output_dir", values["output_dir"])
    if isinstance(values.get("model_name_or_path"), str):
        check_model("model_name_or_path", values["model_name_or_path"])
    if command == "train" and values.get("games") is not None:  # SEPOConfig checks them so, once trl is loaded
        games = values["games"]
        check_names("game", games if isinstance(games, list) else [games], GAMES)


def _check_recipe(path: str, keys: set[str]) -> dict[str, object]:
    """A recipe's values, once every key of it is known."""
    read = _recipe_node(str(check_recipe_file(path)))
    if read is None:
        return {}  # bad YAML: the full parser says where
    node, text = read
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        return {}
    for key_node, _ in node.value:
        key = str(key_node.value)
        dest = key.replace("-", "_")
        if key not in ("env", PROVENANCE_KEY) and dest not in keys:
            raise UsageError(f"{path}, line {key_node.start_mark.line + 1}: unknown key {key!r}"
                             f"{did_you_mean(dest, sorted(keys))}")  # fmt: skip
    return {str(k).replace("-", "_"): v for k, v in data.items() if k not in ("env", PROVENANCE_KEY)}


if __name__ == "__main__":
    print(f"wrote {write_upstream_keys()}", file=sys.stderr)
