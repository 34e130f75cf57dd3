"""Gandalf attacker seed policies (defender seeds are the seven levels, built in fmsp.domains.gandalf)."""
