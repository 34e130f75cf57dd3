"""`sepo study --config configs/study/<name>.yaml`: the four-arm credit-assignment study of the revised paper.

The same game, model, seeds and budget are trained once per arm, then evaluated side by side with `sepo eval`:

  reward_only  per_pool credit with every λ = 0: payoff on training-pool groups, zero reward (so zero
               advantage) on exploit / collusive groups: GRPO on the game's payoff alone;
  shared       one penalty per group (the group mean): a group constant, so the advantages are exactly
               those of the payoff-only reward u on every group;
  auxiliary    each rollout's penalty is measured on separate auxiliary episodes against fresh exploit /
               collusive opponents, independent of the credited episode (zero expected gradient);
  per_pool     every episode carries the terms of its own pool (the method's fix), optionally pool weights.

The report (report.md, report.json, study.png in the output dir) gives per arm, for its final checkpoint and
its best by evaluated J, u / e / c / x, J, NRA and the fallback rate from `sepo eval` with 95% bootstrap
intervals, every pair of arms' differences with paired intervals (marked when they exclude zero), the
evaluated J per checkpoint, the per-round advantage statistics from the trainer's log history,
and two checks computed on the study's own recorded rollouts: (1) shared-penalty advantages equal the
payoff-only advantages to 1e-6 on every batch of every arm; (2) the auxiliary penalty is uncorrelated
with the credited episode's actions and own score (|r| within 3/sqrt(n)), contrasted with the per-pool
penalty, which is a function of them.

The modules: config.py (recipe, arms), record.py (recorded rollouts), checks.py (the exact checks),
report.py (report.md, study.png), run.py (the `sepo study` entry point).
"""
