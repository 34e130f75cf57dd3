"""How a run's settings are read and recorded: recipes and command lines, their keys, the checks that turn user mistakes into one-line errors, model names, subcommand dispatch, provenance."""
