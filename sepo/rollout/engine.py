"""Batched lock-step rollouts: many game episodes against opponents, one generation call per decision step.

Every loop iteration advances all unfinished episodes by one decision of the LLM seat: one
`backend.generate` for every episode whose LLM seat must act, at most one `backend.generate_choice` for the
turns that did not parse (constrained fallback), then the opponents act and the games step. Each episode is
recorded twice: as an `EpisodeRecord` (rounds, turns, fallbacks; JSON-able) and as a token-level
`Trajectory` (what TRL's `rollout_func` returns: prompt ids, completion ids with sampling logprobs, an
env mask that is 0 on environment tokens, per-token round ids and a mask of fallback-forced tokens).

Call counts: without `collective`, an iteration makes one generate call, plus one generate_choice call only
when some turn needs the fallback, so the count depends on the data. Distributed generation that is a
collective (vLLM server mode: every rank must call equally often) needs `collective=True` (or an int
bound agreed by all ranks): then every iteration makes exactly one generate call and (with the fallback on)
one generate_choice call, empty lists included, for a fixed number of iterations.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tqdm.auto import tqdm

from envs import Game, GameState, RoundResult, Strategy, make_game, make_strategy
from envs.base import act_all
from sepo.generation import Generation, GenerationBackend, Prompt, SamplingSpec
from sepo.rollout.chat import ChatRenderer, Lap
from sepo.rollout.choice import TURN_DECODES, choice_generations
from sepo.rollout.fallback import FALLBACK_CUE, fallback_prompt_ids

OpponentFactory = Callable[[], Strategy]


class PhaseTimer:
    """Wall seconds per phase of `play_episodes` (for benchmarks and the trainer's per-step generation time):
    each `lap(phase)` charges the time since the previous lap (or since construction) to `phase`, read from
    `clock` (wall time by default; a CPU clock such as `time.process_time` leaves out other jobs' load), and
    counts one lap of it in `laps`. Phases: game (episode setup, observations, opponents, game steps),
    rendering, tokenisation (encoding and decoding), generation (backend calls: one lap per call), parsing,
    bookkeeping (trajectories, records, prompts)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds: dict[str, float] = {}
        self.laps: dict[str, int] = {}
        self.clock = clock
        self._last = clock()

    def lap(self, phase: str) -> None:
        now = self.clock()
        self.seconds[phase] = self.seconds.get(phase, 0.0) + now - self._last
        self.laps[phase] = self.laps.get(phase, 0) + 1
        self._last = now


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play. The same spec always gives the same private values and opponent behaviour
    (both rngs derive from `seed` only; a sandboxed opponent gets the keyed private copy of its rng under the
    run's secret `rng_key`, see `envs.sandbox.rng`), so a GRPO group of identical specs faces one opponent stream."""

    game: str
    game_params: dict[str, Any]
    pool: str
    opponent: str
    seed: int
    seat: int = 0


@dataclass
class TurnRecord:
    """One decision of the LLM seat. `text` is the model's own text (before any fallback cue)."""

    round: int
    text: str
    action: str
    parsed: bool
    fallback: bool
    n_model_tokens: int
    n_forced_tokens: int


@dataclass
class EpisodeRecord:
    """The outcome of one episode from the LLM seat's point of view."""

    spec: EpisodeSpec
    rounds: list[RoundResult]
    turns: list[TurnRecord]
    agent_seat: int
    totals: tuple[float, float]
    n_fallbacks: int
    n_parse_failures: int
    messages: list[dict[str, str]] = field(default_factory=list)  # the conversation as chat messages

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "spec": asdict(self.spec),
            "rounds": [
                {
                    "index": r.index,
                    "payoffs": list(r.payoffs),
                    "signals": [asdict(s) for s in r.signals],
                    "record": dict(r.record),
                }
                for r in self.rounds
            ],
            "turns": [asdict(t) for t in self.turns],
            "agent_seat": self.agent_seat,
            "totals": list(self.totals),
            "n_fallbacks": self.n_fallbacks,
            "n_parse_failures": self.n_parse_failures,
            "messages": [dict(m) for m in self.messages],
        }


@dataclass
class Trajectory:
    """Token-level record of one episode, aligned per completion token.

    env_mask: 1 on tokens the policy sampled (its own text and fallback-forced action tokens), 0 on
        environment tokens (user turns, template glue, the fallback cue).
    round_ids: the round each token belongs to (env-turn tokens carry the round they introduce).
    forced_mask: 1 on tokens chosen by the constrained fallback decode (masked from the loss by default).
    unparsed_mask: 1 on the policy's own tokens of a turn that did not parse (the fallback, or a seeded random
        action, then chose the move); what credit they get is `SEPOConfig.unparsed_credit`.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    round_ids: list[int] = field(default_factory=list)
    forced_mask: list[int] = field(default_factory=list)
    unparsed_mask: list[int] = field(default_factory=list)

    def extend(self, ids: Sequence[int], logprobs: Sequence[float] | None, env: int, rnd: int, forced: int):
        self.completion_ids.extend(ids)
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))
        self.env_mask.extend([env] * len(ids))
        self.round_ids.extend([rnd] * len(ids))
        self.forced_mask.extend([forced] * len(ids))
        self.unparsed_mask.extend([0] * len(ids))

    def mark_unparsed(self, n: int) -> None:
        """Mark the last `n` tokens (the policy's own text of the turn that just failed to parse) as unparsed."""
        end = len(self.unparsed_mask)
        self.unparsed_mask[end - n : end] = [1] * n


@dataclass
class _InPlay:
    """Mutable per-episode state inside `play_episodes`."""

    spec: EpisodeSpec
    game: Game
    state: GameState
    opponent: Strategy
    key: int  # its place in the rollout's episodes: the prompts' key (`sepo.generation.Prompt`)
    messages: list[dict[str, str]] = field(default_factory=list)
    traj: Trajectory | None = None
    turns: list[TurnRecord] = field(default_factory=list)
    prefill: str = ""
    n_fallbacks: int = 0
    n_parse_failures: int = 0
    opening: tuple[str, ...] = ()  # the LLM seat's first actions, played as given (`play_episodes`' openings)

    @property
    def context(self) -> list[int]:
        return self.traj.prompt_ids + self.traj.completion_ids

    def agent_to_act(self) -> bool:
        return not self.game.is_terminal(self.state) and self.spec.seat in self.game.current_players(
            self.state
        )


@dataclass(frozen=True)
class _Turn:
    """The LLM seat's current turn, between generation and the game step: its token ids (the model's, then any
    fallback cue and forced action), their text (`decode_turn(ids)`) and the action it plays (None: unparsed)."""

    ids: list[int]
    text: str
    action: str | None


def episode_rngs(seed: int) -> tuple[random.Random, random.Random]:
    """The game's rng (deals, values) and the opponent's rng of the episode seeded `seed`: every rollout of a GRPO
    group, and every adapter of `sepo.interop` given the group's seed, faces the same deal and opponent stream."""
    return random.Random(f"{seed}:game"), random.Random(f"{seed}:opponent")


def episode_state(game: Game, seed: int) -> GameState:
    """The initial state (private values, deals) of the episode an `EpisodeSpec` with `seed` plays."""
    return game.new_state(episode_rngs(seed)[0])


def _start(key: int, spec: EpisodeSpec, opponents: Mapping[str, OpponentFactory] | None,
           opening: Sequence[str] = ()) -> _InPlay:
    if spec.seat not in (0, 1):
        raise ValueError(f"seat must be 0 or 1, got {spec.seat!r}")
    game = make_game(spec.game, **spec.game_params)
    state = episode_state(game, spec.seed)
    if opponents is not None and spec.opponent in opponents:
        opponent = opponents[spec.opponent]()
    else:
        opponent = make_strategy(spec.game, spec.opponent)
    # a sandboxed opponent (SandboxedStrategy) is handed HMAC(rng_key, this rng's state), never this public stream
    opponent.reset(game, 1 - spec.seat, episode_rngs(spec.seed)[1])
    return _InPlay(spec=spec, game=game, state=state, opponent=opponent, key=key, opening=tuple(opening))


def _step(eps: Sequence[_InPlay], agent_actions: Sequence[str | None]) -> None:
    """Let the opponents choose for their seats at this decision point and step the games. Every opponent is
    asked before any answer is read (`act_all`), so sandboxed opponents of one lock-step round answer in parallel."""
    actions = [{} if action is None else {ep.spec.seat: action} for ep, action in zip(eps, agent_actions)]
    asks = [(k, seat) for k, ep in enumerate(eps) for seat in ep.game.current_players(ep.state) if seat != ep.spec.seat]
    views = [(eps[k].opponent, eps[k].game.view(eps[k].state, seat)) for k, seat in asks]
    for (k, seat), action in zip(asks, act_all(views)):
        actions[k][seat] = action
    for ep, chosen in zip(eps, actions):
        ep.game.step(ep.state, chosen)


def _advance_opponents(episodes: Sequence[_InPlay]) -> None:
    """Play opponent-only decision points (sequential games) until each LLM seat acts or its game ends."""
    while waiting := [ep for ep in episodes if not ep.game.is_terminal(ep.state) and not ep.agent_to_act()]:
        _step(waiting, [None] * len(waiting))


def _open_turns(acting: list[_InPlay], renderer: ChatRenderer, lap: Lap) -> list[Prompt]:
    """Append every acting episode's observation as a user turn (env tokens; for a new episode the system
    rules and the first prompt) and return the prompts for the model's turns: one batched tokenizer call."""
    observations = [ep.game.observation(ep.state, ep.spec.seat) for ep in acting]
    systems = [ep.game.system_prompt(ep.spec.seat) if ep.traj is None else "" for ep in acting]
    lap("game")
    for ep, obs, system in zip(acting, observations, systems):
        if ep.traj is None:
            ep.messages.append({"role": "system", "content": system})
        ep.messages.append({"role": "user", "content": obs})
    for ep, turn in zip(acting, renderer.new_turns([ep.messages for ep in acting], lap)):
        if ep.traj is None:
            ep.traj, ep.prefill = Trajectory(prompt_ids=turn.ids), turn.prefill
        else:
            ep.traj.extend(turn.ids, None, env=0, rnd=ep.state.round, forced=0)
    prompts = [Prompt(ids=ep.context, messages=list(ep.messages), key=ep.key) for ep in acting]
    lap("bookkeeping")
    return prompts


def _model_turns(
    acting: list[_InPlay], gens: list[Generation], renderer: ChatRenderer, keep_open: bool, lap: Lap
) -> list[_Turn]:
    """Record the model's tokens and parse them; returns every acting episode's turn (action None: it did not
    parse).

    A turn that did not end with end-of-turn (truncated, or stopped by another stop token, which is dropped)
    never parses. When the fallback will continue the turn (`keep_open`), the end-of-turn is left out.
    """
    eot = renderer.end_of_turn_id
    turns = []
    for gen in gens:
        ids, lps = list(gen.token_ids), list(gen.logprobs)
        if ids and ids[-1] != eot and gen.finished:
            ids, lps = ids[:-1], lps[:-1]
        turns.append((ids, lps))
    lap("bookkeeping")
    texts = renderer.decode_turns([ids for ids, _ in turns])
    lap("tokenisation")
    actions = [
        ep.game.parse_action(renderer.strip_thinking(text), ep.state, ep.spec.seat) if ids and ids[-1] == eot
        else None
        for ep, text, (ids, _) in zip(acting, texts, turns)
    ]
    lap("parsing")
    out = []
    for ep, text, (ids, lps), action in zip(acting, texts, turns, actions):
        if action is None and ids and ids[-1] == eot and keep_open:
            ids, lps = ids[:-1], lps[:-1]
        ep.traj.extend(ids, lps, env=1, rnd=ep.state.round, forced=0)
        if action is None:  # the fallback or a seeded random action will choose: the policy's text is unparsed
            ep.traj.mark_unparsed(len(ids))
        out.append(_Turn(ids=ids, text=text, action=action))
        ep.turns.append(TurnRecord(round=ep.state.round, text=text, action=action or "", parsed=action is not None,
                                   fallback=False, n_model_tokens=len(ids), n_forced_tokens=0))
        if action is None:
            ep.n_parse_failures += 1
    lap("bookkeeping")
    return out


def _opening_turn(ep: _InPlay, renderer: ChatRenderer) -> _Turn:
    """The LLM seat's next opening action, played as given: the action's text and end-of-turn, recorded as
    environment tokens (the policy did not sample them) and as a parsed turn with no model tokens."""
    action = ep.opening[len(ep.turns)]
    if ep.game.parse_action(action, ep.state, ep.spec.seat) != action:
        raise ValueError(f"opening action {action!r} is not legal for seat {ep.spec.seat} here; legal: "
                         f"{ep.game.legal_actions(ep.state, ep.spec.seat)}")
    ids = [*renderer.tokenizer.encode(action, add_special_tokens=False), renderer.end_of_turn_id]
    ep.traj.extend(ids, None, env=0, rnd=ep.state.round, forced=0)
    ep.turns.append(TurnRecord(round=ep.state.round, text=action, action=action, parsed=True, fallback=False,
                               n_model_tokens=0, n_forced_tokens=0))
    return _Turn(ids=ids, text=action, action=action)


def _fallback_prompt(ep: _InPlay, turn: _Turn, renderer: ChatRenderer) -> tuple[Prompt, list[int]]:
    context = ep.context[: len(ep.context) - len(turn.ids)]
    ids, cue = fallback_prompt_ids(context, turn.ids, renderer.tokenizer, renderer.end_of_turn_id,
                                   renderer.cue_ids)
    prefix = ep.prefill + turn.text + FALLBACK_CUE
    return Prompt(ids=ids, messages=list(ep.messages), assistant_prefix=prefix, key=ep.key), cue


def _forced_turn(ep: _InPlay, turn: _Turn, cue: list[int], gen: Generation, legal: list[str],
                 renderer: ChatRenderer) -> _Turn:
    """Append the cue (env tokens) and the constrained action tokens + end-of-turn (forced tokens); returns
    the turn they complete."""
    by_key = {a.casefold(): a for a in legal}
    action = by_key.get(gen.text.strip().casefold())
    if action is None or not gen.token_ids or gen.token_ids[-1] != renderer.end_of_turn_id:
        raise RuntimeError(
            f"constrained decode returned {gen.text!r} (ids {gen.token_ids}), not one of {legal} + end-of-turn"
        )
    ep.traj.extend(cue, None, env=0, rnd=ep.state.round, forced=0)
    ep.traj.extend(gen.token_ids, gen.logprobs, env=1, rnd=ep.state.round, forced=1)
    ids = [*turn.ids, *cue, *gen.token_ids]
    ep.n_fallbacks += 1
    last = ep.turns[-1]
    last.action, last.fallback, last.n_forced_tokens = action, True, len(gen.token_ids)
    return _Turn(ids=ids, text=renderer.decode_turn(ids), action=action)


def _close_unparsed(ep: _InPlay, turn: _Turn, renderer: ChatRenderer) -> _Turn:
    """No fallback: end the turn (a synthetic end-of-turn if it was cut off) and play a seeded random
    legal action, so the episode continues and the failure is counted; returns the closed turn."""
    ids = turn.ids
    if not ids or ids[-1] != renderer.end_of_turn_id:
        ep.traj.extend([renderer.end_of_turn_id], None, env=0, rnd=ep.state.round, forced=1)
        ids = [*ids, renderer.end_of_turn_id]
    rng = random.Random(f"{ep.spec.seed}:unparsed:{len(ep.turns)}")
    action = ep.turns[-1].action = rng.choice(ep.game.legal_actions(ep.state, ep.spec.seat))
    return _Turn(ids=ids, text=turn.text, action=action)


def _seeded(sampling: SamplingSpec, iteration: int, call: int) -> SamplingSpec:
    if sampling.seed is None:
        return sampling
    return replace(sampling, seed=sampling.seed * 1_000_003 + 2 * iteration + call)


def play_episodes(
    specs: Sequence[EpisodeSpec],
    backend: GenerationBackend,
    renderer: ChatRenderer,
    sampling: SamplingSpec,
    *,
    opponents: Mapping[str, OpponentFactory] | None = None,
    fallback: bool = True,
    trajectories: bool = True,
    progress: bool = False,
    max_turn_tokens: int | None = None,
    collective: bool | int = False,
    reuse_prefix: bool = True,
    session: Any = None,
    timer: PhaseTimer | None = None,
    openings: Sequence[Sequence[str]] | None = None,
    turn_decode: str = "free",
) -> list[tuple[EpisodeRecord, Trajectory | None]]:
    """Play all `specs` in lock-step with the LLM in seat `spec.seat`; results in spec order.

    opponents: name -> zero-argument Strategy factory, consulted before the game's scripted strategies
        (e.g. FMSP pool members).
    fallback: constrained decode for turns that do not parse; without it such turns play a seeded random
        legal action (still counted as parse failures).
    max_turn_tokens: longest model turn (default `sampling.max_new_tokens`); longer turns are cut and go to
        the fallback.
    collective: True (or an int number of iterations, identical on all ranks) makes the call sequence fixed:
        exactly one generate and one generate_choice call per iteration for `Game.max_decisions_per_seat`
        iterations.
    reuse_prefix: open the backend's `prefix_session()` for the rollout (HF: each round's key/value cache is
        reused in the next round instead of re-encoding the conversation; same tokens; False re-encodes, for
        timing; backends without a session state open a no-op one).
    session: an open `prefix_session()` of `backend` to generate in instead of one opened for this call
        (e.g. to read its counts afterwards); every call of the rollout is passed the one session.
    timer: accumulates the wall time of each phase and its laps (one generation lap per backend call; see
        `PhaseTimer`; None: a timer nobody reads).
    openings: per spec, the LLM seat's first actions, played as given instead of generated (each the action's
        text and end-of-turn, environment tokens in the trajectory): they put the model at a later decision
        point of a real episode (e.g. a card game's information set after the seat's own PASS) to sample its
        policy there.
    turn_decode: "free" (the method: the model's text, parsed, the fallback for text that does not parse) or
        "choice" (each turn drawn among the legal actions' canonical answers by their scored probabilities,
        `sepo.rollout.choice`: the played policy is the scored one).
    """
    if turn_decode not in TURN_DECODES:
        raise ValueError(f"turn_decode must be one of {', '.join(TURN_DECODES)}, got {turn_decode!r}")
    lap = (timer or PhaseTimer()).lap  # a throwaway timer when none is asked for: one path, nothing read
    episodes = [_start(key, spec, opponents, opening) for key, (spec, opening)
                in enumerate(zip(specs, openings or [()] * len(specs), strict=True))]
    if isinstance(collective, bool):
        n_iter = max((ep.game.max_decisions_per_seat for ep in episodes), default=0) if collective else None
    else:
        n_iter = int(collective)
    turn_sampling = replace(sampling, max_new_tokens=max_turn_tokens or sampling.max_new_tokens)
    bar = None
    if progress:
        upper = max((ep.game.max_decisions_per_seat for ep in episodes), default=0)  # at most; sequential
        bar = tqdm(total=n_iter or upper, desc="rollout decisions", unit="step")  # games may end sooner
    iteration = 0
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [ep.opponent.close() for ep in episodes])  # sandboxed opponents end with the rollout
        if session is None and reuse_prefix:
            session = stack.enter_context(backend.prefix_session())
        while True:
            _advance_opponents(episodes)
            acting = [ep for ep in episodes if ep.agent_to_act()]
            lap("game")
            if n_iter is None and not acting:
                break
            if n_iter is not None and iteration >= n_iter:
                if acting:
                    raise RuntimeError(f"episodes need more than collective={n_iter} decision steps")
                break
            prompts = _open_turns(acting, renderer, lap)
            scripted = {k for k, ep in enumerate(acting) if len(ep.turns) < len(ep.opening)}
            free = [k for k in range(len(acting)) if k not in scripted]
            gens = []
            if free or n_iter is not None:  # one backend call, one generation lap
                if turn_decode == "choice":
                    gens = choice_generations(backend, [prompts[k] for k in free],
                                              [acting[k].game.legal_actions(acting[k].state, acting[k].spec.seat)
                                               for k in free],
                                              _seeded(turn_sampling, iteration, 0), renderer.tokenizer,
                                              renderer.end_of_turn_id)
                else:
                    gens = backend.generate([prompts[k] for k in free], _seeded(turn_sampling, iteration, 0),
                                            session=session)
                lap("generation")
            model_turns = iter(_model_turns([acting[k] for k in free], gens, renderer, fallback, lap))
            turns = [_opening_turn(ep, renderer) if k in scripted else next(model_turns)
                     for k, ep in enumerate(acting)]
            pending = [k for k, turn in enumerate(turns) if turn.action is None]
            if fallback and (pending or n_iter is not None):
                asks = [_fallback_prompt(acting[k], turns[k], renderer) for k in pending]
                prompts, cues = [prompt for prompt, _ in asks], [cue for _, cue in asks]
                legal = [acting[k].game.legal_actions(acting[k].state, acting[k].spec.seat) for k in pending]
                lap("bookkeeping")
                forced = backend.generate_choice(prompts, legal, _seeded(sampling, iteration, 1), session=session)
                lap("generation")
                for k, cue, gen, acts in zip(pending, cues, forced, legal):
                    turns[k] = _forced_turn(acting[k], turns[k], cue, gen, acts, renderer)
            elif pending:
                for k in pending:
                    turns[k] = _close_unparsed(acting[k], turns[k], renderer)
            for ep, turn in zip(acting, turns):
                ep.messages.append({"role": "assistant", "content": ep.prefill + turn.text})
            lap("bookkeeping")
            _step(acting, [turn.action for turn in turns])
            lap("game")
            iteration += 1
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.total = iteration  # the steps actually taken (a card game's hand can end after one decision)
        bar.close()
    results = [(_record(ep), ep.traj if trajectories else None) for ep in episodes]
    lap("bookkeeping")
    return results


def _record(ep: _InPlay) -> EpisodeRecord:
    return EpisodeRecord(
        spec=ep.spec,
        rounds=list(ep.state.history),
        turns=ep.turns,
        agent_seat=ep.spec.seat,
        totals=(ep.state.totals[0], ep.state.totals[1]),
        n_fallbacks=ep.n_fallbacks,
        n_parse_failures=ep.n_parse_failures,
        messages=ep.messages,
    )
