"""`sepo.grpo.groups`: a run loads its pool directory once (its members smoke-tested in the sandbox once), and
the training pools, the group dataset and the per-checkpoint evaluation's pools all come from that load."""

from __future__ import annotations

import hashlib
import json

import pytest

from sepo.grpo import groups
from sepo.grpo.callbacks import check_held_out, eval_config
from sepo.grpo.config import SEPOConfig

DEFECTOR = "class Defector:\n    def act(self, view):\n        return 'DEFECT'\n"


def _pool_dir(root):
    root.mkdir()
    (root / "defector.py").write_text(DEFECTOR)
    member = {"name": "fmsp_defector", "game": "ipd", "pool": "exploit", "file": "defector.py",
              "class_name": "Defector", "description": "", "source": {},
              "sha256": hashlib.sha256(DEFECTOR.encode()).hexdigest(), "view": "dict"}
    (root / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": [member]}))
    return root


def test_a_run_loads_its_pool_dir_once_for_training_and_evaluation(tmp_path, monkeypatch):
    real, loads = groups.load_pool_dir, []

    def counted(*args, **kwargs):
        loads.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(groups, "load_pool_dir", counted)
    args = SEPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, bf16=False, report_to="none", max_steps=1,
                      games=["ipd"], num_generations=2, per_device_train_batch_size=4, seed=0,
                      pool_mix={"training": ["tit_for_tat"], "exploit": ["fmsp_defector"]},
                      pool_dir=str(_pool_dir(tmp_path / "pool")), keep_best_by_safety=True)
    built = groups.training_groups(args)
    assert len(loads) == 1  # one game, one load of the directory
    training, evaluation = built.pools.training["ipd"], built.pools.evaluation["ipd"]
    assert "fmsp_defector" in training.names("exploit") and "fmsp_defector" in evaluation.names("exploit")
    assert training.registry["fmsp_defector"].factory is evaluation.registry["fmsp_defector"].factory
    assert set(built.dataset["opponent"]) == {"tit_for_tat", "fmsp_defector"}

    def no_second_load(*args, **kwargs):
        raise AssertionError("the evaluation loaded the pools again")

    monkeypatch.setattr("sepo.eval.evaluate.load_pools", no_second_load)
    check_held_out(eval_config(args), set(built.dataset["seed"]), built.pools.evaluation)
    with pytest.raises(AssertionError, match="loaded the pools again"):
        check_held_out(eval_config(args), set(built.dataset["seed"]))  # without them it would load its own
