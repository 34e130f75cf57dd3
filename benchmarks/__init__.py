"""The performance suite: every figure against a named baseline measured in the same run.

    python -m benchmarks [--quick] [--only rollout,overhead,engine,envs,car_tag] [--gpu]     (or `make bench`)

    suite.py     runs the parts, prints the ratio table, appends results.jsonl, regenerates RESULTS.md
    rollout.py   batched lock-step rollouts vs one episode at a time
    overhead.py  SEPO's own share of a SEPO-GRPO step, every part timed on its own
    engine.py    the rollout engine's own cost per episode-decision (instant replay backend), and the
                 straightforward reference rollout it must reproduce
    games.py     the envs engines vs the reference libraries they are checked against (Axelrod matches,
                 OpenSpiel exploitability)
    car_tag.py   one FMSP Car Tag pairing, vectorised vs the scalar reference
    gpu/check.py the prepared one-command check for a lent H200 (`make gpu-wheels` first)

No module here names a game: which games a benchmark plays, with which parameters and opponents, are settings
in configs/benchmarks/<module>.yaml (read by benchmarks/settings.py), or every registered game.
"""
