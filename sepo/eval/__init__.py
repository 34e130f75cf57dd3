"""Evaluation of checkpoints against the pools (`sepo eval`); the four-arm credit study is `sepo.study`.

    evaluate.py     the `sepo eval` command: every model x game, stored as it goes, then every output
    config.py       EvalConfig, validated when it is built
    episodes.py     what is played: one unit per (pool, opponent), batches of units, episode rows
    metrics.py      every reported number from episode rows, with its interval and n (null when unmeasured)
    stats.py        stratified percentile bootstrap over episodes, paired differences
    exact.py        the exact phase of any game with a tabular analysis (envs.tabular): the scored policy at
                    every decision state, its exploit figure, exact pool metrics
    optimum.py      exact optima of the organism arms' objectives over one game's tabular policies
    played.py       one game's played policy through the rollout engine beside its scored one
    store.py        per-batch storage with fingerprints, so a rerun resumes
    report.py       results.md tables and the per-game plots
    checkpoints.py  per-checkpoint evaluation: checkpoints.json, the best by evaluated J, the plot per step
    wandb_log.py    metrics with intervals, plots and sample episodes to wandb
    progress.py     progress bars with totals
"""
