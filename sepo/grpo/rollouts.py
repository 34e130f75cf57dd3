"""One rank's rollout batch of a SEPO-GRPO step: its episodes (plus probe episodes), their credited per-round
rewards, and the token-level columns TRL's `rollout_func` returns.

Plain functions of the run's settings (`RolloutContext`), so the trainer class only wires them to TRL: the
rewards are computed here once per rollout (`credit`), and both TRL's scalar reward (`SEPOReward`) and the
per-round advantages (`sepo.grpo.scoring`) read them from the rollout's extra columns.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sepo.generation import GenerationBackend, SamplingSpec
from sepo.grpo.config import SEPOConfig
from sepo.grpo.rewards import SEPOReward
from sepo.objective import PROBE_CREDITS
from sepo.pools import Pools
from sepo.rollout.chat import ChatRenderer
from sepo.rollout.engine import EpisodeSpec, OpponentFactory, PhaseTimer, play_episodes

Played = list[tuple[Any, Any, list[Any]]]
"""`play`'s results: (record, trajectory, probe records) per rollout, in the batch's order."""

ROLLOUT_COLUMNS = ("prompt_ids", "completion_ids", "logprobs", "env_mask", "round_ids", "forced_mask", "unparsed_mask",
                   "episode", "probes", "round_rewards", "probe_penalty")


@dataclass(frozen=True)
class RolloutContext:
    """What playing a rank's batch needs from the run: its config and pools (training), the chat renderer,
    the sampling of action turns, the rank (offset of its rows in the global batch, whether generation is a
    collective) and the FMSP-exported members' factories (scripted ones are built by the rollout)."""

    args: SEPOConfig
    pools: Mapping[str, Pools]
    renderer: ChatRenderer
    sampling: SamplingSpec
    process_index: int = 0
    num_processes: int = 1
    factories: Mapping[str, OpponentFactory] = field(default_factory=dict)


def rollout_sampling(args: SEPOConfig) -> SamplingSpec:
    """The sampling of the rollouts' action turns: the run's temperature, top-p, top-k and turn length."""
    return SamplingSpec(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k or 0,
                        max_new_tokens=args.max_turn_tokens)


def exported_factories(pools: Mapping[str, Pools]) -> dict[str, OpponentFactory]:
    """name -> factory of every pool member that is not a scripted strategy of its game (FMSP-exported ones,
    the adaptive exploiter)."""
    return {m.name: m.factory for p in pools.values() for m in p.registry.values()
            if m.source.get("kind") != "scripted"}


def episode_spec(args: SEPOConfig, game: str, pool: str, opponent: str, seed: int, seat: int) -> EpisodeSpec:
    """The episode of one rollout (or probe) against `opponent` of `pool`, with the run's game parameters."""
    return EpisodeSpec(game=game, game_params=dict(args.game_params.get(game, {})), pool=pool,
                       opponent=opponent, seed=seed, seat=seat)


def probe_specs(args: SEPOConfig, pools: Mapping[str, Pools], row: dict[str, Any], index: int) -> list[EpisodeSpec]:
    """credit shared / auxiliary: the probe episodes of one training rollout (`index`: its position in
    the global batch), one against every exploiter and every collusive partner of the game's pools, as
    the method's code played them, each with its own seed; their penalty reaches this rollout
    (auxiliary) or the group mean does (shared)."""
    rng = random.Random(f"{row['seed']}:{index}:probes")
    game_pools = pools[row["game"]]
    return [episode_spec(args, row["game"], pool, name, rng.randrange(2**31), int(row["seat"]))
            for pool in ("exploit", "collusive") for name in game_pools.names(pool)]


def play(ctx: RolloutContext, rows: list[dict[str, Any]], backend: GenerationBackend, timer: PhaseTimer) -> Played:
    """Play one episode per row in one lock-step batch, then (credit shared or auxiliary) the rows' probe
    episodes in another, with the same number of generation calls on every rank; returns (record,
    trajectory, probe records). `timer` accumulates both batches' phases (its generation laps: the calls).

    The probes sample from their own seeded stream (`probe_sampling`), which leaves the run's random state as
    they found it (HF and vLLM colocate; TRL's vLLM server client takes no per-request seed). A probe arm then
    starts every step from the random state `reward_only` would have at the same weights, so `shared`, whose
    advantages equal reward_only's, stays identical to it, and the arms differ only in their penalty."""
    args = ctx.args
    specs = [episode_spec(args, r["game"], r["pool"], r["opponent"], int(r["seed"]), int(r["seat"])) for r in rows]
    first = ctx.process_index * len(rows)  # this rank's offset in the global batch
    probes = [probe_specs(args, ctx.pools, r, first + i) if args.credit in PROBE_CREDITS else []
              for i, r in enumerate(rows)]
    flat = [spec for specs_i in probes for spec in specs_i]
    how = dict(opponents=ctx.factories, fallback=args.fallback, trajectories=True, collective=ctx.num_processes > 1,
               turn_decode=args.turn_decode, timer=timer)
    main = play_episodes(specs, backend, ctx.renderer, ctx.sampling, **how)
    rest = iter(play_episodes(flat, backend, ctx.renderer, probe_sampling(ctx.sampling, rows), **how)
                if flat else [])
    return [(record, traj, [next(rest)[0] for _ in probes_i]) for (record, traj), probes_i in zip(main, probes)]


def probe_sampling(sampling: SamplingSpec, rows: list[dict[str, Any]]) -> SamplingSpec:
    """The probe episodes' sampling: the rollouts' settings with a seed of their own, drawn from the rows'
    episode seeds (a seeded call runs on its own generator: HF forks torch's RNG, a vLLM colocate engine seeds
    each request)."""
    rng = random.Random(":".join(str(r["seed"]) for r in rows) + ":probe-sampling")
    return replace(sampling, seed=rng.randrange(2**31))


def rollout_columns(results: Played, reward: SEPOReward, eos_ids: set[int], end_of_turn_id: int,
                    mask_forced_tokens: bool) -> dict[str, list]:
    """TRL's rollout_func output for played rollouts: prompt/completion ids, sampling logprobs, env_mask, and
    the extra columns TRL hands to the reward function and the advantages (`ROLLOUT_COLUMNS`): per-token round
    ids, forced and unparsed masks, the episode and probe records, and the credited per-round rewards with the
    probe penalty (`SEPOReward.round_rewards`, computed here once per rollout)."""
    out: dict[str, list] = {k: [] for k in ROLLOUT_COLUMNS}
    for record, traj, probes in results:
        ids, lps = list(traj.completion_ids), list(traj.logprobs)
        env, rids, forced, unparsed = (list(traj.env_mask), list(traj.round_ids), list(traj.forced_mask),
                                       list(traj.unparsed_mask))
        if not ids or ids[-1] not in eos_ids:  # end with end-of-turn so TRL does not count it as truncated
            ids.append(end_of_turn_id)
            lps.append(0.0)
            env.append(0)
            rids.append(rids[-1] if rids else 0)
            forced.append(0)
            unparsed.append(0)
        if mask_forced_tokens:
            env = [e * (1 - f) for e, f in zip(env, forced)]
        rewards, penalty = reward.round_rewards(record, probes)
        for key, value in (("prompt_ids", list(traj.prompt_ids)), ("completion_ids", ids), ("logprobs", lps),
                           ("env_mask", env), ("round_ids", rids), ("forced_mask", forced), ("unparsed_mask", unparsed),
                           ("episode", record), ("probes", probes), ("round_rewards", rewards),
                           ("probe_penalty", penalty)):
            out[key].append(value)
    return out
