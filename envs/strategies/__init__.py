"""Scripted strategies, one module per game, each exposing STRATEGIES: name -> class."""
