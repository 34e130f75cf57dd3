"""`sepo data`: expert-transcript SFT datasets from the demonstrator mixtures of the method.

For every game, a demonstrator drawn from the mixture the game's registration declares (`envs.game_spec(game)
.demonstration`; docs/references.md#sft-demonstrators) plays the LLM's seat against each of its opponents. Every demonstrator decision becomes one conversational prompt–completion row:
the prompt is the whole conversation so far exactly as the rollout engine renders it (system prompt,
observations, earlier assistant turns), the completion is one short line of reasoning grounded in the state
followed by the action alone on the last line — which the game's own `parse_action` must read back (tested).
The reasoning is the game's own rationale (`GameSpec.rationale`).

Deterministic given the seed; the train/validation split is by episode, so no episode leaks across it.

    sepo data --games GAME [GAME ...] --out sft_data/generated [--seed 0] [--episodes-scale 1.0] [--samples 3]
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import envs
from envs.base import View
from sepo.checks import Range, check_names, check_output_dir, first_games
from sepo.files import replace_dir_atomic, write_json_atomic, write_jsonl_atomic
from sepo.recipes import RecipeParser

CHAT_TEMPLATE_KWARGS = {"enable_thinking": False}  # action turns never think (Qwen 3.5 renders an empty block)


def episode_transcripts(
    game_name: str, seed: int, episodes_scale: float = 1.0, game_params: dict[str, Any] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield one row per demonstrator decision for every episode of `game_name`'s demonstration budget."""
    demo = envs.game_spec(game_name).demonstration
    game = envs.make_game(game_name, **(game_params or {}))
    names, weights = zip(*demo.mixture.items())
    n_episodes = max(1, round(demo.episodes_per_opponent * episodes_scale))
    for opponent_name in demo.opponents:
        for ep in range(n_episodes):
            rng = random.Random(f"{seed}/{game_name}/{opponent_name}/{ep}")
            demonstrator_name = rng.choices(names, weights=weights)[0]
            seat = rng.randrange(2)
            yield from _play(game, game_name, demonstrator_name, opponent_name, seat, rng,
                             episode_id=f"{game_name}/{opponent_name}/{ep}")


def _play(game, game_name, demonstrator_name, opponent_name, seat, rng, episode_id) -> Iterator[dict[str, Any]]:
    rationale = envs.game_spec(game_name).rationale
    players = {seat: envs.make_strategy(game_name, demonstrator_name),
               1 - seat: envs.make_strategy(game_name, opponent_name)}
    state = game.new_state(random.Random(rng.random()))
    for s, player in players.items():
        player.reset(game, s, random.Random(rng.random()))
    messages: list[dict[str, str]] = [{"role": "system", "content": game.system_prompt(seat)}]
    turn = 0
    while not game.is_terminal(state):
        actions = {}
        for s in game.current_players(state):
            view: View = game.view(state, s)
            actions[s] = players[s].act(view)
            if s == seat:
                text = f"{rationale(view, actions[s])}\n{actions[s]}"
                if game.parse_action(text, state, seat) != actions[s]:  # every row must read back exactly
                    raise RuntimeError(f"{game_name}: demonstration {text!r} does not parse as {actions[s]!r}")
                messages.append({"role": "user", "content": game.observation(state, seat)})
                yield {
                    "prompt": list(messages),
                    "completion": [{"role": "assistant", "content": text}],
                    "chat_template_kwargs": dict(CHAT_TEMPLATE_KWARGS),
                    "game": game_name,
                    "demonstrator": demonstrator_name,
                    "opponent": opponent_name,
                    "seat": seat,
                    "episode_id": episode_id,
                    "turn": turn,
                    "action": actions[s],
                }
                messages.append({"role": "assistant", "content": text})
                turn += 1
        game.step(state, actions)


def generate(
    games: list[str],
    seed: int = 0,
    episodes_scale: float = 1.0,
    validation_fraction: float = 0.2,
    game_params: dict[str, dict[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Rows for every game, split by episode into {"train": [...], "validation": [...]}.

    game_params: per-game parameter overrides, e.g. {"<game>": {"num_rounds": 4}}."""
    unknown = [g for g in games if g not in envs.GAMES]
    if unknown:
        raise ValueError(f"no demonstrations for {unknown}; choose from: {', '.join(envs.GAMES)}")
    split: dict[str, list[dict[str, Any]]] = {"train": [], "validation": []}
    for game_name in games:
        for row in episode_transcripts(game_name, seed, episodes_scale, (game_params or {}).get(game_name)):
            bucket = random.Random(f"{seed}/split/{row['episode_id']}").random() < validation_fraction
            split["validation" if bucket else "train"].append(row)
    return split


def build_dataset(
    games: list[str],
    seed: int = 0,
    episodes_scale: float = 1.0,
    validation_fraction: float = 0.2,
    game_params: dict[str, dict[str, Any]] | None = None,
):
    """The same rows as a `datasets.DatasetDict` (train / validation)."""
    # deferred: datasets takes seconds to import; only dataset building needs it
    from datasets import Dataset, DatasetDict

    rows = generate(games, seed, episodes_scale, validation_fraction, game_params)
    return DatasetDict({name: Dataset.from_list(part) for name, part in rows.items() if part})


def stats(rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Counts per split, game, demonstrator and opponent (for the dataset card)."""
    out: dict[str, Any] = {}
    for split, part in rows.items():
        out[split] = {
            "rows": len(part),
            "episodes": len({r["episode_id"] for r in part}),
            "by_game": dict(Counter(r["game"] for r in part)),
            "by_demonstrator": dict(Counter(f"{r['game']}/{r['demonstrator']}" for r in part)),
        }
    return out


@dataclass
class DataConfig:
    """The keys of `sepo data` (command line or `--config` recipe); the checks run when it is built."""

    games: list[str] = field(default_factory=lambda: list(envs.GAMES),
                             metadata={"help": "games to generate (space- or comma-separated)", "metavar": "GAME"})
    out: str = field(default="sft_data/generated", metadata={"help": "output directory"})
    seed: int = field(default=0, metadata={"help": "seed of the demonstrator draws and the split"})
    episodes_scale: float = field(
        default=1.0, metadata={"help": "scales the method's episode counts (docs/references.md#sft-demonstrators)"})
    validation_fraction: float = field(default=0.2, metadata={"help": "share of episodes in the validation split"})
    samples: int = field(default=0, metadata={"help": "also write N sample rows per game (0: none)"})
    samples_dir: str | None = field(
        default=None,
        metadata={"help": "where the samples go (default: <out>/samples; the committed ones: sft_data/samples)"})
    game_params: dict[str, Any] | None = field(
        default=None,
        metadata={"help": f"per-game parameters as JSON or YAML flow, e.g. '{{\"{first_games(1)[0]}\": "
                          "{\"num_rounds\": 4}}'"})

    def __post_init__(self) -> None:
        self.games = check_names("game", self.games, envs.GAMES)
        Range(0, low_open=True).check("--episodes-scale", self.episodes_scale)
        Range(0, 1, high_open=True).check("--validation-fraction", self.validation_fraction)
        Range(0, integer=True).check("--samples", self.samples)
        Range(0, integer=True).check("--seed", self.seed)
        check_output_dir("--out", self.out)
        check_output_dir("--samples-dir", self.samples_path)

    @property
    def samples_path(self) -> Path:
        """Where the sample rows go: samples_dir, else <out>/samples."""
        return Path(self.samples_dir or Path(self.out) / "samples")


def parser() -> RecipeParser:
    """The command line of `sepo data`."""
    return RecipeParser((DataConfig,), prog="sepo data", description=__doc__.split("\n\n")[0])


def main(argv: list[str] | None = None) -> int:
    (args,) = parser().parse(argv)
    games, samples_dir = args.games, args.samples_path
    rows = generate(games, args.seed, args.episodes_scale, args.validation_fraction, args.game_params)
    # deferred: datasets takes seconds to import; only dataset building needs it
    from datasets import Dataset, DatasetDict

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, part in rows.items():
        write_jsonl_atomic(out / f"{split}.jsonl", part)
    dataset = DatasetDict({k: Dataset.from_list(v) for k, v in rows.items() if v})
    replace_dir_atomic(lambda tmp: dataset.save_to_disk(str(tmp)), out / "dataset")
    summary = {"games": games, "seed": args.seed, "episodes_scale": args.episodes_scale,
               "game_params": args.game_params or {}, **stats(rows)}
    write_json_atomic(out / "stats.json", summary)
    for game in games if args.samples else ():
        picked = [r for r in rows["train"] if r["game"] == game][: args.samples]
        write_jsonl_atomic(samples_dir / f"{game}.jsonl", picked)
    print(json.dumps(summary["train"], indent=2))
    print(f"wrote {out}/train.jsonl, validation.jsonl, dataset/ and stats.json"
          + (f"; samples in {samples_dir}" if args.samples else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
