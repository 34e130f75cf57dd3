"""`sepo eval`: checkpoints against the opponent pools, side by side, with exact Kuhn exploitability.

For every model and game, each opponent of each pool (training / exploit / collusive) is played
`episodes_per_opponent` times (seats alternate, seeds fixed) through the batched lock-step rollout engine.
The metrics are those of `sepo.objective.aggregate` (payoff, exploit-pool advantage, collusion,
externality, safety score J, welfare, NRA in both forms) plus fallback and parse-failure rates and action
frequencies (card-conditioned for Kuhn). For Kuhn the model's policy at each of the 12 information sets of
the classic hand is measured by scoring the legal actions (see `kuhn_policy`) and its exact
exploitability is computed. Stochastic decoding by default (temperature 0.8), greedy as an option.

Outputs in `output_dir`: results.json, results.md (one table per game, models as rows, as in the method's
Base / SFT / SEPO tables), one PNG per game, and wandb when `report_to: wandb`.

    sepo eval --models Base=default SFT=runs/sft/merged --games ipd,kuhn [--config configs/eval/ipd.yaml]
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import envs
from sepo.files import write_text_atomic
from sepo.objective import EpisodeTerms, Metrics, aggregate, episode_terms, resolve_lambdas
from sepo.pools import POOL_NAMES, load_pools


@dataclass
class EvalConfig:
    """What to evaluate and how. Models are `path`, a hub id, `default`, a LoRA adapter directory (its
    base comes from adapter_config.json), each optionally labelled `Label=spec`."""

    models: list[str] = field(default_factory=lambda: ["default"], metadata={"help": "[Label=]model specs"})
    games: list[str] = field(default_factory=lambda: ["ipd"], metadata={"help": "game names"})
    game_params: dict[str, Any] | str | None = field(
        default=None, metadata={"help": "per-game parameters, e.g. {ipd: {num_rounds: 4}} (JSON on the CLI)"}
    )
    episodes_per_opponent: int = field(default=16, metadata={"help": "episodes per (pool, opponent)"})
    pools: list[str] = field(default_factory=lambda: list(POOL_NAMES), metadata={"help": "pools to play"})
    temperature: float = 0.8
    top_p: float = 0.95
    greedy: bool = field(default=False, metadata={"help": "greedy decoding instead of sampling"})
    max_turn_tokens: int = field(default=96, metadata={"help": "new tokens per model turn before the fallback"})
    seed: int = 0
    backend: str = field(default="hf", metadata={"help": "hf | vllm | openai"})
    base_url: str | None = field(default=None, metadata={"help": "OpenAI-compatible endpoint (backend openai)"})
    dtype: str | None = field(default=None, metadata={"help": "model dtype, e.g. bfloat16 (default: auto)"})
    pools_dir: str | None = field(default=None, metadata={"help": "extra pool members (an `fmsp export` dir)"})
    use_eval_lambdas: bool = field(default=True, metadata={"help": "the game's evaluation λ where it has them"})
    kuhn_exact: bool = field(default=True, metadata={"help": "measure the Kuhn policy and its exploitability"})
    kuhn_rationale_samples: int = field(default=4, metadata={"help": "sampled rationales per info set"})
    enable_thinking: bool = False
    output_dir: str = "runs/eval"
    report_to: str = field(default="none", metadata={"help": "none | wandb"})
    wandb_project: str = "sepo"
    progress: bool = True


# ------------------------------------------------------------------------------------------------
# one model on one game


def _labelled(spec: str) -> tuple[str, str]:
    if "=" in spec and not spec.startswith(("/", ".")):
        label, model = spec.split("=", 1)
        return label, model
    return Path(spec).name or spec, spec


def episode_specs(
    game: str, pools, episodes_per_opponent: int, seed: int, which=POOL_NAMES, params: dict | None = None
) -> list:
    """Every (pool, opponent) × episodes, with seats alternating and per-episode seeds fixed by `seed`."""
    from sepo.rollout.engine import EpisodeSpec

    specs = []
    for pool in which:
        for opponent in pools.names(pool):
            for i in range(episodes_per_opponent):
                episode_seed = random.Random(f"{seed}/{game}/{pool}/{opponent}/{i}").randrange(2**31)
                specs.append(EpisodeSpec(game=game, game_params=dict(params or {}), pool=pool, opponent=opponent,
                                         seed=episode_seed, seat=i % 2))
    return specs


def kuhn_card_frequencies(records) -> dict[str, dict[str, float]]:
    """Card-conditioned action rates of the agent: bet rate with no bet pending, call rate facing a bet."""
    counts: dict[str, Counter] = {"bet": Counter(), "open": Counter(), "call": Counter(), "facing": Counter()}
    for rec in records:
        seat = rec.agent_seat
        for hand in rec.rounds:
            card = hand.record["cards"][seat]
            for actor, action in hand.record["actions"]:
                if actor != seat:
                    continue
                if action in ("PASS", "BET"):
                    counts["open"][card] += 1
                    counts["bet"][card] += action == "BET"
                else:
                    counts["facing"][card] += 1
                    counts["call"][card] += action == "CALL"
    cards = ("J", "Q", "K")
    return {
        "bet": {c: counts["bet"][c] / counts["open"][c] if counts["open"][c] else float("nan") for c in cards},
        "call": {c: counts["call"][c] / counts["facing"][c] if counts["facing"][c] else float("nan") for c in cards},
    }


def kuhn_policy(backend, renderer, sampling, samples: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """The model's policy at the 12 information sets of the classic hand (player 0 acts first).

    Each info set is rendered as the first hand of an episode. The model writes its own reasoning
    (`samples` sampled turns; one greedy turn when sampling is greedy); the answer line is cut off and every
    legal action is scored as the last line given that reasoning (teacher-forced log-likelihood). The
    policy is the mean over reasoning samples: P(a) = E_r[P(a | r)], exact given the sampled reasoning.
    """
    from envs.kuhn import CARDS, INFO_STATES, KuhnPoker, KuhnState, actions_at
    from sepo.backends.base import Prompt

    game = KuhnPoker()
    n = 1 if sampling.greedy else max(1, samples)
    prompts, infosets, messages_per = [], [], []
    for info in INFO_STATES:
        card, history = info[0], info[1:]
        player = len(history) % 2
        other = next(c for c in CARDS if c != card)
        deal = (card, other) if player == 0 else (other, card)
        state = KuhnState(deals=[deal])
        letters = {"p": ("PASS", "FOLD"), "b": ("BET", "CALL")}
        for k, letter in enumerate(history):
            facing = history[:k].endswith("b")
            state.betting.append((k % 2, letters[letter][1 if facing else 0]))
        messages = [{"role": "system", "content": game.system_prompt(player)},
                    {"role": "user", "content": game.observation(state, player)}]
        ids = renderer.prompt_ids(messages)
        for _ in range(n):
            prompts.append(Prompt(ids=ids, messages=messages))
            infosets.append(info)
            messages_per.append(messages)
    turns = backend.generate(prompts, sampling)
    score_prompts, choices = [], []
    for prompt, turn, info in zip(prompts, turns, infosets):
        reasoning = renderer.strip_thinking(turn.text).strip().splitlines()[:-1]
        prefix = "\n".join(reasoning) + "\n" if reasoning else ""
        ids = prompt.ids + renderer.tokenizer.encode(prefix, add_special_tokens=False)
        score_prompts.append(Prompt(ids=ids, messages=prompt.messages, assistant_prefix=prefix))
        choices.append(list(actions_at(info[1:])))
    probs = backend.score_choices(score_prompts, choices)
    policy: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for info, acts, p in zip(infosets, choices, probs):
        for a, q in zip(acts, p):
            policy[info][a] += q / n
    return {k: dict(v) for k, v in policy.items()}


def evaluate_game(backend, renderer, game_name: str, cfg: EvalConfig) -> dict[str, Any]:
    """Play every pool opponent and return the JSON-able metrics of one model on one game."""
    from sepo.backends.base import SamplingSpec
    from sepo.rollout.engine import play_episodes

    params = cfg.game_params.get(game_name, {})
    game = envs.make_game(game_name, **params)
    lambdas = resolve_lambdas(game, evaluation=cfg.use_eval_lambdas)
    pools = load_pools(game_name, extra_dir=cfg.pools_dir)
    sampling = SamplingSpec(temperature=cfg.temperature, top_p=cfg.top_p, greedy=cfg.greedy,
                            max_new_tokens=cfg.max_turn_tokens, seed=cfg.seed)
    specs = episode_specs(game_name, pools, cfg.episodes_per_opponent, cfg.seed, cfg.pools, params)
    factories = {name: (lambda n=name: pools.make(n)) for pool in POOL_NAMES for name in pools.names(pool)}
    results = play_episodes(specs, backend, renderer, sampling, opponents=factories, fallback=True,
                            trajectories=False, progress=cfg.progress)
    records = [rec for rec, _ in results]
    terms: list[EpisodeTerms] = [
        episode_terms(rec.rounds, rec.agent_seat, spec.pool, game.max_payoff, spec.opponent)
        for spec, rec in zip(specs, records)
    ]
    metrics: Metrics = aggregate(terms, lambdas)
    turns = [t for rec in records for t in rec.turns]
    actions: dict[str, Counter] = defaultdict(Counter)
    for spec, rec in zip(specs, records):
        actions[spec.pool].update(t.action for t in rec.turns)
    out: dict[str, Any] = {
        "game": game_name,
        "lambdas": asdict(lambdas),
        "episodes": len(records),
        "decisions": len(turns),
        "metrics": {k: v for k, v in asdict(metrics).items() if k != "opponents"},
        "opponents": [asdict(o) for o in metrics.opponents],
        "fallback_rate": sum(t.fallback for t in turns) / max(1, len(turns)),
        "parse_failure_rate": sum(not t.parsed for t in turns) / max(1, len(turns)),
        "action_frequencies": {
            pool: {a: n / sum(c.values()) for a, n in sorted(c.items())} for pool, c in actions.items()
        },
    }
    if game_name == "kuhn":
        out["card_frequencies"] = kuhn_card_frequencies(records)
        if cfg.kuhn_exact:
            from envs.kuhn_exact import exploitability

            policy = kuhn_policy(backend, renderer, sampling, cfg.kuhn_rationale_samples, cfg.seed)
            out["kuhn_policy"] = policy
            out["exploitability"] = exploitability(policy)
    return out


def load_backend(model: str, cfg: EvalConfig):
    """A generation backend for `model` (adapter directories load on their base)."""
    from sepo.backends import make_backend

    kwargs: dict[str, Any] = {}
    if cfg.backend == "openai":
        kwargs["base_url"] = cfg.base_url
    elif cfg.dtype:
        kwargs["dtype"] = cfg.dtype
    return make_backend(cfg.backend, model, **kwargs)  # the HF backend loads adapter directories on their base


# ------------------------------------------------------------------------------------------------
# reporting

COLUMNS = [  # (header, getter) for the markdown table
    ("Pay", lambda r: r["metrics"]["payoff"]),
    ("Exploit", lambda r: r["metrics"]["exploit"]),
    ("Coll", lambda r: r["metrics"]["c"]),
    ("Ext", lambda r: r["metrics"]["x"]),
    ("Safety J", lambda r: r["metrics"]["safety"]),
    ("NRA (GTBench)", lambda r: r["metrics"]["nra_gtbench"]),
    ("NRA (method)", lambda r: r["metrics"]["nra_sepo"]),
    ("Welfare", lambda r: r["metrics"]["welfare"]),
    ("Fallback", lambda r: r["fallback_rate"]),
    ("Parse fail", lambda r: r["parse_failure_rate"]),
]


def markdown(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """One table per game, models as rows (Pay and Exploit raw per round; J with the game's λ)."""
    lines: list[str] = []
    games = sorted({g for per_model in results.values() for g in per_model})
    for game in games:
        rows = [(label, per[game]) for label, per in results.items() if game in per]
        lam = rows[0][1]["lambdas"]
        lines += [f"### {game}  (λe={lam['e']}, λc={lam['c']}, λx={lam['x']})", ""]
        headers = [h for h, _ in COLUMNS]
        if game == "kuhn":
            headers += ["Exploitability", "Bet J/Q/K", "Call J/Q/K"]
        lines.append("| Model | " + " | ".join(headers) + " |")
        lines.append("|---" * (len(headers) + 1) + "|")
        for label, r in rows:
            cells = [f"{get(r):+.3f}" if h in ("Safety J",) else f"{get(r):.3f}" for h, get in COLUMNS]
            if game == "kuhn":
                cf = r["card_frequencies"]
                cells.append(f"{r['exploitability']:.3f}" if "exploitability" in r else "-")
                cells.append("/".join(f"{cf['bet'][c]:.2f}" for c in "JQK"))
                cells.append("/".join(f"{cf['call'][c]:.2f}" for c in "JQK"))
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, dict[str, dict[str, Any]]], out_dir: Path) -> list[Path]:
    """One PNG per game: the headline metrics per model as grouped bars (plus Kuhn card-conditioned play)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    games = sorted({g for per_model in results.values() for g in per_model})
    metrics = ["Pay", "Exploit", "Coll", "Ext", "Safety J", "Fallback"]
    getters = dict(COLUMNS)
    for game in games:
        labels = [label for label, per in results.items() if game in per]
        kuhn = game == "kuhn"
        fig, axes = plt.subplots(1, 2 if kuhn else 1, figsize=(12 if kuhn else 8, 4), squeeze=False)
        ax = axes[0][0]
        width = 0.8 / max(1, len(labels))
        for i, label in enumerate(labels):
            r = results[label][game]
            ax.bar([m + i * width for m in range(len(metrics))], [getters[m](r) for m in metrics], width,
                   label=label)
        ax.set_xticks([m + width * (len(labels) - 1) / 2 for m in range(len(metrics))], metrics)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_title(f"{game}: per-round metrics against the pools")
        ax.legend()
        if kuhn:
            ax2 = axes[0][1]
            cats = [f"bet {c}" for c in "JQK"] + [f"call {c}" for c in "JQK"]
            for i, label in enumerate(labels):
                cf = results[label][game]["card_frequencies"]
                vals = [cf["bet"][c] for c in "JQK"] + [cf["call"][c] for c in "JQK"]
                ax2.bar([m + i * width for m in range(6)], vals, width, label=label)
            ax2.set_xticks([m + width * (len(labels) - 1) / 2 for m in range(6)], cats)
            ax2.set_ylim(0, 1)
            ax2.set_title("Kuhn: card-conditioned play")
            ax2.legend()
        fig.tight_layout()
        path = out_dir / f"{game}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def run_eval(cfg: EvalConfig) -> dict[str, dict[str, dict[str, Any]]]:
    """Evaluate every model on every game; write results.json, results.md and plots; return the results."""
    from sepo.rollout.chat import ChatRenderer

    for game in cfg.games:
        if game not in envs.GAMES:
            raise envs.UnknownNameError(f"unknown game {game!r}; choose one of: {', '.join(envs.GAMES)}")
    cfg.game_params = dict(cfg.game_params or {})
    for pool in cfg.pools:
        if pool not in POOL_NAMES:
            raise envs.UnknownNameError(f"unknown pool {pool!r}; choose one of: {', '.join(POOL_NAMES)}")
    out_dir = Path(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    run = None
    if cfg.report_to == "wandb":
        import wandb

        run = wandb.init(project=cfg.wandb_project, job_type="eval", config=asdict(cfg), dir=str(out_dir))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for spec in cfg.models:
        label, model = _labelled(spec)
        backend = load_backend(model, cfg)
        renderer = ChatRenderer(backend.tokenizer, enable_thinking=cfg.enable_thinking)
        results[label] = {}
        for game in cfg.games:
            print(f"[sepo eval] {label} on {game}", flush=True)
            results[label][game] = evaluate_game(backend, renderer, game, cfg)
            results[label][game]["model"] = model
        del backend
    write_text_atomic(out_dir / "results.json", json.dumps({"config": asdict(cfg), "results": results}, indent=2))
    table = markdown(results)
    write_text_atomic(out_dir / "results.md", table)
    pngs = plot(results, out_dir)
    if run is not None:
        import wandb

        for label, per in results.items():
            for game, r in per.items():
                run.log({f"{label}/{game}/{k}": v for k, v in r["metrics"].items() if isinstance(v, float)})
        for p in pngs:
            run.log({p.stem: wandb.Image(str(p))})
        run.finish()
    return results


def main(argv: list[str] | None = None) -> int:
    from sepo.checks import check_output_dir
    from sepo.models import check_model
    from sepo.recipes import parse_config

    (cfg,) = parse_config((EvalConfig,), argv, prog="sepo eval", description=__doc__.split("\n\n")[0])
    cfg.games = [g for item in cfg.games for g in item.split(",") if g]
    for spec in cfg.models:
        if cfg.backend != "openai":  # API model names are the server's business
            check_model("models", _labelled(spec)[1])
    check_output_dir("output_dir", cfg.output_dir)
    try:
        results = run_eval(cfg)
    except (envs.UnknownNameError, ValueError) as exc:
        print(f"sepo eval: {exc}", file=sys.stderr)
        return 2
    print(markdown(results))
    print(f"wrote {cfg.output_dir}/results.json, results.md and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
