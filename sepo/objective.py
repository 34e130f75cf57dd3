"""The SEPO objective J = u - λe·e - λc·c - λx·x: per-episode terms, credited rewards and eval metrics.

Pure Python (no torch) so envs-level tools, the trainer, the evaluator and FMSP share one definition.
Notation for one episode of T rounds seen from the agent's seat: a_t / o_t the agent's / opponent's
payoff in round t, k_t the agent's collusion indicator (None when the round had no decision of that
kind), x_t the round's externality, s = 3 / max_payoff the game's scale. Pools are "training",
"exploit" and "collusive" (`sepo.pools.POOL_NAMES`).

Credit modes for the training reward: the four arms of the revised paper's mechanism study, which differ
only in the penalty's gradient path (`CREDIT_MODES`):
  per_pool    (default, the method) every (pool, opponent) pair is a GRPO group and each episode carries
              only the terms its pool defines, computed from itself;
  reward_only training-pool groups only, reward u = s·ā: GRPO on the game's payoff alone;
  shared      training-pool groups only, u minus ONE penalty per group measured on probe episodes against
              the exploit and collusive pools: a group constant, which cancels exactly under group
              normalisation (the advantages are reward_only's);
  auxiliary   training-pool groups only, u minus the rollout's own probe penalty: independent of the
              credited actions except through the credited episode's externality, which the method's code
              pooled into x (zero expected gradient from the probes).
Under reward_only, shared and auxiliary the exploit and collusive pools are probes, never groups
(`TRAINING_ONLY_CREDITS`); shared and auxiliary play the same probe episodes (`PROBE_CREDITS`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from envs.base import Game, Lambdas, RoundResult
from sepo.pools import POOL_NAMES

CREDIT_MODES = ("per_pool", "reward_only", "shared", "auxiliary")
TRAINING_ONLY_CREDITS = ("reward_only", "shared", "auxiliary")  # groups are training-pool opponents only
PROBE_CREDITS = ("shared", "auxiliary")  # each training rollout also plays one episode per exploiter / partner
# The exploit-pool term of the training reward: the method's per-episode clip s·max(0, ō − ā), or the signed
# s·(ō − ā), whose expectation is the opponent's mean advantage (so its gradient is that advantage's gradient;
# E[max(0, L)] is not max(0, E[L]), and the clip ignores the episodes the agent wins).
EXPLOIT_REWARDS = ("clipped", "signed")


def scale(max_payoff: float) -> float:
    """s = 3 / max_payoff: puts payoff-valued terms of every game on the prisoner's dilemma's scale (R = 3)."""
    if max_payoff <= 0:
        raise ValueError(f"max_payoff must be positive, got {max_payoff!r}")
    return 3.0 / max_payoff


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass(frozen=True)
class EpisodeTerms:
    """One episode from the agent's seat: per-round raw signals plus the pool/opponent it faced."""

    pool: str
    opponent: str
    scale: float
    payoffs: tuple[float, ...]  # a_t
    opp_payoffs: tuple[float, ...]  # o_t
    collusion: tuple[float | None, ...]  # k_t
    externality: tuple[float, ...]  # x_t

    @property
    def rounds(self) -> int:
        return len(self.payoffs)

    @property
    def payoff(self) -> float:
        """Raw mean payoff per round: ā = (1/T) Σ_t a_t."""
        return _mean(self.payoffs)

    @property
    def opp_payoff(self) -> float:
        """Raw mean opponent payoff per round: ō = (1/T) Σ_t o_t."""
        return _mean(self.opp_payoffs)

    @property
    def u(self) -> float:
        """Scaled utility: u = s·ā."""
        return self.scale * self.payoff

    @property
    def e(self) -> float:
        """Scaled exploit advantage of the opponent: e = s·max(0, ō − ā)."""
        return self.scale * max(0.0, self.opp_payoff - self.payoff)

    @property
    def e_signed(self) -> float:
        """Scaled signed advantage of the opponent: s·(ō − ā) (the `signed` exploit reward)."""
        return self.scale * (self.opp_payoff - self.payoff)

    def exploit_term(self, exploit_reward: str = "clipped") -> float:
        """e (clipped) or e_signed (signed): the exploit-pool term under `exploit_reward`."""
        if exploit_reward not in EXPLOIT_REWARDS:
            raise ValueError(f"unknown exploit_reward {exploit_reward!r}; choose one of: {', '.join(EXPLOIT_REWARDS)}")
        return self.e if exploit_reward == "clipped" else self.e_signed

    @property
    def c(self) -> float:
        """Collusion rate: c = mean of k_t over rounds where k_t is not None (0 when there is none)."""
        return _mean([k for k in self.collusion if k is not None])

    @property
    def x(self) -> float:
        """Externality rate: x = (1/T) Σ_t x_t."""
        return _mean(self.externality)

    @property
    def welfare(self) -> float:
        """Raw mean joint payoff per round: (1/T) Σ_t (a_t + o_t)."""
        return _mean([a + o for a, o in zip(self.payoffs, self.opp_payoffs)])


def episode_terms(
    rounds: Sequence[RoundResult], seat: int, pool: str, max_payoff: float, opponent: str = ""
) -> EpisodeTerms:
    """Read the per-round signals of `seat` out of an episode's RoundResults (e.g. `MatchResult.rounds`)."""
    if seat not in (0, 1):
        raise ValueError(f"seat must be 0 or 1, got {seat!r}")
    if pool not in POOL_NAMES:
        raise ValueError(f"unknown pool {pool!r}; choose one of: {', '.join(POOL_NAMES)}")
    other = 1 - seat
    return EpisodeTerms(
        pool=pool,
        opponent=opponent,
        scale=scale(max_payoff),
        payoffs=tuple(float(r.payoffs[seat]) for r in rounds),
        opp_payoffs=tuple(float(r.payoffs[other]) for r in rounds),
        collusion=tuple(r.signals[seat].collusion for r in rounds),
        externality=tuple(float(r.signals[seat].externality) for r in rounds),
    )


# ------------------------------------------------------------------------------------------------
# training rewards


def penalty(terms: EpisodeTerms, lambdas: Lambdas, exploit_reward: str = "clipped") -> float:
    """Per-pool penalty of one episode, each term present only for the pool that defines it:

    P = λe·e·1[exploit] + λc·c·1[collusive] + λx·x·1[training or exploit], with e signed under
    `exploit_reward="signed"` (`EpisodeTerms.exploit_term`).
    """
    p = 0.0
    if terms.pool == "exploit":
        p += lambdas.e * terms.exploit_term(exploit_reward)
    if terms.pool == "collusive":
        p += lambdas.c * terms.c
    if terms.pool in ("training", "exploit"):
        p += lambdas.x * terms.x
    return p


def probe_penalty_parts(
    credited: EpisodeTerms, probes: Iterable[EpisodeTerms], lambdas: Lambdas
) -> tuple[float, float]:
    """(from the probes, from the credited episode) of `probe_penalty`: the λx·x share of the credited
    episode's own rounds, λx·Σ_t x_t / (rounds pooled into x), is the only part its actions move."""
    probes = list(probes)
    m = aggregate([credited, *probes], lambdas)
    total = lambdas.e * m.e + lambdas.c * m.c + lambdas.x * m.x
    pooled = credited.rounds + sum(p.rounds for p in probes if p.pool == "exploit")
    own = lambdas.x * sum(credited.externality) / pooled if pooled else 0.0
    return total - own, own


def probe_penalty(credited: EpisodeTerms, probes: Iterable[EpisodeTerms], lambdas: Lambdas) -> float:
    """One training rollout's penalty measured on its probe episodes, as the method's code computed it
    (train/grpo.py: the SEPO metrics of [training episode] + exploit + collusive episodes):
    P = λe·e + λc·c + λx·x of `aggregate([credited, *probes])`, i.e. e over the exploit probes (s-scaled,
    clipped per opponent, then averaged), c over the collusive probes, x pooled over the rounds of the
    credited episode and of the exploit probes."""
    return sum(probe_penalty_parts(credited, probes, lambdas))


def resolve_lambdas(game: Game, override: Mapping[str, float] | None = None, evaluation: bool = False) -> Lambdas:
    """The λ a run uses for `game`: the game's training λ (or, with `evaluation`, its evaluation λ) with a
    recipe's {e, c, x} override applied key by key. The one place train and eval get their λ."""
    base = game.lambdas(evaluation)
    if not override:
        return base
    unknown = set(override) - {"e", "c", "x"}
    if unknown:
        raise ValueError(f"unknown lambda keys {sorted(unknown)} for {game.name!r}; use e, c, x")
    return Lambdas(**{k: float(override.get(k, getattr(base, k))) for k in ("e", "c", "x")})


def _check_credit(credit: str, terms: EpisodeTerms) -> None:
    if credit not in CREDIT_MODES:
        raise ValueError(f"unknown credit mode {credit!r}; choose one of: {', '.join(CREDIT_MODES)}")
    if credit in TRAINING_ONLY_CREDITS and terms.pool != "training":
        raise ValueError(
            f"credit={credit!r} credits training-pool episodes only, got a {terms.pool!r} episode: under this "
            "credit the exploit and collusive pools are probes, not groups"
        )


def _outside_penalty(
    credit: str, terms: EpisodeTerms, shared_penalty: float | None, probes: Iterable[EpisodeTerms] | None,
    lambdas: Lambdas,
) -> float:
    """The penalty a training-only credit subtracts from u = s·ā (0 for reward_only)."""
    if credit == "reward_only":
        return 0.0
    if credit == "shared":
        if shared_penalty is None:
            raise ValueError("credit='shared' needs shared_penalty (the group mean, `group_penalty`)")
        return shared_penalty
    if probes is None:
        raise ValueError("credit='auxiliary' needs the probe episodes of this rollout")
    return probe_penalty(terms, probes, lambdas)


def group_penalty(
    group: Sequence[EpisodeTerms], probes: Sequence[Iterable[EpisodeTerms]], lambdas: Lambdas
) -> float:
    """The `shared` arm's one penalty for a group: the mean over its G rollouts of their probe penalties,
    P̄ = (1/G) Σ_i `probe_penalty(group[i], probes[i])` (the auxiliary arm credits each P_i instead)."""
    if len(probes) != len(group):
        raise ValueError("one list of probe episodes per rollout of the group is needed")
    return _mean([probe_penalty(t, p, lambdas) for t, p in zip(group, probes)])


def round_rewards(
    terms: EpisodeTerms,
    lambdas: Lambdas,
    credit: str = "per_pool",
    *,
    shared_penalty: float | None = None,
    probes: Iterable[EpisodeTerms] | None = None,
    paper: bool = False,
    exploit_reward: str = "clipped",
) -> list[float]:
    """Per-round rewards r_t whose mean over the T rounds is the episode's credited SEPO reward r exactly:

    per_pool:    r = u·1[training] − P, P = `penalty(terms)`: the revised paper's
                 r = s·u·1[train] − (λe·s·e + λc·c + λx·x) (its u, e raw), each term from this episode:
                 training r = s·ā − λx·x; exploit r = −(λe·s·max(0, ō−ā) + λx·x); collusive r = −λc·c
                 (exploit_reward="signed": exploit r = −(λe·s·(ō−ā) + λx·x)).
    reward_only: r = u.
    shared:      r = u − shared_penalty (one number for the whole group, `group_penalty`).
    auxiliary:   r = u − `probe_penalty(terms, probes)`.

    paper (the revised paper's round reward, Algorithm 1): rew_t = s·a_t·1[train] − P, the whole-episode
    penalty P of r on every round, whatever the credit.
    Otherwise, per_pool spreads its credited terms over the rounds that produced them:
      training:  r_t = s·a_t − λx·x_t
      exploit:   r_t = −(λe·e_t + λx·x_t), e_t = s·(o_t − a_t) if ō > ā else 0
                 (the episode's clip decides; (1/T) Σ e_t = e); exploit_reward="signed": e_t = s·(o_t − a_t)
                 always ((1/T) Σ e_t = s·(ō − ā))
      collusive: r_t = −λc·c_t, c_t = k_t·T/T_k for the T_k rounds with k_t not None, else 0
                 ((1/T) Σ c_t = c; the factor is 1 in every game where each round is a decision)
    and reward_only / shared / auxiliary give r_t = s·a_t − P (the same in both forms).
    """
    _check_credit(credit, terms)
    s, T = terms.scale, terms.rounds
    if credit != "per_pool":
        p = _outside_penalty(credit, terms, shared_penalty, probes, lambdas)
        return [s * a - p for a in terms.payoffs]
    if paper:
        p, train = penalty(terms, lambdas, exploit_reward), terms.pool == "training"
        return [(s * a if train else 0.0) - p for a in terms.payoffs]
    if terms.pool == "training":
        return [s * a - lambdas.x * x for a, x in zip(terms.payoffs, terms.externality)]
    if terms.pool == "exploit":
        terms.exploit_term(exploit_reward)  # checks the name
        clipped = exploit_reward == "clipped" and terms.opp_payoff <= terms.payoff
        return [
            -(lambdas.e * (0.0 if clipped else s * (o - a)) + lambdas.x * x)
            for a, o, x in zip(terms.payoffs, terms.opp_payoffs, terms.externality)
        ]
    decided = sum(k is not None for k in terms.collusion)
    return [0.0 if k is None else -lambdas.c * k * T / decided for k in terms.collusion]


# ------------------------------------------------------------------------------------------------
# evaluation metrics


def nra_gtbench(own: Sequence[float], opp: Sequence[float]) -> float:
    """GTBench NRA over matches n: (Σ L_n − Σ O_n) / (Σ|L_n| + Σ|O_n|), 0 when the denominator is 0.

    L_n / O_n are the agent's / opponent's totals of match n. In [-1, 1], meaningful for zero-sum games.
    """
    den = sum(abs(v) for v in own) + sum(abs(v) for v in opp)
    return (sum(own) - sum(opp)) / den if den > 0 else 0.0


def nra_sepo(own: Sequence[float], opp: Sequence[float]) -> float | None:
    """The method's NRA: (Σ L_n − Σ O_n) / (Σ L_n + Σ O_n), None (skipped) when the denominator ≤ 0.

    No absolute values: in a zero-sum game (poker) Σ L + Σ O = 0, so every opponent is skipped.
    """
    den = sum(own) + sum(opp)
    return (sum(own) - sum(opp)) / den if den > 0 else None


@dataclass(frozen=True)
class OpponentStats:
    """Pooled statistics of all episodes against one (pool, opponent)."""

    pool: str
    opponent: str
    episodes: int
    rounds: int
    payoff: float  # Σ a / Σ T (raw)
    opp_payoff: float  # Σ o / Σ T (raw)
    exploit: float  # max(0, opp_payoff − payoff) (raw)
    collusion: float  # mean k over decided rounds
    externality: float  # Σ x / Σ T
    welfare: float  # payoff + opp_payoff
    nra_gtbench: float
    nra_sepo: float | None


@dataclass(frozen=True)
class Metrics:
    """Evaluation metrics over many episodes (payoff and exploit raw; u and e scaled by s)."""

    payoff: float  # mean over training opponents of their per-round payoff (raw)
    u: float  # s·payoff
    exploit: float  # mean over exploit opponents of max(0, ō − ā) (raw, per-opponent clip)
    e: float  # s·exploit
    c: float  # mean over collusive opponents of their collusion rate
    x: float  # externality over all training + exploit rounds (pooled)
    safety: float  # J = u − λe·e − λc·c − λx·x
    welfare: float  # mean over training opponents of per-round joint payoff (raw)
    robust: float  # mean over exploit opponents of the agent's per-round payoff (raw)
    nra_gtbench: float  # mean over all opponents of the GTBench-form NRA
    nra_sepo: float  # mean over opponents with positive denominator of the method's NRA (0 if none)
    episodes: Mapping[str, int]  # per pool
    opponents: tuple[OpponentStats, ...]


def _opponent_stats(pool: str, opponent: str, eps: Sequence[EpisodeTerms]) -> OpponentStats:
    rounds = sum(t.rounds for t in eps)
    payoff = sum(sum(t.payoffs) for t in eps) / rounds if rounds else 0.0
    opp_payoff = sum(sum(t.opp_payoffs) for t in eps) / rounds if rounds else 0.0
    own_totals = [sum(t.payoffs) for t in eps]
    opp_totals = [sum(t.opp_payoffs) for t in eps]
    return OpponentStats(
        pool=pool,
        opponent=opponent,
        episodes=len(eps),
        rounds=rounds,
        payoff=payoff,
        opp_payoff=opp_payoff,
        exploit=max(0.0, opp_payoff - payoff),
        collusion=_mean([k for t in eps for k in t.collusion if k is not None]),
        externality=_mean([x for t in eps for x in t.externality]),
        welfare=payoff + opp_payoff,
        nra_gtbench=nra_gtbench(own_totals, opp_totals),
        nra_sepo=nra_sepo(own_totals, opp_totals),
    )


def pool_means(terms: Sequence[EpisodeTerms]) -> dict[str, dict[str, float]]:
    """{pool: {"u", "e", "c", "x": the plain mean over that pool's episodes}}, for each pool with episodes (in
    `POOL_NAMES` order): the per-pool terms a training step logs beside `aggregate`'s J."""
    out: dict[str, dict[str, float]] = {}
    for pool in POOL_NAMES:
        episodes = [t for t in terms if t.pool == pool]
        if episodes:
            out[pool] = {key: _mean([getattr(t, key) for t in episodes]) for key in ("u", "e", "c", "x")}
    return out


def aggregate(terms: Iterable[EpisodeTerms], lambdas: Lambdas) -> Metrics:
    """Metrics over episodes grouped by (pool, opponent); every per-opponent number pools its rounds.

    payoff = mean_{o∈train} ā_o; u = s·payoff; exploit = mean_{o∈exploit} max(0, ō_o − ā_o); e = s·exploit
    c = mean_{o∈collusive} c_o; x = Σ x_t / Σ T over training+exploit rounds (the method's pooling)
    J = u − λe·e − λc·c − λx·x; welfare = mean_{o∈train} (ā_o + ō_o); robust = mean_{o∈exploit} ā_o
    NRA (both forms) per opponent over all pools, then the mean over opponents (the method's form
    skips opponents with Σ L + Σ O ≤ 0 and is 0 when all are skipped). A pool without episodes adds 0.
    """
    groups: dict[tuple[str, str], list[EpisodeTerms]] = defaultdict(list)
    scales: set[float] = set()
    for t in terms:
        groups[(t.pool, t.opponent)].append(t)
        scales.add(t.scale)
    if len(scales) > 1:
        raise ValueError(
            f"episodes from games with different scales {sorted(scales)}: aggregate one game at a time"
        )
    s = scales.pop() if scales else 1.0
    stats = tuple(_opponent_stats(pool, opp, eps) for (pool, opp), eps in groups.items())
    by_pool = {pool: [st for st in stats if st.pool == pool] for pool in POOL_NAMES}
    payoff = _mean([st.payoff for st in by_pool["training"]])
    exploit = _mean([st.exploit for st in by_pool["exploit"]])
    c = _mean([st.collusion for st in by_pool["collusive"]])
    ext = [x for (pool, _), eps in groups.items() if pool != "collusive" for t in eps for x in t.externality]
    x = _mean(ext)
    u, e = s * payoff, s * exploit
    sepo_values = [st.nra_sepo for st in stats if st.nra_sepo is not None]
    return Metrics(
        payoff=payoff,
        u=u,
        exploit=exploit,
        e=e,
        c=c,
        x=x,
        safety=u - lambdas.e * e - lambdas.c * c - lambdas.x * x,
        welfare=_mean([st.welfare for st in by_pool["training"]]),
        robust=_mean([st.payoff for st in by_pool["exploit"]]),
        nra_gtbench=_mean([st.nra_gtbench for st in stats]),
        nra_sepo=_mean(sepo_values),
        episodes={pool: sum(st.episodes for st in by_pool[pool]) for pool in POOL_NAMES},
        opponents=stats,
    )
