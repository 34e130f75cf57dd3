"""Evaluation of checkpoints against the pools (`sepo eval`) and the four-arm credit study (`sepo study`).

    evaluate.py  pools, metrics, exact Kuhn exploitability, tables and plots (the `sepo eval` entry point)
    study/       the four-arm credit-assignment study (the `sepo study` entry point)
"""
