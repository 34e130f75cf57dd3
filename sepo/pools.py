"""Opponent pools: three sets of strategies per game, separated by role, sampled per rollout.

A GRPO group is one (pool, opponent, seed); `Pools.sample` picks the opponent's name with the
caller's seeded `random.Random` and `Pools.make` builds a fresh strategy for every rollout.
Members are the scripted strategies of `envs.strategies.<game>` plus code policies exported by
FMSP into a pool directory (`manifest.json` in format `sepo-pool-manifest/1`, see `load_pool_dir`).
Code policies are never imported here: each instance is an `envs.sandbox.SandboxedStrategy`, its own
contained process started with the rollout and ended with it (`Strategy.close`).

Each game declares its default pools by role in its registration (`envs.game_spec(game).pools`, beside the
game's rules, with the paper's sources). Separation by role, as in the revised paper: "The pools are separated
by role rather than strictly disjoint: a benign strategy can serve both as a training opponent and as a
measurement probe (e.g., FairNeg for collusion), since the two roles measure different quantities"; the primary
exploiter stays out of the training pool except where the paper puts it in both. A default pool may therefore
repeat a name in two roles (each game's registration says which and why). What the authors recorded as a bug is
"an early implementation assigned the primary exploiter to all three pools, creating conflicting gradient signals
for identical actions": the loader rejects a name in all three pools and a name that is both an exploiter and a
collusive partner (`check_separation`). `strict=True` (`strict_pools: true` in a recipe) keeps every name in one
pool only: a default training opponent that also probes is dropped from training, and any other overlap is an
error.
A name in two pools is two opponents for the trainer and the evaluator: every group and metric
carries its pool, so the name's credit follows the group's pool, never a name lookup.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from envs import GAMES, Strategy, game_spec, make_game, play_episode, strategy_registry
from envs.registry import POOL_ROLES
from envs.sandbox import PolicyError, SandboxConfig, SandboxedPolicy, SandboxedStrategy
from envs.sandbox.text import safe_text

POOL_NAMES: tuple[str, ...] = POOL_ROLES  # the roles every game's registration declares pools for
MANIFEST_FORMAT = "sepo-pool-manifest/1"
MANIFEST_FILE = "manifest.json"
MAX_MANIFEST_BYTES = 1 << 20  # a manifest or a member file larger than this is refused
MAX_MEMBER_BYTES = 1 << 20
MAX_JSON_DEPTH = 16  # nesting of the manifest's JSON (a member's `source` object included)
# The one `source.kind` a manifest member may declare: the trainer builds every pool-directory member as sandboxed
# code (its factory); "scripted" names the in-process strategies of `envs.strategies`, which it builds itself.
CODE_SOURCE_KIND = "code"

_NAME = re.compile(r"[a-z][a-z0-9_]*")  # always fullmatch: `$` would let a trailing newline through
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MEMBER_KEYS: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "game": str,
    "pool": str,
    "file": str,
    "class_name": str,
    "description": str,
    "source": dict,
    "sha256": str,
}
_VIEW_FORMATS = ("object", "dict")


class PoolError(ValueError):
    """A bad pool configuration or pool directory; the message says what and lists valid choices."""


@dataclass(frozen=True)
class PoolMember:
    """One opponent: its name, game, pool and how to build a fresh instance of it."""

    name: str
    game: str
    pool: str
    factory: Callable[[], Strategy] = field(repr=False, compare=False)
    description: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)
    file: str | None = None
    sha256: str | None = None


def _check_pool(pool: str) -> None:
    if pool not in POOL_NAMES:
        raise PoolError(f"unknown pool {pool!r}; choose one of: {', '.join(POOL_NAMES)}")


def _check_game(game: str) -> None:
    if game not in GAMES:
        raise PoolError(f"unknown game {game!r}; choose one of: {', '.join(GAMES)}")


def check_separation(game: str, pools: Mapping[str, Sequence[str]], strict: bool = False) -> None:
    """Raise PoolError, naming the pools, for a name listed twice in one pool or in pools that may not share
    it: all three pools (the bug the method's authors recorded), or exploit and collusive (one strategy both
    exploiter and collusive partner); with `strict`, any two pools."""
    roles: dict[str, list[str]] = {}
    for pool in POOL_NAMES:
        for name in pools.get(pool, ()):
            if pool in roles.get(name, ()):
                raise PoolError(f"strategy {name!r} is listed twice in the {pool!r} pool of {game!r}")
            roles.setdefault(name, []).append(pool)
    for name, in_pools in roles.items():
        if len(in_pools) == len(POOL_NAMES):
            raise PoolError(
                f"strategy {name!r} is in all three pools of {game!r}: the bug the method's authors recorded "
                "(conflicting gradient signals for identical actions); give it at most two roles"
            )
        if {"exploit", "collusive"} <= set(in_pools):
            raise PoolError(
                f"strategy {name!r} is both an exploiter and a collusive partner in {game!r}: the exploit and "
                "collusive penalties would push the same actions in opposite directions; keep it in one of them"
            )
        if strict and len(in_pools) > 1:
            raise PoolError(
                f"strategy {name!r} is in both the {in_pools[0]!r} and the {in_pools[1]!r} pool of {game!r}; "
                "strict_pools keeps every opponent in one pool (strict_pools: false separates pools by role, as "
                "the method does)"
            )


# ------------------------------------------------------------------------------------------------
# code policies from a pool directory


def _shown(value: Any) -> str:
    """A manifest value inside an error message: escaped and short (never a file's contents at length)."""
    return repr(safe_text(value, 80)) if isinstance(value, str) else f"<{type(value).__name__}>"


def _read_regular(directory: Path, relative: str, limit: int, where: str) -> bytes:
    """The bytes of `directory/relative`, which must be a regular file with exactly one link, inside the directory
    through no symbolic link: every component is checked with lstat before anything resolves the path, the file
    is opened with O_NOFOLLOW and must still be the inode lstat saw. Errors name the path, never the contents."""
    rel = PurePosixPath(relative)
    if not relative or "\x00" in relative or rel.is_absolute() or ".." in rel.parts:
        raise PoolError(f"{where}: file {_shown(relative)} is outside the pool directory")
    current, info = directory, None
    parts = [part for part in rel.parts if part != "."]
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            raise PoolError(f"{where}: file {_shown(relative)} does not exist") from None
        except OSError as exc:
            raise PoolError(f"{where}: cannot read {_shown(relative)} ({exc.strerror})") from None
        if stat.S_ISLNK(info.st_mode):
            raise PoolError(f"{where}: {_shown(relative)} goes through a symbolic link; pool files must be plain files")
        if index < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            raise PoolError(f"{where}: file {_shown(relative)} does not exist")
    if info is None or not stat.S_ISREG(info.st_mode):
        raise PoolError(f"{where}: {_shown(relative)} is not a regular file")
    if info.st_nlink != 1:
        raise PoolError(f"{where}: file {_shown(relative)} has {info.st_nlink} hard links; a pool file must have exactly "
                        "one (a hard link to a file elsewhere would pass the path check)")  # fmt: skip
    if info.st_size > limit:
        raise PoolError(f"{where}: file {_shown(relative)} is larger than {limit} bytes")
    try:
        fd = os.open(current, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise PoolError(f"{where}: cannot open {_shown(relative)} ({exc.strerror})") from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino) or opened.st_nlink != 1:
            raise PoolError(f"{where}: file {_shown(relative)} changed while it was being checked")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise PoolError(f"{where}: file {_shown(relative)} is larger than {limit} bytes")
    return data


def _check_depth(data: Any, where: str) -> None:
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise PoolError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
            stack += [(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value)]


def _read_manifest(directory: Path) -> list[dict[str, Any]]:
    path = directory / MANIFEST_FILE
    if not os.path.lexists(path):
        raise PoolError(f"pool directory {directory} has no {MANIFEST_FILE}")
    raw = _read_regular(directory, MANIFEST_FILE, MAX_MANIFEST_BYTES, f"pool directory {directory}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise PoolError(f"{path}: not valid JSON (not UTF-8 at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise PoolError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise PoolError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:  # e.g. an integer of more digits than Python converts
        raise PoolError(f"{path}: not valid JSON (a value out of range)") from None
    _check_depth(data, str(path))
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        found = _shown(data.get("format")) if isinstance(data, dict) else f"<{type(data).__name__}>"
        raise PoolError(f"{path}: 'format' must be {MANIFEST_FORMAT!r}, found {found}")
    members = data.get("members")
    if not isinstance(members, list):
        raise PoolError(f"{path}: 'members' must be a list of member objects")
    return members


def _validate_entry(entry: Any, index: int, directory: Path) -> tuple[dict[str, Any], Path, bytes]:
    where = f"{directory / MANIFEST_FILE}: member #{index}"
    if not isinstance(entry, dict):
        raise PoolError(f"{where}: must be an object with keys {', '.join(_MEMBER_KEYS)}")
    missing = [key for key in _MEMBER_KEYS if key not in entry]
    if missing:
        raise PoolError(f"{where}: missing key(s) {', '.join(missing)}")
    for key, kind in _MEMBER_KEYS.items():
        if not isinstance(entry[key], kind):
            raise PoolError(f"{where}: {key!r} must be a JSON {'object' if kind is dict else 'string'}")
    where = f"{directory / MANIFEST_FILE}: member {_shown(entry['name'])}"
    if not _NAME.fullmatch(entry["name"]):
        raise PoolError(f"{where}: name must be snake_case ([a-z][a-z0-9_]*)")
    if entry["game"] not in GAMES:
        raise PoolError(f"{where}: unknown game {_shown(entry['game'])}; choose one of: {', '.join(GAMES)}")
    if entry["pool"] not in POOL_NAMES:
        raise PoolError(f"{where}: unknown pool {_shown(entry['pool'])}; choose one of: {', '.join(POOL_NAMES)}")
    if entry.get("view", "object") not in _VIEW_FORMATS:
        raise PoolError(f"{where}: 'view' must be one of {', '.join(_VIEW_FORMATS)}")
    if not _SHA256.fullmatch(entry["sha256"].lower()):
        raise PoolError(f"{where}: 'sha256' must be 64 hex characters")
    if not isinstance(entry.get("class_name"), str) or not entry["class_name"].isidentifier():
        raise PoolError(f"{where}: 'class_name' must be a Python identifier")
    kind = entry["source"].get("kind", CODE_SOURCE_KIND)
    if kind != CODE_SOURCE_KIND:  # e.g. "scripted": the trainer would look for a scripted strategy and crash
        raise PoolError(f"{where}: source kind {_shown(kind)} cannot come from a pool directory; a member there is "
                        f"sandboxed code (kind {CODE_SOURCE_KIND!r}, or no kind)")  # fmt: skip
    data = _read_regular(directory, entry["file"], MAX_MEMBER_BYTES, where)
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry["sha256"].lower():
        raise PoolError(
            f"{where}: sha256 mismatch for {_shown(entry['file'])} (manifest {entry['sha256']}, file {digest})"
        )
    return entry, directory / entry["file"], data


def _sandboxed_factory(entry: Mapping[str, Any], code: str, sandbox: SandboxConfig) -> Callable[[], Strategy]:
    """Fresh `SandboxedStrategy` instances of a member (the verified bytes, never re-read from disk)."""

    def factory() -> Strategy:
        policy = SandboxedPolicy(code, label=entry["name"], config=sandbox, methods=("act",),
                                 class_name=entry["class_name"], name=entry["name"], preload=("envs",))  # fmt: skip
        return SandboxedStrategy(policy, entry["name"], entry.get("view", "object"), entry["description"])

    return factory


def smoke_test(member: PoolMember, seed: int = 0) -> None:
    """Play one default-length episode in each seat against a scripted opponent; PoolError on any failure."""
    game = make_game(member.game)
    opponent_name = game_spec(member.game).pools["training"][0]
    for seat in (0, 1):
        strategies = [member.factory(), strategy_registry(member.game)[opponent_name]()]
        if seat == 1:
            strategies.reverse()
        try:
            play_episode(game, strategies, random.Random(seed + seat))
        except PolicyError as exc:
            where = f"pool member {member.name!r}"
            if exc.kind == "load":
                raise PoolError(f"{where} does not load: {exc.message}\n{exc.detail}".strip()) from None
            if exc.kind == "invalid_action":
                raise PoolError(f"{where} played an illegal action in seat {seat} against {opponent_name!r}: "
                                f"{exc.message}") from None  # fmt: skip
            raise PoolError(f"{where} failed in a smoke episode (seat {seat} vs {opponent_name!r}, {exc.kind}): "
                            f"{exc.message}\n{exc.detail}".strip()) from None  # fmt: skip
        finally:
            for strategy in strategies:
                strategy.close()


def load_pool_dir(path: str | Path, game: str | None = None, sandbox: SandboxConfig | None = None) -> list[PoolMember]:
    """Validate a `sepo-pool-manifest/1` directory and return its members (only `game`'s if given).

    Checks, each failing with a PoolError that names the member: manifest format and keys, valid
    game/pool/name (unique, not shadowing a scripted strategy), file inside the directory, sha256,
    and, in the sandbox (`sandbox`, default `SandboxConfig()`), that the code loads, defines `class_name`
    with `act`, and plays a smoke episode in each seat returning only legal actions.
    """
    directory = Path(path)
    if not directory.is_dir():
        raise PoolError(f"pool directory {directory} does not exist")
    directory = directory.resolve()  # the directory the user named; nothing below it is resolved (_read_regular)
    if game is not None:
        _check_game(game)
    entries: list[tuple[dict[str, Any], Path, bytes]] = []
    seen: set[str] = set()
    for index, raw in enumerate(_read_manifest(directory)):  # validate the whole manifest before running code
        entry, file, data = _validate_entry(raw, index, directory)
        name = entry["name"]
        if name in seen:
            raise PoolError(f"{directory / MANIFEST_FILE}: member name {_shown(name)} appears twice")
        seen.add(name)
        if name in strategy_registry(entry["game"]):
            raise PoolError(
                f"{directory / MANIFEST_FILE}: member name {_shown(name)} shadows the scripted {entry['game']} "
                "strategy of the same name; rename it"
            )
        if game is None or entry["game"] == game:
            entries.append((entry, file, data))
    members: list[PoolMember] = []
    for entry, file, data in entries:
        try:
            code = data.decode("utf-8")
        except UnicodeDecodeError:
            raise PoolError(f"pool member {_shown(entry['name'])} ({_shown(entry['file'])}): not UTF-8 text") from None
        member = PoolMember(
            name=entry["name"],
            game=entry["game"],
            pool=entry["pool"],
            factory=_sandboxed_factory(entry, code, sandbox or SandboxConfig()),
            description=entry["description"],
            source=dict(entry["source"]),
            file=str(file),
            sha256=entry["sha256"].lower(),
        )
        smoke_test(member)
        members.append(member)
    return members


# ------------------------------------------------------------------------------------------------
# the pools of one game


@dataclass(frozen=True)
class Pools:
    """The three pools of one game: member names per pool and a registry of every member by name.

    A name may sit in two pools (separation by role); its registry entry carries its first role in
    `POOL_NAMES` order, and `roles(name)` lists them all. Callers pass the pool with the name."""

    game: str
    members: Mapping[str, tuple[str, ...]]  # pool -> member names
    registry: Mapping[str, PoolMember]  # name -> member (pool members only)

    def names(self, pool: str) -> tuple[str, ...]:
        """Member names of `pool`."""
        _check_pool(pool)
        return self.members[pool]

    def roles(self, name: str) -> tuple[str, ...]:
        """The pools `name` belongs to, in `POOL_NAMES` order (PoolError for a name in none)."""
        self._member(name)
        return tuple(pool for pool in POOL_NAMES if name in self.members[pool])

    def sample(self, pool: str, rng: random.Random) -> str:
        """A member name of `pool`, drawn uniformly with the caller's seeded rng."""
        names = self.names(pool)
        if not names:
            raise PoolError(f"the {pool!r} pool of {self.game!r} is empty")
        return names[rng.randrange(len(names))]

    def make(self, name: str, game: str | None = None) -> Strategy:
        """A fresh strategy instance for member `name` (one per rollout: strategies keep state)."""
        if game is not None and game != self.game:
            raise PoolError(f"these pools are for game {self.game!r}, not {game!r}")
        return self._member(name).factory()

    def _member(self, name: str) -> PoolMember:
        if name not in self.registry:
            raise PoolError(
                f"{name!r} is not in any pool of {self.game!r}; "
                f"pool members: {', '.join(sorted(self.registry))}"
            )
        return self.registry[name]


def _scripted_member(game: str, pool: str, name: str, cls: type[Strategy]) -> PoolMember:
    return PoolMember(
        name=name, game=game, pool=pool, factory=cls, description=cls.description, source={"kind": "scripted"}
    )


def load_pools(
    game: str,
    extra_dir: str | Path | None = None,
    overrides: Mapping[str, Sequence[str]] | None = None,
    sandbox: SandboxConfig | None = None,
    strict: bool = False,
) -> Pools:
    """The pools of `game`: defaults, plus the members of `extra_dir` (added to their manifest pool, each
    played in the sandbox `sandbox`), with `overrides` ({pool: [names]}) replacing whole pools. Raises
    PoolError on unknown names or on a forbidden overlap (`check_separation`). With `strict`, a default
    training opponent that also probes (exploit or collusive) leaves the training pool, and any remaining
    overlap is an error.
    """
    _check_game(game)
    extras = load_pool_dir(extra_dir, game, sandbox) if extra_dir is not None else []
    return pools_with(game, extras, overrides, strict)


def pools_with(
    game: str,
    extras: Sequence[PoolMember] = (),
    overrides: Mapping[str, Sequence[str]] | None = None,
    strict: bool = False,
) -> Pools:
    """`load_pools` from already loaded (validated and smoke-tested) `extras` of `game`: one run loads a pool
    directory once and builds its training and evaluation pools from the same members."""
    _check_game(game)
    scripted = strategy_registry(game)
    loaded = {m.name: m for m in extras}
    members: dict[str, list[str]] = {pool: list(names) for pool, names in game_spec(game).pools.items()}
    if strict:
        probes = set(members["exploit"]) | set(members["collusive"])
        members["training"] = [n for n in members["training"] if n not in probes]
    for member in loaded.values():
        members[member.pool].append(member.name)
    for pool, names in (overrides or {}).items():
        _check_pool(pool)
        if isinstance(names, str):
            raise PoolError(f"override for pool {pool!r} must be a list of names, not the string {names!r}")
        members[pool] = list(names)
    known = sorted(set(scripted) | set(loaded))
    for pool in POOL_NAMES:
        for name in members[pool]:
            if name not in scripted and name not in loaded:
                raise PoolError(
                    f"unknown strategy {name!r} in the {pool!r} pool of {game!r}; "
                    f"choose from: {', '.join(known)}"
                )
    check_separation(game, members, strict)
    registry: dict[str, PoolMember] = {}
    for pool in POOL_NAMES:
        for name in members[pool]:
            if name in registry:  # a second role: the entry keeps the first (see Pools.roles)
                continue
            if name in loaded:
                registry[name] = replace(loaded[name], pool=pool)
            else:
                registry[name] = _scripted_member(game, pool, name, scripted[name])
    return Pools(game=game, members={pool: tuple(members[pool]) for pool in POOL_NAMES}, registry=registry)
