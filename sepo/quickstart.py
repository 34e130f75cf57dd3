"""`sepo quickstart`: the whole pipeline on the embedded model, on a CPU, in minutes.

    stage 1  SFT warm-start on IPD demonstrator transcripts        (sepo sft   --config configs/quickstart/sft.yaml)
    stage 2  a few SEPO-GRPO steps from the SFT checkpoint          (sepo train --config configs/quickstart/sepo.yaml)
    stage 3  Base vs SFT vs SEPO against every pool opponent        (sepo eval  --config configs/quickstart/eval.yaml)

Each stage is the same command a user would type, run in-process with the recipe in configs/quickstart/.
`--scale ci` shortens every stage for continuous integration; the outputs land in runs/quickstart/.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from sepo.checks import check_output_dir
from sepo.recipes import CommandParser

RECIPES = Path(__file__).resolve().parent.parent / "configs" / "quickstart"

# Per-scale overrides of the committed recipes (full = the recipes as they are).
SCALES: dict[str, dict[str, list[str]]] = {
    "full": {"sft": [], "sepo": [], "eval": []},
    "ci": {
        "sft": ["--max_steps", "4", "--episodes_scale", "0.05"],
        "sepo": ["--max_steps", "1", "--save_steps", "1", "--max_turn_tokens", "24",
                 "--pool_mix", '{"training": 1, "exploit": 1}', "--gradient_accumulation_steps", "2"],
        "eval": ["--episodes_per_opponent", "1", "--max_turn_tokens", "24", "--pools", "training", "exploit"],
    },
}


def _recipe(name: str) -> str:
    path = RECIPES / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"quickstart recipe {path} is missing (run from a checkout of the repository)")
    return str(path)


def _stage(number: int, title: str) -> float:
    print(f"\n==== [{number}/3] {title} ====", flush=True)
    return time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    parser = CommandParser(prog="sepo quickstart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="full", help="ci: a shortened run")
    parser.add_argument("--out", default="runs/quickstart", help="output root")
    args = parser.parse(argv)
    check_output_dir("--out", args.out)
    scale = SCALES[args.scale]
    out = Path(args.out)

    from sepo.eval import evaluate
    from sepo.grpo import train
    from sepo.models import resolve_model
    from sepo.sft import train as sft

    t0 = time.perf_counter()
    print("preparing the embedded default model (SmolLM2-135M-Instruct; converted once, then cached)", flush=True)
    base = resolve_model("default")

    t = _stage(1, "SFT warm-start on IPD demonstrator transcripts")
    sft_dir = out / "sft"
    sft.main(["--config", _recipe("sft"), "--output_dir", str(sft_dir), *scale["sft"]])
    merged = sft_dir / "merged"
    print(f"stage 1 done in {time.perf_counter() - t:.0f} s: {merged}", flush=True)

    t = _stage(2, "SEPO-GRPO steps against the training / exploit / collusive pools")
    sepo_dir = out / "sepo"
    train.main(["--config", _recipe("sepo"), "--model_name_or_path", str(merged), "--output_dir", str(sepo_dir),
                *scale["sepo"]])
    print(f"stage 2 done in {time.perf_counter() - t:.0f} s: {sepo_dir}", flush=True)

    t = _stage(3, "evaluation: Base vs SFT vs SEPO")
    code = evaluate.main(["--config", _recipe("eval"), "--output_dir", str(out / "eval"),
                          "--models", f"Base={base}", f"SFT={merged}", f"SEPO={sepo_dir}", *scale["eval"]])
    print(f"stage 3 done in {time.perf_counter() - t:.0f} s", flush=True)
    print(f"\nquick start finished in {(time.perf_counter() - t0) / 60:.1f} min; table and plots in {out / 'eval'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
