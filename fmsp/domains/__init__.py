"""FMSP domains by name: Car Tag, Gandalf and every SEPO game of `envs` (exploiter vs cooperator).

>>> from fmsp.domains import make_domain
>>> domain = make_domain("car_tag", n_games=50)
>>> domain = make_domain(next(iter(GAMES)))  # a SEPO game as an FMSP domain (any name of envs.GAMES)
"""

from __future__ import annotations

import importlib
from typing import Any

from envs import GAMES
from fmsp.domain import Domain

# name -> (module, factory). Factories take the domain's config as keyword arguments.
DOMAINS: dict[str, tuple[str, str]] = {
    "car_tag": ("fmsp.domains.car_tag", "make_car_tag"),
    "gandalf": ("fmsp.domains.gandalf", "make_gandalf"),
    **{game: ("fmsp.domains.sepo_games", "make_sepo_game_domain") for game in GAMES},
}


def make_domain(name: str, **config: Any) -> Domain:
    """Build domain `name` with its default config overridden by `config`."""
    if name not in DOMAINS:
        raise ValueError(f"unknown FMSP domain {name!r}; choose one of: {', '.join(DOMAINS)}")
    module, factory = DOMAINS[name]
    make = getattr(importlib.import_module(module), factory)
    return make(name, **config) if module == "fmsp.domains.sepo_games" else make(**config)


__all__ = ["DOMAINS", "make_domain"]
