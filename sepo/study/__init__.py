"""`sepo study --config configs/study/<name>.yaml`: the four-arm credit-assignment study of the revised paper.

The same game, model, seeds and steps are trained once per arm and training seed (the recipe's `seeds:`,
default [train.seed], each run in <output_dir>/<arm>/seed_<s>/); the arms differ only in the penalty's
gradient path (`sepo.objective`, `credit:`), then are evaluated side by side with `sepo eval`:

  reward_only  training-pool groups, reward u: GRPO on the game's payoff alone;
  shared       training-pool groups, u minus one penalty per group measured on probe episodes against the
               exploit and collusive pools: a group constant, so the advantages are exactly reward_only's;
  auxiliary    training-pool groups, u minus each rollout's own probe penalty: independent of the credited
               actions except through the credited episode's externality (zero expected gradient from the
               probes);
  per_pool     every (pool, opponent) pair is a group and each episode carries the terms of its own pool
               (the method's fix), optionally pool weights.

The report (report.md, report.json, study.png in the output dir) gives per arm, for its final checkpoint and
its best by evaluated J, u / e / c / x, J, NRA and the fallback rate from `sepo eval` with 95% bootstrap
intervals, every pair of arms' differences with paired intervals (marked when they exclude zero), the
evaluated J per checkpoint, the per-round advantage statistics from the trainer's log history,
with several seeds the mean across seeds and its 95% t-interval per arm and checkpoint and the paired arm
differences across seeds, and two checks computed on the study's own recorded rollouts (the seeds pooled):
(1) on identical batches the shared arm's advantages equal the reward-only arm's to 1e-6 while its rewards
differ; (2) the probe part of the auxiliary penalty is uncorrelated with the credited episode's actions and
own score (|r| within 3/sqrt(n)), contrasted with the per-pool penalty, which is a function of them.

The modules: config.py (recipe, arms), record.py (recorded rollouts), checks.py (the exact checks),
report.py (report.md, study.png), run.py (the `sepo study` entry point), curves.py (the arms' learning curves
from their per-checkpoint evaluations: `python -m sepo.study.curves`).
"""
