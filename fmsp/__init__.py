"""FMSP: foundation-model self-play — FM and embedding clients, sandbox, archives, the three search
loops (vFMSP, NSSP, QDSP), Elo and QD-score, and export of policies into SEPO's pools."""

__version__ = "0.1.0"
