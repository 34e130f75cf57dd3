"""`sepo eval` end to end on a tiny model: written files against values recomputed by hand from the stored
episodes, resume of stored opponents, transcripts, wandb, and clear errors for bad values."""

from __future__ import annotations

import json
import math

import pytest

from envs.kuhn import INFO_STATES
from envs.kuhn_exact import exploitability
from sepo.cli import main as sepo_main
from sepo.eval.config import EvalConfig
from sepo.eval.evaluate import main, run_eval
from sepo.eval.report import DASH


def _cfg(model_dir, out, **kw) -> EvalConfig:
    base = dict(models=[f"Tiny={model_dir}"], games=["ipd"], game_params={"ipd": {"num_rounds": 3}},
                episodes_per_opponent=2, max_turn_tokens=8, output_dir=str(out), progress=False,
                rationale_samples=2, bootstrap_resamples=200)
    base.update(kw)
    return EvalConfig(**base)


def _stored(out, label, game) -> dict[str, list[dict]]:
    """The stored episode rows of one model and game, by unit file name."""
    folder = out / "episodes" / label / game
    return {p.stem: json.loads(p.read_text())["data"] for p in sorted(folder.glob("*.json"))
            if p.stem != "kuhn_exact"}


def _table_row(md: str, label: str, heading: str) -> list[str]:
    section = md.split(heading, 1)[1]
    line = next(line for line in section.splitlines() if line.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_eval_ipd_and_kuhn_files_match_hand_computed_values(tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    run_eval(_cfg(tiny_model_dir, out, games=["ipd", "kuhn"], game_params={"ipd": {"num_rounds": 3},
                                                                           "kuhn": {"num_hands": 2}}))
    saved = json.loads((out / "results.json").read_text())
    assert saved["complete"] and "bootstrap" in saved["intervals"]["method"]
    ipd = saved["results"]["Tiny"]["ipd"]
    units = _stored(out, "Tiny", "ipd")
    # every opponent of every pool, 2 episodes each, seats alternating
    assert len(units) == 7 and all(len(rows) == 2 for rows in units.values())
    assert all([r["agent_seat"] for r in rows] == [0, 1] for rows in units.values())
    # payoff: the mean over training opponents of (agent's payoff summed over their rounds / their rounds)
    per_opponent = []
    for key, rows in units.items():
        if key.startswith("training."):
            pays = [rd["payoffs"][r["agent_seat"]] for r in rows for rd in r["rounds"]]
            per_opponent.append(sum(pays) / len(pays))
    assert ipd["metrics"]["payoff"]["value"] == pytest.approx(sum(per_opponent) / len(per_opponent))
    assert ipd["metrics"]["payoff"]["n"] == 2 * len(per_opponent)
    # the IPD scale is 3 / 3 = 1: u equals the raw payoff
    assert ipd["metrics"]["u"]["value"] == pytest.approx(ipd["metrics"]["payoff"]["value"])
    turns = [t for rows in units.values() for r in rows for t in r["turns"]]
    assert len(turns) == ipd["decisions"] == 7 * 2 * 3
    fallbacks = sum(t["fallback"] for t in turns)
    assert ipd["metrics"]["fallback_rate"]["value"] == pytest.approx(fallbacks / len(turns))
    # how the turns ended, per decision: strict answers are the parse-failure rate's complement
    form = ipd["answer_format"]
    strict, cut = sum(t["parsed"] for t in turns), sum(not t["parsed"] and t["n_model_tokens"] >= 8 for t in turns)
    assert (form["decisions"], form["strict"], form["token_limit"]) == (len(turns), strict, cut)
    assert form["ended_unparsed"] == len(turns) - strict - cut
    assert form["strict_rate"] == pytest.approx(1 - ipd["metrics"]["parse_failure_rate"]["value"])
    failing = [t["text"] for t in turns if not t["parsed"]]
    assert len(form["failing_examples"]) == min(3, len(failing)) and set(form["failing_examples"]) <= set(failing)
    lo, hi = ipd["metrics"]["safety"]["ci"]
    assert lo <= ipd["metrics"]["safety"]["value"] <= hi
    # the markdown row shows the JSON's numbers with their intervals
    md = (out / "results.md").read_text()
    cells = _table_row(md, "Tiny", "### ipd")
    pay = ipd["metrics"]["payoff"]
    assert cells[1] == "8/4/2" and cells[2] == f"{pay['value']:.3f} [{pay['ci'][0]:.3f}, {pay['ci'][1]:.3f}]"
    ended = _table_row(md, "Tiny", "How the model's turns ended")
    assert ended[:3] == ["Tiny", str(len(turns)), f"{strict} ({strict / len(turns):.0%})"]
    kuhn = saved["results"]["Tiny"]["kuhn"]
    assert set(kuhn["kuhn_policy"]) == set(INFO_STATES)
    for probs in kuhn["kuhn_policy"].values():
        assert math.isclose(sum(probs.values()), 1.0, rel_tol=1e-6)
    # the exploitability is that of the stored policy (the score -> info set mapping has its own test)
    assert kuhn["exploitability"]["value"] == pytest.approx(exploitability(kuhn["kuhn_policy"]), abs=1e-12)
    assert kuhn["metrics"]["nra_sepo"]["value"] is None  # zero-sum: the method's NRA skips every opponent
    assert _table_row(md, "Tiny", "### kuhn")[8] == DASH
    assert (out / "ipd.png").stat().st_size > 1000 and (out / "kuhn.png").stat().st_size > 1000


def test_eval_is_seeded_and_unplayed_pools_are_not_numbers(tiny_model_dir, tmp_path):
    kw = dict(pools=["exploit"], episodes_per_opponent=2)
    a = run_eval(_cfg(tiny_model_dir, tmp_path / "a", **kw))["Tiny"]["ipd"]
    b = run_eval(_cfg(tiny_model_dir, tmp_path / "b", **kw))["Tiny"]["ipd"]
    assert a["metrics"] == b["metrics"] and a["episodes"] == {"training": 0, "exploit": 4, "collusive": 0}
    for name in ("payoff", "u", "c", "safety"):
        assert a["metrics"][name]["value"] is None and a["metrics"][name]["ci"] is None
    assert a["metrics"]["exploit"]["value"] is not None
    text = (tmp_path / "a" / "results.json").read_text()
    assert "NaN" not in text and '"value": null' in text
    cells = _table_row((tmp_path / "a" / "results.md").read_text(), "Tiny", "### ipd")
    assert cells[2] == DASH and cells[4] == DASH and cells[6] == DASH  # Pay, Coll, Safety J


def test_rerun_resumes_stored_batches_and_replays_missing_or_corrupt_ones(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    kw = dict(batch_episodes=4)  # 2 opponents x 2 episodes per batch: [tft, generous], [mixed, grim], [the two
    first = run_eval(_cfg(tiny_model_dir, out, **kw))  # exploiters], [always_cooperate]
    folder = out / "episodes" / "Tiny" / "ipd"
    kept, partner = folder / "training.tit_for_tat.json", folder / "exploit.alternating_defect.json"
    stamps = {p: p.stat().st_mtime_ns for p in (kept, partner)}
    (folder / "exploit.always_defect.json").unlink()
    (folder / "collusive.always_cooperate.json").write_text('{"fingerprint": "trunc')  # a torn file
    capsys.readouterr()
    second = run_eval(_cfg(tiny_model_dir, out, **kw))
    printed = capsys.readouterr().out
    assert printed.count("stored, reused") == 2 and printed.count("episodes in") == 2
    # the whole batch again, with the running total of opponents
    assert "6/7 Tiny ipd exploit/always_defect, exploit/alternating_defect: 4 episodes in" in printed
    assert kept.stat().st_mtime_ns == stamps[kept] and partner.stat().st_mtime_ns != stamps[partner]
    assert second == first  # a replayed batch draws what it drew the first time
    # other play settings (here the batch grouping) are never mixed with stored episodes
    run_eval(_cfg(tiny_model_dir, out, batch_episodes=2))
    assert "stored, reused" not in capsys.readouterr().out


def test_turn_decode_choice_plays_drawn_answers_and_is_stored_apart(tiny_model_dir, tmp_path, capsys):
    """`turn_decode: choice` in `sepo eval`: every turn of the random tiny model (which, decoding freely, needs the
    fallback) is a drawn legal answer, parsed, never the fallback's; its episodes are never mixed with a free
    decode's stored ones."""
    out = tmp_path / "eval"
    kw = dict(pools=["exploit"], top_p=1.0, temperature=1.0)
    run_eval(_cfg(tiny_model_dir, out, **kw))
    free = [t for rows in _stored(out, "Tiny", "ipd").values() for row in rows for t in row["turns"]]
    assert any(t["fallback"] for t in free)
    capsys.readouterr()
    run_eval(_cfg(tiny_model_dir, out, turn_decode="choice", **kw))
    assert "stored, reused" not in capsys.readouterr().out
    drawn = [t for rows in _stored(out, "Tiny", "ipd").values() for row in rows for t in row["turns"]]
    assert len(drawn) == len(free) and all(t["parsed"] and not t["fallback"] for t in drawn)
    assert {t["text"] for t in drawn} <= {"COOPERATE", "DEFECT"}


def test_transcripts_and_wandb_table(tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    run_eval(_cfg(tiny_model_dir, out, pools=["collusive"], save_transcripts=True, report_to="wandb",
                  wandb_project="test"))
    lines = (out / "transcripts" / "Tiny__ipd.jsonl").read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["opponent"] == "always_cooperate" and first["seat"] == 0 and len(first["turns"]) == 3
    assert [m["role"] for m in first["messages"][:2]] == ["system", "user"]
    tables = list((out / "wandb").glob("offline-run-*/files/media/table/episodes_*.table.json"))
    assert len(tables) == 1
    table = json.loads(tables[0].read_text())
    assert table["columns"][:4] == ["model", "game", "pool", "opponent"]
    assert [row[5] for row in table["data"]] == [0, 1]  # the first episode in each seat


@pytest.mark.parametrize("args, words", [
    (["--episodes_per_opponent", "-2"], ["episodes_per_opponent must be an integer >= 1, got -2"]),
    (["--max_turn_tokens", "0"], ["max_turn_tokens must be an integer >= 1, got 0"]),
    (["--batch_episodes", "0"], ["batch_episodes must be an integer >= 1"]),
    (["--torch_threads", "0"], ["torch_threads must be an integer >= 1"]),
    (["--top_p", "1.5"], ["top_p must be a number in (0, 1], got 1.5"]),
    (["--bootstrap_resamples", "5"], ["bootstrap_resamples must be an integer in [100, 1000000]"]),
    (["--turn_decode", "trie"], ["turn_decode", "free, choice"]),
    (["--turn_decode", "choice"], ["turn_decode choice draws from the answers' whole probabilities", "top_p 1.0"]),
    (["--games", "chess"], ["unknown game 'chess'", "ipd"]),
    (["--pools", "friends"], ["unknown pool 'friends'", "training, exploit, collusive"]),
    (["--checkpoints", "/nonexistent/run"], ["checkpoints='/nonexistent/run' is not a directory"]),
])
def test_bad_values_are_clear_errors(tiny_model_dir, tmp_path, capsys, args, words):
    assert sepo_main(["eval", "--models", tiny_model_dir, "--output_dir", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err


def test_output_dir_that_is_a_file_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "taken"
    path.write_text("x")
    assert sepo_main(["eval", "--models", tiny_model_dir, "--output_dir", str(path)]) == 2
    assert "is a file; give a directory" in capsys.readouterr().err


@pytest.mark.slow
def test_eval_default_model_end_to_end(tmp_path):
    """The embedded SmolLM2 through the real path: 2-round IPD against the exploit pool, both turns counted."""
    results = run_eval(EvalConfig(models=["default"], games=["ipd"], game_params={"ipd": {"num_rounds": 2}},
                                  pools=["exploit"], episodes_per_opponent=1, max_turn_tokens=24,
                                  output_dir=str(tmp_path), progress=False))
    r = results["default"]["ipd"]
    assert r["episodes"]["exploit"] == 2 and r["decisions"] == 2 * 2
    assert r["metrics"]["fallback_rate"]["value"] == r["metrics"]["parse_failure_rate"]["value"]


def test_eval_with_a_pool_dir_plays_the_member_in_the_sandbox(tiny_model_dir, tmp_path):
    """`sepo eval --pool_dir`: an FMSP-exported member is an exploit opponent, played from its own sandboxed
    process (never imported here), and no policy process outlives the evaluation."""
    import hashlib
    import sys

    from envs.sandbox.process import _LIVE

    code = "class Defector:\n    def act(self, view):\n        return 'DEFECT'\n"
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "defector.py").write_text(code)
    member = {"name": "fmsp_defector", "game": "ipd", "pool": "exploit", "file": "defector.py", "class_name": "Defector",
              "description": "", "source": {}, "sha256": hashlib.sha256(code.encode()).hexdigest(), "view": "dict"}  # fmt: skip
    (tmp_path / "pool" / "manifest.json").write_text(json.dumps({"format": "sepo-pool-manifest/1", "members": [member]}))
    assert main(["--models", f"Tiny={tiny_model_dir}", "--games", "ipd", "--pools", "exploit", "--episodes_per_opponent",
                 "1", "--max_turn_tokens", "8", "--rationale_samples", "1", "--progress", "false",
                 "--pool_dir", str(tmp_path / "pool"), "--output_dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    ipd = json.loads((tmp_path / "eval" / "results.json").read_text())["results"]["Tiny"]["ipd"]
    assert ipd["episodes"]["exploit"] == 3  # always_defect, alternating_defect and the exported member
    assert (tmp_path / "eval" / "episodes" / "Tiny" / "ipd" / "exploit.fmsp_defector.json").is_file()
    assert not _LIVE  # every policy process ended with its rollout
    assert not any("Defector" in getattr(m, "__dict__", {}) for m in list(sys.modules.values()))  # never imported here


@pytest.mark.parametrize("game", ["auction", "ipd", "kuhn", "negotiation", "negotiation_multi", "bertrand"])
def test_eval_recipes_parse_with_the_method_protocol(game):
    from trl import TrlParser

    (cfg,) = TrlParser((EvalConfig,)).parse_args_and_config(["--config", f"configs/eval/{game}.yaml"])
    assert cfg.games == [game] and (cfg.episodes_per_opponent, cfg.temperature, cfg.top_p) == (16, 0.8, 0.95)
    assert cfg.confidence == 0.95 and not cfg.greedy


def test_names_are_split_the_same_from_a_string_or_a_list():
    a = EvalConfig(models="default", games="ipd,kuhn", pools="exploit")
    b = EvalConfig(models=["default"], games=["ipd", "kuhn"], pools=["exploit"])
    assert (a.models, a.games, a.pools) == (b.models, b.games, b.pools) == (["default"], ["ipd", "kuhn"], ["exploit"])


def test_eval_reports_the_exact_e_star_of_a_compact_ipd_policy(tiny_model_dir, tmp_path):
    """Compact-prompt IPD: `sepo eval` scores the answer-only policy at every joint history (21 at 3 rounds) and
    reports its e*; the figure is the backward induction's on the stored table, and the stored table is the
    model's scored policy (recomputed here through the backend)."""
    from envs.ipd_exact import exploitability as e_star
    from sepo.backends.hf import HFBackend
    from sepo.eval.exact import scored_policy
    from sepo.rollout.chat import ChatRenderer

    params = {"num_rounds": 3, "prompt_style": "compact"}
    out = tmp_path / "eval"
    run_eval(_cfg(tiny_model_dir, out, game_params={"ipd": params}, episodes_per_opponent=1))
    exact = json.loads((out / "results.json").read_text())["results"]["Tiny"]["ipd"]["ipd_exact"]
    assert len(exact["policy"]) == 1 + 4 + 16
    assert exact["e_star"] == pytest.approx(e_star(exact["policy"], 3), abs=1e-12)
    backend = HFBackend.from_model(str(tiny_model_dir), device="cpu")
    again = scored_policy(backend, ChatRenderer(backend.tokenizer), "ipd", params)
    assert again == pytest.approx(exact["policy"], abs=1e-9)
    assert f"| Tiny | {exact['e_star']:.3f} |" in (out / "results.md").read_text()
    # the chat prompt's joint histories are not scored (the phase is for the compact prompt)
    run_eval(_cfg(tiny_model_dir, tmp_path / "chat", episodes_per_opponent=1))
    assert "ipd_exact" not in json.loads((tmp_path / "chat" / "results.json").read_text())["results"]["Tiny"]["ipd"]
