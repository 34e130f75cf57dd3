"""Rollouts: many game episodes played in lock-step against opponents, one generation call per decision step.

    engine.py    `play_episodes`, the episode spec and record, the token-level trajectory
    chat.py      chat rendering with template-consistent environment turns
    tokens.py    exact piecewise tokenisation (a turn's ids from cached lines)
    fallback.py  the constrained fallback's cue (backend-neutral; the backends decode after it)
"""
