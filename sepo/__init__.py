"""SEPO: everything that touches a language model — pools, objective, rollouts, decoding, advantages,
the GRPO trainer, SFT, evaluation and the `sepo` command line."""

__version__ = "0.1.0"
