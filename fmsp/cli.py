"""The `fmsp` console script: `fmsp run|eval|export|match [options]`, each implemented by a module's `main(argv)`."""

from __future__ import annotations

import sys

from sepo.config.subcommands import Commands, dispatch

# subcommand -> (module, one-line help). Imported lazily so `fmsp --help` is instant.
COMMANDS: Commands = {
    "run": ("fmsp.run", "run or resume a vFMSP / NSSP / QDSP search (--config configs/fmsp/<recipe>.yaml)"),
    "eval": ("fmsp.evaluation", "Elo over a shared population and QD-score of finished runs"),
    "export": ("fmsp.export", "export chosen policies into SEPO opponent pools"),
    "match": ("fmsp.match", "play two policy files through the sandbox and write the result as JSON"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("fmsp", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
