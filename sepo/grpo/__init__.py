"""SEPO-GRPO on TRL's GRPOTrainer (`sepo train`).

    config.py      SEPOConfig (GRPOConfig + games, pools, credit, normalisation, fallback)
    trainer.py     SEPOTrainer: group dataset, game rollouts as TRL's rollout_func, per-round advantages
    rewards.py     the SEPO reward of one episode, credited by pool
    advantages.py  per-round group normalisation to per-token (B, T) advantages
    callbacks.py   best-checkpoint bookkeeping
    train.py       the `sepo train` entry point
"""
