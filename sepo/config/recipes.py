"""Command lines and recipes into config dataclasses, the way TRL's scripts read them, with clear errors.

    (args, model_args) = parse_config((SEPOConfig, ModelConfig), argv, prog="sepo train")

reads `--config recipe.yaml` (flat keys, plus an optional `env:` map of environment variables, as TRL's
`TrlParser` does), lets `--key value` flags override it, and builds the dataclasses. Every mistake is a
`UsageError` that names the key: unknown keys (with a "did you mean"), YAML syntax (file, line, column),
values of the wrong type, and whatever the dataclasses' own checks reject.

Every `sepo` / `fmsp` command reads its keys this way, each from its own dataclass, with the same conventions:
`--key_name` and `--key-name` are the same flag; no abbreviations; a list key also answers to its singular
(`--game` for `games`), and one whose field says `metadata={"repeatable": True}` takes its flag more than once
(`--run a --run b`); help lists the general options, then the project's own keys, then those inherited from
TRL / transformers, each with its description and its default once; `--debug` shows tracebacks. A dataclass
with a `config` key of its own (`sepo study`: the study recipe) keeps that meaning of `--config` and reads
no recipe of its flags.

A config lists in `_RECIPE_PATH_FIELDS` the keys that name files shipped with a recipe: a relative value
written in the recipe resolves against the recipe's directory (given on the command line, against the
working directory, like every other path). It lists in `_DEPRECATED_KEYS` old names of its keys
(`{old: new}`): the old name still works, in a recipe and on the command line, with a FutureWarning.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import os
import types
import warnings
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml
from transformers.hf_argparser import HfArgumentParser, string_to_bool
from transformers.utils import is_torch_bf16_gpu_available, is_torch_xla_available

from sepo.config.checks import UsageError, check_recipe_file, did_you_mean, first_games
from sepo.config.provenance import PROVENANCE_KEY

PROJECT_PACKAGES = ("sepo", "fmsp", "envs")
UNDOCUMENTED = "(no description yet)"
FLAG_EPILOG = (
    f"--key_name and --key-name are the same flag; lists take several values (--games {' '.join(first_games(2))}); "
    "mappings take JSON or YAML flow ('{training: 2, exploit: 1}'); booleans take true/false; null unsets an "
    "optional key."
)
T = TypeVar("T")
RECIPE_EPILOG = ("Every key can be set in the recipe (--config, flat YAML keys) and overridden on the command "
                 "line. " + FLAG_EPILOG)


# ------------------------------------------------------------------------------------------------
# help

_METAVARS = {int: "INT", float: "FLOAT", str: "STR", bool: "BOOL"}  # `--key INT` in help


def _show(value: Any) -> str:
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, list | tuple):
        return " ".join(map(str, value)) if value else "[]"
    return str(value)


def _warn_deprecated(old: str, new: str, where: str) -> None:
    warnings.warn(f"{where}: {old} is deprecated, use {new} (same meaning)", FutureWarning, stacklevel=2)


class _DeprecatedAlias(argparse.Action):
    """`--old VALUE` for a renamed key: sets the new key's value, with a FutureWarning."""

    def __init__(self, *args: Any, new: str, **kwargs: Any) -> None:
        self.new = new
        super().__init__(*args, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        _warn_deprecated(str(option_string), f"--{self.new}", "command line")
        setattr(namespace, self.dest, values)


class _Repeated(argparse.Action):
    """A list key whose flag may be given more than once (`--run a --run b`, as well as `--run a b`): the
    command line's values, in order, replace the recipe's or the default. A field asks for it with
    `metadata={"repeatable": True}`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        before = getattr(namespace, self.dest, None)
        first = before is self.default  # argparse put the default (the recipe's value) there
        setattr(namespace, self.dest, list(values) if first or before is None else [*before, *values])


class HelpFormatter(argparse.HelpFormatter):
    """One option name per line (`--key TYPE`), its description, and its default once."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=32)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings:
            return super()._format_action_invocation(action)
        name = ", ".join(action.option_strings) if not action.option_strings[0].startswith("--") else \
            action.option_strings[0]
        if action.nargs == 0:
            return name
        return f"{name} {self._format_args(action, self._get_default_metavar_for_optional(action))}"

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required:
            return f"{text} (required)"
        silent = action.nargs == 0 or action.default is argparse.SUPPRESS or not action.option_strings
        if silent or "default" in text.lower():
            return text
        return f"{text} (default: {_show(action.default).replace('%', '%%')})"


# ------------------------------------------------------------------------------------------------
# recipes


def read_recipe(path: str | Path) -> tuple[dict[str, Any], dict[str, int]]:
    """A recipe's flat mapping and the line of each key; YAML mistakes name the file, line and column."""
    path = check_recipe_file(path)
    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise UsageError(f"{path}{where}: invalid YAML: {exc.problem or exc.context}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a recipe is a mapping of keys (key: value), not a {type(data).__name__}")
    lines = {str(k.value): k.start_mark.line + 1 for k, _ in node.value}
    # a run's resolved config read back as a recipe: its provenance is a record of that run, not a setting
    return {str(k): v for k, v in data.items() if k != PROVENANCE_KEY}, lines


def section_as(kind: type[T], data: Any, where: str, lines: dict[str, int] | None = None) -> T:
    """A mapping from a recipe (a whole file with nested sections, such as a study's or a benchmark's settings,
    or one section of one) as the dataclass `kind`, with the flat recipe's checks: an unknown key is named with
    a "did you mean" and the valid keys, a missing required key is named, each value is coerced to its field's
    type, and the dataclass's own checks speak last. Every error is one line that starts with `where` (and the
    key's line, when `lines` has it)."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a mapping of keys, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(kind) if f.init}  # type: ignore[arg-type]
    lines = lines or {}

    def at(key: str) -> str:
        return f"{where}, line {lines[key]}" if key in lines else where

    for key in data:
        if key not in fields:
            raise UsageError(f"{at(key)}: unknown key {key!r}{did_you_mean(str(key), fields)}; "
                             f"valid: {', '.join(fields)}")  # fmt: skip
    missing = [name for name, f in fields.items() if name not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
    if missing:
        raise UsageError(f"{where}: missing key {missing[0]!r}")
    hints = get_type_hints(kind)
    values = {}
    for key, value in data.items():
        try:
            values[key] = _section_value(key, value, hints[key], at(key))
        except UsageError as exc:
            raise UsageError(exc.args[0] if exc.args[0].startswith(where) else f"{at(key)}: {exc}") from None
    try:
        return kind(**values)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}") from None


def _section_value(key: str, value: Any, hint: Any, where: str) -> Any:
    """A section's value as its field's type: a nested dataclass (or a list of them) is a section of its own."""
    item = get_args(hint)[0] if get_origin(hint) is list and get_args(hint) else None
    if dataclasses.is_dataclass(hint):
        return section_as(hint, value, f"{where}: {key}")
    if isinstance(item, type) and dataclasses.is_dataclass(item):
        if not isinstance(value, list):
            raise UsageError(f"{where}: {key} must be a list of mappings, got {value!r}")
        return [section_as(item, v, f"{where}: {key}[{i}]") for i, v in enumerate(value)]
    return coerce(key, value, hint)


def load_section(kind: type[T], path: str | Path) -> T:
    """The recipe file at `path` as the dataclass `kind` (`section_as`, after `read_recipe`'s YAML checks)."""
    data, lines = read_recipe(path)
    return section_as(kind, data, str(path), lines)


_NO = object()  # "does not convert"


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _exact(value: Any, hint: Any) -> bool:
    if isinstance(value, bool) != (hint is bool):
        return False
    base = get_origin(hint) or hint
    return isinstance(base, type) and isinstance(value, base)


def _convert(value: Any, hint: Any) -> Any:
    """`value` as type `hint`, or _NO. Scalars convert the way the command line would read their text."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if _is_union(hint):
        if value is None:
            return None if type(None) in args else _NO
        options = [a for a in args if a is not type(None)]
        for alt in options:
            if _exact(value, alt):
                return _convert(value, alt)
        for alt in sorted(options, key=lambda a: a is str):  # a string field last: it takes anything
            got = _convert(value, alt)
            if got is not _NO:
                return got
        return _NO
    if origin is Literal:
        return value if value in args else _NO
    if isinstance(hint, type) and issubclass(hint, Enum):
        return value if isinstance(value, hint) or value in [m.value for m in hint] else _NO
    if origin is list or hint is list:
        items = value if isinstance(value, list) else [value]
        converted = [_convert(v, args[0]) if args else v for v in items]
        return _NO if _NO in converted else converted
    if origin is dict or hint is dict:
        return value if isinstance(value, dict) else _NO
    if isinstance(value, dict | list) or (value is None and hint in (bool, int, float, str)):
        return _NO
    try:
        if hint is bool:
            return string_to_bool(value) if isinstance(value, bool | str) else _NO
        if hint in (int, float):
            if isinstance(value, bool):
                return _NO
            number = hint(value) if isinstance(value, str) else value
            return hint(number) if float(number).is_integer() or hint is float else _NO
        if hint is str:
            return value if isinstance(value, str) else (_NO if isinstance(value, bool) else str(value))
    except (ValueError, argparse.ArgumentTypeError):
        return _NO
    return value  # an annotation this reader does not know: the dataclass checks it


def _describe(hint: Any) -> str:
    if _is_union(hint):
        return " or ".join(_describe(a) for a in get_args(hint))
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return "one of " + ", ".join(map(repr, args))
    if isinstance(hint, type) and issubclass(hint, Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if origin is list or hint is list:
        return f"a list of ({_describe(args[0])})" if args else "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
             type(None): "null", dict: "a mapping"}
    return names.get(origin or hint, getattr(hint, "__name__", str(hint)))


def coerce(key: str, value: Any, hint: Any) -> Any:
    """A recipe value as the type its field declares, or a UsageError naming the key and the type."""
    converted = _convert(value, hint)
    if converted is _NO:
        quote = " (YAML reads unquoted yes/no/on/off as booleans: quote the word)" if isinstance(value, bool) else ""
        raise UsageError(f"{key} must be {_describe(hint)}, got {value!r}{quote}")
    return converted


# ------------------------------------------------------------------------------------------------
# command-line types that HfArgumentParser does not provide


def glued_key(value: Any) -> str | None:
    """The first key of a (nested) mapping that YAML flow read as `key:value` glued together, with no value:
    `{num_rounds:8}` is the key 'num_rounds:8' (YAML needs a space after the colon)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if item is None and isinstance(key, str) and ":" in key:
                return key
            found = glued_key(item)
            if found is not None:
                return found
    elif isinstance(value, list):
        return next((k for k in map(glued_key, value) if k is not None), None)
    return None


def glued_message(key: str) -> str:
    name, _, value = key.partition(":")
    return (f"reads {key!r} as one key with no value: YAML flow needs a space after each colon "
            f"('{{{name}: {value}}}'), or write JSON")


def mapping_type(optional: bool = False, or_string: bool = False) -> Callable[[str], Any]:
    """Read a mapping written in JSON or YAML flow; `or_string`: text that does not start with `{` stays a
    string (e.g. a DeepSpeed config path)."""

    def mapping(text: str) -> Any:
        if optional and text.strip().lower() in ("none", "null"):
            return None
        if or_string and not text.lstrip().startswith("{"):
            return text
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = None
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"expects a mapping in JSON or YAML flow, e.g. '{{a: 1}}', got {text!r}")
        if glued_key(value) is not None:
            raise argparse.ArgumentTypeError(f"{text!r} {glued_message(glued_key(value))}")
        return value

    return mapping


def _optional_type(base: Callable[[str], Any]) -> Callable[[str], Any]:
    def optional(text: str) -> Any:
        return None if text.strip().lower() in ("none", "null") else base(text)

    optional.__name__ = getattr(base, "__name__", "value")  # argparse names it in "invalid int value"
    return optional


def _plain(hint: Any) -> tuple[Any, bool]:
    """(the non-None part of `hint`, whether None is allowed)."""
    if _is_union(hint):
        args = [a for a in get_args(hint) if a is not type(None)]
        return (args[0] if len(args) == 1 else hint), type(None) in get_args(hint)
    return hint, False


def _has_mapping(hint: Any) -> bool:
    options = get_args(hint) if _is_union(hint) else (hint,)
    return any(get_origin(a) is dict or a is dict for a in options)


def _is_project(cls: type) -> bool:
    """A class of this project: one of its packages, or a module of it run as `python -m` (`__main__`)."""
    return cls.__module__.split(".")[0] in PROJECT_PACKAGES or cls.__module__ == "__main__"


def _own_fields(dtype: type) -> set[str]:
    """Fields this project declares (or re-declares with its own default) rather than inherits."""
    return {name for cls in dtype.__mro__ if _is_project(cls)
            for name in vars(cls).get("__annotations__", {})}


def _upstream_title(dtype: type) -> str:
    names = [f"{c.__module__.split('.')[0]}.{c.__name__}" for c in dtype.__mro__
             if dataclasses.is_dataclass(c) and not _is_project(c)]
    names = list(dict.fromkeys([names[0], names[-1]])) if names else [dtype.__name__]
    return " / ".join(names) + " options"


class RecipeParser(HfArgumentParser):
    """HfArgumentParser (as TRL's TrlParser) with `--config` recipes and the conventions every `sepo` / `fmsp`
    command shares (see the module docstring): argparse's own errors become `UsageError`s, unknown options get
    a "did you mean", and `--debug` shows tracebacks."""

    def __init__(self, dataclass_types: Sequence[type], prog: str, description: str | None = None) -> None:
        self._hints: dict[str, tuple[Any, type]] = {}  # dest -> (type hint, dataclass)
        self._renamed: dict[str, str] = {}  # a deprecated key -> its new name
        self._own_groups: list[argparse._ArgumentGroup] = []
        own_config = any(f.name == "config" for dtype in dataclass_types for f in dataclasses.fields(dtype))
        super().__init__(list(dataclass_types), prog=prog, description=description,
                         epilog=FLAG_EPILOG if own_config else RECIPE_EPILOG,
                         usage="%(prog)s [--key value ...]" if own_config else
                         "%(prog)s [--config RECIPE.yaml] [--key value ...]",
                         formatter_class=HelpFormatter, allow_abbrev=False, add_help=False)  # fmt: skip
        self._optionals.title = "general options"
        self._optionals.add_argument("-h", "--help", action="help", help="show this help and exit")
        if "--debug" not in self._option_string_actions:  # TrainingArguments has a `debug` key of its own
            self._optionals.add_argument("--debug", action="store_true", dest="_debug",
                                         help="show the full traceback of an error (same as SEPO_DEBUG=1)")
        self.reads_recipes = not own_config  # a command whose own `config` key names another kind of file
        if self.reads_recipes:
            self._optionals.add_argument("--config", metavar="RECIPE.yaml", default=argparse.SUPPRESS,
                                         help="YAML recipe of flat keys; flags on the command line override it")
        self._action_groups.sort(key=self._group_rank)

    def _group_rank(self, group: argparse._ArgumentGroup) -> tuple[int, int]:
        if group in (self._positionals, self._optionals):
            return (0, 0)
        if group in self._own_groups:
            return (1, 0)
        return (2, len(group._group_actions))  # upstream: the shorter lists (model options) before the long

    def _add_dataclass_arguments(self, dtype: type) -> None:
        hints = get_type_hints(dtype)
        own = _own_fields(dtype)
        groups: dict[bool, argparse._ArgumentGroup] = {}
        for field in dataclasses.fields(dtype):
            if not field.init:
                continue
            mine = field.name in own
            if mine not in groups:
                groups[mine] = self.add_argument_group(f"{dtype.__name__} options" if mine else _upstream_title(dtype))
                if mine:
                    self._own_groups.append(groups[mine])
            field = copy.copy(field)  # HfArgumentParser rewrites field.type; leave the class's own untouched
            field.type = hints[field.name]
            plain, optional = _plain(field.type)
            singular = field.name[:-1]
            if mine and (get_origin(plain) is list) and field.name.endswith("s") and singular not in hints:
                field.metadata = types.MappingProxyType({**field.metadata, "aliases": [f"--{singular}"]})
            if field.metadata.get("repeatable"):
                field.metadata = types.MappingProxyType(
                    {**{k: v for k, v in field.metadata.items() if k != "repeatable"}, "action": _Repeated})
            before = len(self._actions)
            self._parse_dataclass_field(groups[mine], field)
            self._adapt(self._actions[before:], hints[field.name], plain, optional)
            self._hints[field.name] = (hints[field.name], dtype)
        for old, new in getattr(dtype, "_DEPRECATED_KEYS", {}).items():
            (main,) = [a for a in self._actions if a.dest == new and not a.option_strings[0].startswith("--no")]
            groups[True].add_argument(f"--{old}", dest=new, action=_DeprecatedAlias, new=new, type=main.type,
                                      nargs=main.nargs, metavar=main.metavar, default=argparse.SUPPRESS,
                                      help=f"deprecated name of --{new}")  # fmt: skip
            self._renamed[old] = new

    @staticmethod
    def _adapt(actions: list[argparse.Action], hint: Any, plain: Any, optional: bool) -> None:
        """Command-line types for mappings and nullable numbers; metavars; the `--no_*` flag's own text."""
        main = actions[0]
        main.help = main.help or UNDOCUMENTED  # argparse prints no default for an option without help
        if _has_mapping(hint):
            or_string = _is_union(hint) and str in get_args(hint)
            main.type, main.metavar = mapping_type(optional, or_string), "MAPPING"
        elif plain in (int, float) and optional:
            main.type = _optional_type(plain)
        if main.metavar is None and not main.choices:
            item = get_args(plain)[0] if get_origin(plain) is list and get_args(plain) else plain
            main.metavar = _METAVARS.get(item)
        for action in actions[1:]:  # HfArgumentParser's `--no_<key>` for booleans that default to true
            action.help = f"set {main.dest} to false (same as {main.option_strings[0]} false)"

    # --- reading ------------------------------------------------------------------------------------
    def apply(self, values: dict[str, Any], source: str = "override", lines: dict[str, int] | None = None,
              base_dir: Path | None = None) -> None:
        """Make `values` the new defaults (command-line flags still override them); `base_dir` resolves the
        keys a config lists in `_RECIPE_PATH_FIELDS`."""
        for key, value in values.items():
            dest = key.replace("-", "_")
            where = f"{source}, line {lines[key]}" if lines and key in lines else source
            if dest in self._renamed:
                _warn_deprecated(dest, self._renamed[dest], where)
                dest = self._renamed[dest]
            if dest not in self._hints:
                raise UsageError(f"{where}: unknown key {key!r}{did_you_mean(dest, self._hints)}")
            hint, dtype = self._hints[dest]
            try:
                value = coerce(dest, value, hint)
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            if _has_mapping(hint) and glued_key(value) is not None:
                raise UsageError(f"{where}: {dest} {glued_message(glued_key(value))}")
            if base_dir is not None and dest in getattr(dtype, "_RECIPE_PATH_FIELDS", ()) and value is not None:
                value = str(base_dir / Path(value).expanduser())  # an absolute value stays as it is
            for action in self._actions:
                if action.dest == dest:
                    action.default, action.required = value, False

    def apply_recipe(self, path: str | Path) -> None:
        """Read a recipe file: its `env:` map is exported (as TrlParser does), its keys become defaults."""
        data, lines = read_recipe(path)
        env = data.pop("env", None) or {}
        if not isinstance(env, dict):
            raise UsageError(f"{path}: env must be a mapping of environment variables, got {env!r}")
        os.environ.update({str(k): str(v) for k, v in env.items()})
        self.apply(data, source=str(path), lines=lines, base_dir=Path(path).parent)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def _unknown(self, word: str) -> None:
        known = [s for action in self._actions for s in action.option_strings]
        raise UsageError(f"unknown option {word}{did_you_mean(word, known)}; `{self.prog} --help` lists the options")

    def _parse_flags(self, argv: list[str]) -> dict[str, Any]:
        """The values of `argv`'s flags; anything not understood is a UsageError. An unknown option is named
        first, before argparse would report a missing required one (a typo of a required key is both)."""
        for token in argv:
            word = token.split("=", 1)[0]
            if word.startswith("--") and word != "--" and word not in self._option_string_actions:
                self._unknown(word)
        namespace, rest = self.parse_known_args(argv)
        if rest:
            word = rest[0].split("=", 1)[0]
            if word.startswith("-"):
                self._unknown(word)
            raise UsageError(f"unexpected argument {rest[0]!r}; options are written --key value")
        values = vars(namespace)
        if values.pop("_debug", False):
            os.environ["SEPO_DEBUG"] = "1"  # the dispatcher (sepo.config.subcommands) then lets tracebacks through
        return values

    def parse(self, argv: Sequence[str] | None) -> tuple[Any, ...]:
        """The dataclasses from `[--config RECIPE] [--key value ...]`."""
        argv = list(argv or [])
        for i, token in enumerate(argv if self.reads_recipes else ()):
            if token == "--config" or token.startswith("--config="):
                path = token.partition("=")[2] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
                if not path:
                    raise UsageError("--config needs a recipe file")
                del argv[i : i + (1 if "=" in token else 2)]
                self.apply_recipe(path)
                break
        values = self._parse_flags(argv)
        return tuple(self.build(dtype, values) for dtype in self.dataclass_types)

    @staticmethod
    def build(dtype: type, values: dict[str, Any]) -> Any:
        """`dtype(**values)` (its fields only); what its own checks reject is a UsageError."""
        names = {f.name for f in dataclasses.fields(dtype) if f.init}
        try:
            return dtype(**{k: v for k, v in values.items() if k in names})
        except UsageError:
            raise
        except (ValueError, KeyError) as exc:  # the config's (and TRL's / transformers') own checks
            raise UsageError(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)) from exc


def parse_config(dataclass_types: Sequence[type], argv: Sequence[str] | None, prog: str,
                 description: str | None = None) -> tuple[Any, ...]:
    """Parse `[--config RECIPE] [--key value ...]` into instances of `dataclass_types` (see the module doc)."""
    return RecipeParser(dataclass_types, prog=prog, description=description).parse(argv)


def load_config(dtype: type, recipe: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Any:
    """`dtype` from a recipe file plus a mapping of overrides, through the same checks as the command line."""
    parser = RecipeParser([dtype], prog=dtype.__name__)
    if recipe is not None:
        parser.apply_recipe(recipe)
    parser.apply(overrides or {})
    return parser.parse([])[0]


# ------------------------------------------------------------------------------------------------
# what a recipe cannot know: the machine


def set_torch_threads(threads: int | None) -> None:
    """`torch_threads` (every command that runs a model has the key): torch's intra-op threads; None leaves
    torch's default (one per core). On a small shared machine 1 avoids OpenMP spin-waiting on busy cores."""
    if threads:
        # deferred: torch takes ~1 s to import and this module is every command's parser (sepo eval, fmsp
        # included); only a command that sets torch_threads needs it
        import torch

        torch.set_num_threads(threads)


def freeze_loaded_objects() -> None:
    """Collect once, then move every object alive now (the imported libraries: transformers, torch, TRL,
    tokenizers) to the garbage collector's permanent generation (`gc.freeze`), for a command about to run
    rollouts. They live as long as the process; without this every full collection walks them all again,
    and one landed inside a rollout whenever the rollout's own objects crossed the collector's threshold:
    about 240 ms of CPU with transformers and a tokenizer loaded (435k objects), billed to whatever phase
    allocated at that moment (what `python -m benchmarks.engine` showed as a game phase of 300 µs or more per
    decision, warm slower than cold). Objects made later are collected as before."""
    gc.collect()
    gc.freeze()


_WANDB_DIR_WE_SET: list[str] = []  # WANDB_DIR values prepare_machine exported (not the user's choice)


def wandb_dir(output_dir: str | Path) -> str:
    """The one rule for wandb's files, for every command: `$WANDB_DIR` when the user set it, else the run's
    own output directory; wandb writes its `wandb/` folder (offline runs included) inside it."""
    chosen = os.environ.get("WANDB_DIR")
    return chosen if chosen and chosen not in _WANDB_DIR_WE_SET else str(output_dir)


def prepare_machine(args: Any) -> None:
    """For `sepo train` / `sepo sft` (and each study arm): apply `torch_threads`, freeze the objects loaded so
    far (`freeze_loaded_objects`), and point wandb at `wandb_dir(output_dir)` (TRL's wandb callback reads
    WANDB_DIR) when the run reports there."""
    set_torch_threads(getattr(args, "torch_threads", None))
    freeze_loaded_objects()
    if "wandb" in (args.report_to or []):
        target = wandb_dir(args.output_dir)
        Path(target).mkdir(parents=True, exist_ok=True)
        if os.environ.get("WANDB_DIR") != target:
            os.environ["WANDB_DIR"] = target
            _WANDB_DIR_WE_SET.append(target)


def fall_back_to_fp32(args: Any) -> None:
    """Without a bf16-capable accelerator, train in fp32 with a warning instead of failing in TrainingArguments
    ("Your setup doesn't support bf16/gpu"). TRL's configs default `bf16` to true; `use_cpu: true` keeps
    transformers' own behaviour (bf16 on the CPU)."""
    if args.use_cpu or not (args.bf16 or args.bf16 is None and not args.fp16 or args.bf16_full_eval):
        return
    if is_torch_bf16_gpu_available() or is_torch_xla_available():
        return
    warnings.warn("no bf16-capable GPU here: training in fp32 (bf16 set to false); set `bf16: false` or "
                  "`use_cpu: true` in the recipe to silence this", UserWarning, stacklevel=3)
    args.bf16 = False
    args.bf16_full_eval = False
