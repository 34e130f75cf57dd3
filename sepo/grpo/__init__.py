"""SEPO-GRPO on TRL's GRPOTrainer (`sepo train`).

    config.py      SEPOConfig (GRPOConfig + games, pools, credit, normalisation, fallback)
    groups.py      the run's pools (loaded once), group dataset and prompt codec
    trainer.py     SEPOTrainer: wires the rollout, the reward and the advantages into TRL
    rollouts.py    one rank's rollout batch: episodes, probes, credited round rewards, TRL's columns
    scoring.py     the per-token advantages of a scored batch, with their metrics
    trl_seam.py    every private or experimental TRL / vLLM name SEPO uses, in one place (pinned by a test)
    rewards.py     the SEPO reward of one episode, credited by pool
    advantages.py  per-round group normalisation to per-token (B, T) advantages
    callbacks.py   best-checkpoint bookkeeping
    train.py       the `sepo train` entry point
"""
