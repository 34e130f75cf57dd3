"""`fmsp match`: play two policy files against each other through the sandbox and write the result as JSON.

    fmsp match --domain car_tag --a pursuer.py --b evader.py [--games 100] --json out.json

`--a` plays the domain's first side (Car Tag's pursuer, Gandalf's attacker, a SEPO game's exploiter; SEPO-game
matches alternate seats, so either side can hold any policy), `--b` the second. The output is
``{"a": {"score": float | null, "failure": null | {"kind", "message", "detail"}, "file", "name"}, "b": {...},
"details", "wall_s", "cpu_s", "sandbox", "rng_key"}`` (cpu_s measured by the host; rng_key the secret that keyed the
policies' rngs and the deals: `--rng-key` replays the match). The exit status is 0 whenever the match was played, even if a
policy failed (that is a result); 2 for a usage error or a sandbox that cannot run here; 1 when the harness itself
failed, with the record still written (both scores null, `harness_error` the traceback). This is how a user
vets a policy by hand, and how the red-team tests drive the sandbox.
"""

from __future__ import annotations

import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.sandbox import SandboxConfig, SandboxUnavailable
from envs.sandbox.rng import new_rng_key
from envs.sandbox.text import safe_text
from fmsp.domain import PolicyCode
from fmsp.domains import DOMAINS, make_domain
from fmsp.sandbox import MatchOutcome, Sandbox
from sepo.config.checks import UsageError, check_choice
from sepo.config.recipes import RecipeParser
from sepo.files import write_json_atomic

# The domain config key that counts the games of a match.
GAMES_KEY = {"car_tag": "n_games", "gandalf": "n_games"}  # SEPO games: "n_episodes"


@dataclass
class MatchConfig:
    """The keys of `fmsp match` (command line or `--config` recipe); the checks run when it is built."""

    domain: str = field(metadata={"help": "the domain the policies play", "choices": sorted(DOMAINS)})
    a: str = field(metadata={"help": "policy file of the first side", "metavar": "FILE"})
    b: str = field(metadata={"help": "policy file of the second side", "metavar": "FILE"})
    json: str = field(metadata={"help": "where to write the result", "metavar": "OUT"})
    games: int | None = field(default=None, metadata={"help": "games (SEPO games: episodes) in the match"})
    domain_config: dict[str, Any] = field(
        default_factory=dict, metadata={"help": "overrides of the domain config (JSON or YAML flow)"})
    timeout: float = field(default=300.0, metadata={"help": "wall-clock seconds per policy process"})
    call_timeout: float = field(default=10.0, metadata={"help": "wall-clock seconds per request"})
    rng_key: str = field(default="", metadata={"help": "secret key of the policies' rngs and the deals (default: a "
                                               "new one, written to the record as rng_key; pass it again to replay "
                                               "the match)"})  # fmt: skip
    unsafe_sandbox: bool = field(
        default=False,
        metadata={"help": "run even where an isolation layer is missing (the present layers still apply)"})

    def __post_init__(self) -> None:
        check_choice("domain", self.domain, sorted(DOMAINS))  # a recipe's value (argparse checks the flag's)
        if self.games is not None and self.games < 1:
            raise UsageError(f"--games must be >= 1, got {self.games}")


def parser():
    """The command line of `fmsp match`."""
    return RecipeParser((MatchConfig,), prog="fmsp match", description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None) -> int:

    (args,) = parser().parse(argv)
    try:
        overrides = dict(args.domain_config)
        if args.games is not None:
            overrides[GAMES_KEY.get(args.domain, "n_episodes")] = args.games
        domain = make_domain(args.domain, **overrides)
        config = SandboxConfig(total_timeout_s=args.timeout, call_timeout_s=args.call_timeout, unsafe=args.unsafe_sandbox,
                               rng_key=args.rng_key or new_rng_key())
        codes = [Path(f).read_text(encoding="utf-8") for f in (args.a, args.b)]
    except (ValueError, OSError) as exc:
        raise UsageError(str(exc)) from exc
    sandbox = Sandbox(config)
    try:
        layers = sandbox.check()
    except SandboxUnavailable as exc:
        raise UsageError(str(exc)) from exc
    print(layers, file=sys.stderr)
    policies = [PolicyCode(Path(f).stem, "", code, side) for f, code, side in zip((args.a, args.b), codes, domain.sides)]
    try:
        record, status = sandbox.play(domain, *policies).to_dict(), 0
    except Exception as exc:  # noqa: BLE001 - a harness fault: the record is still written, saying so (exit 1)
        record, status = MatchOutcome(None, None).to_dict(), 1
        record["harness_error"] = safe_text("".join(traceback.format_exception(exc, limit=-8)), 8000, multiline=True)
    for key, policy, path in zip("ab", policies, (args.a, args.b)):
        record[key].update(file=str(path), name=policy.name, side=policy.side)
    record.update(domain=domain.name, sandbox=layers, rng_key=config.rng_key)
    write_json_atomic(Path(args.json), record)
    if status:
        print(f"the harness failed (not either policy): {record['harness_error'].splitlines()[-1]}", file=sys.stderr)
        return status
    for key in "ab":
        side = record[key]
        failure = side["failure"]
        if failure:
            shown = f"FAILED ({failure['kind']}: {safe_text(failure['message'], 500)})"  # the policy's words
        else:
            shown = "no score (the other policy failed)" if side["score"] is None else f"score {side['score']:.4f}"
        print(f"{key} ({side['side']}, {safe_text(side['name'], 100)}): {shown}")
    return 0
