"""Opponent pools: defaults by role, the separation rules, sampling, and loading `sepo-pool-manifest/1` directories."""

from __future__ import annotations

import hashlib
import json
import os
import random
from pathlib import Path

import pytest

from envs import GAMES, Strategy, game_spec, make_game, make_strategy, play_episode
from envs.sandbox import SandboxedStrategy
from sepo.pools import (
    MANIFEST_FORMAT,
    POOL_NAMES,
    PoolError,
    check_separation,
    load_pool_dir,
    load_pools,
)

# The revised paper's pool table (supplementary "Opponent pools") and the method's code (games/*.py), by hand:
# separation by role, with the paper's overlaps (single-issue hardball and fair, multi-issue fair, Kuhn
# loose_aggressive), Kuhn's training / collusive pools and the auction's exploit pool as in the code.
ROLE_POOLS = {
    "ipd": {
        "training": ("tit_for_tat", "generous_tit_for_tat", "mixed", "grim_trigger"),
        "exploit": ("always_defect", "alternating_defect"),
        "collusive": ("always_cooperate",),
    },
    "auction": {
        "training": ("truthful", "conservative", "shaded"),
        "exploit": ("aggressive", "adaptive"),
        "collusive": ("collusive_low_bid",),
    },
    "negotiation": {
        "training": ("fair", "balanced", "concede", "hardball"),
        "exploit": ("selfish", "hardball"),
        "collusive": ("fair",),
    },
    "negotiation_multi": {
        "training": ("fair", "tit_for_tat", "concede"),
        "exploit": ("greedy", "hardball"),
        "collusive": ("fair",),
    },
    "kuhn": {
        "training": ("nash_approx", "tight_passive", "loose_aggressive"),
        "exploit": ("always_bet", "max_exploiter"),
        "collusive": ("loose_aggressive",),
    },
    "bertrand": {  # the project's own game (docs/games.md, the Bertrand section), not the paper's
        "training": ("competitive", "tit_for_tat", "midpoint", "random"),
        "exploit": ("undercut", "match_then_undercut"),
        "collusive": ("always_monopoly", "grim_trigger"),
    },
}
OVERLAPS = {  # name -> its roles, per game
    "negotiation": {"fair": ("training", "collusive"), "hardball": ("training", "exploit")},
    "negotiation_multi": {"fair": ("training", "collusive")},
    "kuhn": {"loose_aggressive": ("training", "collusive")},
}


def test_pool_names():
    assert POOL_NAMES == ("training", "exploit", "collusive")
    assert all(tuple(game_spec(game).pools) == POOL_NAMES for game in GAMES)  # every game declares every role


@pytest.mark.parametrize("game", list(GAMES))
def test_default_pools_are_the_papers_by_role(game):
    pools = load_pools(game)
    assert dict(pools.members) == ROLE_POOLS[game]
    names = {n for pool in POOL_NAMES for n in pools.names(pool)}
    repeated = {n: pools.roles(n) for n in names if len(pools.roles(n)) > 1}
    assert repeated == OVERLAPS.get(game, {})
    check_separation(game, pools.members)  # the loader's rules hold for its own defaults


@pytest.mark.parametrize("game", list(GAMES))
def test_every_pool_member_plays(game):
    pools = load_pools(game)
    for pool in POOL_NAMES:
        for name in pools.names(pool):
            a, b = pools.make(name, game), pools.make(name, game)
            assert isinstance(a, Strategy) and a is not b  # fresh instance per rollout
            partner = make_strategy(game, ROLE_POOLS[game]["training"][0])
            ep = play_episode(make_game(game), [a, partner], random.Random(0))
            assert ep.names[0] == name and len(ep.rounds) == make_game(game).num_rounds


@pytest.mark.parametrize("game", list(OVERLAPS))
def test_strict_pools_keep_each_probe_out_of_training(game):
    strict = load_pools(game, strict=True)
    for name, roles in OVERLAPS[game].items():
        assert strict.roles(name) == roles[1:]  # the probe role stays, the training role goes
    expected_training = tuple(n for n in ROLE_POOLS[game]["training"] if n not in OVERLAPS[game])
    assert strict.names("training") == expected_training
    assert strict.names("exploit") == ROLE_POOLS[game]["exploit"]
    assert strict.names("collusive") == ROLE_POOLS[game]["collusive"]
    with pytest.raises(PoolError, match=r"in both the 'training' and the '(exploit|collusive)' pool.*strict_pools"):
        check_separation(game, ROLE_POOLS[game], strict=True)


def test_the_recorded_bug_is_rejected():
    # the authors' bug: the primary exploiter in all three pools
    with pytest.raises(PoolError, match="'always_defect' is in all three pools of 'ipd'.*recorded"):
        load_pools("ipd", overrides={"training": ["tit_for_tat", "always_defect"], "collusive": ["always_defect"]})
    # one strategy both exploiter and collusive partner
    with pytest.raises(PoolError, match="'selfish' is both an exploiter and a collusive partner in 'negotiation'"):
        load_pools("negotiation", overrides={"collusive": ["fair", "selfish"]})
    with pytest.raises(PoolError, match="listed twice in the 'exploit' pool"):
        load_pools("ipd", overrides={"exploit": ["always_defect", "always_defect"]})


def test_overrides_may_overlap_by_role_unless_strict():
    pools = load_pools("ipd", overrides={"exploit": ["always_defect", "tit_for_tat"]})
    assert pools.roles("tit_for_tat") == ("training", "exploit")
    with pytest.raises(PoolError) as info:
        load_pools("ipd", overrides={"exploit": ["always_defect", "tit_for_tat"]}, strict=True)
    assert "'tit_for_tat'" in str(info.value) and "'training'" in str(info.value) and "'exploit'" in str(info.value)


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(PoolError, match="choose one of: training, exploit, collusive"):
        load_pools("ipd", overrides={"train": ["tit_for_tat"]})
    with pytest.raises(PoolError, match=r"unknown strategy 'tft'.*tit_for_tat"):
        load_pools("ipd", overrides={"training": ["tft"]})
    with pytest.raises(PoolError, match="choose one of: ipd, auction"):
        load_pools("chess")
    pools = load_pools("ipd")
    with pytest.raises(PoolError, match="choose one of: training, exploit, collusive"):
        pools.sample("shift", random.Random(0))
    with pytest.raises(PoolError, match=r"'prober' is not in any pool.*always_cooperate"):
        pools.make("prober")
    with pytest.raises(PoolError, match="not 'kuhn'"):
        pools.make("tit_for_tat", "kuhn")
    with pytest.raises(PoolError, match="must be a list"):
        load_pools("ipd", overrides={"exploit": "always_defect"})


def test_overrides_replace_a_pool_and_sampling_is_seeded():
    pools = load_pools("ipd", overrides={"training": ["tit_for_tat", "prober"], "collusive": []})
    assert pools.names("training") == ("tit_for_tat", "prober")
    assert pools.names("exploit") == game_spec("ipd").pools["exploit"]
    with pytest.raises(PoolError, match="'collusive' pool of 'ipd' is empty"):
        pools.sample("collusive", random.Random(0))
    draws = [pools.sample("training", random.Random(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same draw
    rng = random.Random(3)
    seq = [pools.sample("training", rng) for _ in range(200)]
    assert set(seq) == {"tit_for_tat", "prober"}
    assert 70 < seq.count("prober") < 130
    rng2 = random.Random(3)
    assert seq == [pools.sample("training", rng2) for _ in range(200)]


# ------------------------------------------------------------------------------------------------
# pool directories

SUBCLASS_POLICY = '''
from envs.base import Strategy


class Retaliator(Strategy):
    """Defects twice after every opponent defection."""

    name = "whatever_the_class_says"

    def reset(self, game, seat, rng):
        super().reset(game, seat, rng)
        self.punish = 0

    def act(self, view):
        if view.history and view.history[-1]["opp_action"] == "DEFECT":
            self.punish = 2
        if self.punish:
            self.punish -= 1
            return "DEFECT"
        return "COOPERATE"
'''

DUCK_POLICY = """
class Policy:
    def reset(self):
        self.turns = 0

    def act(self, view):
        self.turns += 1
        assert isinstance(view, dict)
        return view["legal_actions"][-1]  # DEFECT
"""

FIRST_LEGAL_POLICY = """
class Policy:
    def act(self, view):
        return view.legal_actions[0]
"""

ILLEGAL_POLICY = """
class Policy:
    def act(self, view):
        return "MAYBE"
"""


def write_pool_dir(
    root: Path, members: list[dict], files: dict[str, str], fmt: str = MANIFEST_FORMAT
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for m in members:
        m.setdefault("sha256", hashlib.sha256((root / m["file"]).read_bytes()).hexdigest())
    (root / "manifest.json").write_text(json.dumps({"format": fmt, "members": members}))
    return root


def member(
    name: str, file: str, class_name: str = "Policy", pool: str = "exploit", game: str = "ipd", **kw
) -> dict:
    return {
        "name": name,
        "game": game,
        "pool": pool,
        "file": file,
        "class_name": class_name,
        "description": f"{name} test policy",
        "source": {"method": "test"},
        **kw,
    }


@pytest.fixture
def good_dir(tmp_path) -> Path:
    return write_pool_dir(
        tmp_path / "pool",
        [
            member("fmsp_retaliator", "policies/retaliator.py", "Retaliator", pool="training"),
            member("fmsp_defector", "policies/defector.py", view="dict"),
            member("kuhn_passer", "policies/passer.py", game="kuhn"),
        ],
        {
            "policies/retaliator.py": SUBCLASS_POLICY,
            "policies/defector.py": DUCK_POLICY,
            "policies/passer.py": FIRST_LEGAL_POLICY,
        },
    )


def test_load_pool_dir_and_extra_members(good_dir):
    members = load_pool_dir(good_dir)
    assert [m.name for m in members] == ["fmsp_retaliator", "fmsp_defector", "kuhn_passer"]
    assert members[0].source == {"method": "test"} and len(members[0].sha256) == 64
    assert [m.name for m in load_pool_dir(good_dir, game="ipd")] == ["fmsp_retaliator", "fmsp_defector"]

    pools = load_pools("ipd", extra_dir=good_dir)
    assert pools.names("training")[-1] == "fmsp_retaliator"
    assert pools.names("exploit") == ("always_defect", "alternating_defect", "fmsp_defector")
    game = make_game("ipd")
    defector = pools.make("fmsp_defector", "ipd")
    assert isinstance(defector, SandboxedStrategy) and defector is not pools.make("fmsp_defector")
    ep = play_episode(game, [defector, make_strategy("ipd", "always_cooperate")], random.Random(0))
    assert ep.names[0] == "fmsp_defector" and ep.totals == (40.0, 0.0)
    # the subclassed policy keeps its own state per episode: two defections after each opponent defection
    ep = play_episode(
        game, [pools.make("fmsp_retaliator"), make_strategy("ipd", "alternator")], random.Random(0)
    )
    moves = [r.record["actions"] for r in ep.rounds]
    expected, punish = [], 0
    for t in range(len(moves)):
        punish = 2 if t and moves[t - 1][1] == "DEFECT" else punish
        expected.append("DEFECT" if punish else "COOPERATE")
        punish = max(0, punish - 1)
    assert ep.names[0] == "fmsp_retaliator"
    assert [m[0] for m in moves] == expected and "DEFECT" in expected and "COOPERATE" in expected
    assert load_pools("kuhn", extra_dir=good_dir).names("exploit")[-1] == "kuhn_passer"


def test_extra_member_overlap_follows_the_separation_rules(good_dir):
    with pytest.raises(PoolError, match="in both the 'training' and the 'exploit' pool"):
        load_pools("ipd", extra_dir=good_dir, overrides={"exploit": ["always_defect", "fmsp_retaliator"]},
                   strict=True)
    with pytest.raises(PoolError, match="'fmsp_defector' is both an exploiter and a collusive partner"):
        load_pools("ipd", extra_dir=good_dir, overrides={"collusive": ["fmsp_defector"]})


def test_bad_sha256(tmp_path):
    d = write_pool_dir(tmp_path, [member("p", "p.py", sha256="0" * 64)], {"p.py": DUCK_POLICY})
    with pytest.raises(PoolError, match="member 'p': sha256 mismatch"):
        load_pool_dir(d)
    d = write_pool_dir(tmp_path / "b", [member("p", "p.py", sha256="xyz")], {"p.py": DUCK_POLICY})
    with pytest.raises(PoolError, match="64 hex"):
        load_pool_dir(d)


def test_bad_class(tmp_path):
    d = write_pool_dir(tmp_path, [member("p", "p.py", "Missing")], {"p.py": DUCK_POLICY})
    with pytest.raises(PoolError, match="does not load: LookupError: no class 'Missing'; classes defined: Policy"):
        load_pool_dir(d)
    d = write_pool_dir(tmp_path / "b", [member("p", "p.py")], {"p.py": "class Policy:\n    pass\n"})
    with pytest.raises(PoolError, match="has no method\\(s\\) act"):
        load_pool_dir(d)
    d = write_pool_dir(tmp_path / "c", [member("p", "p.py")], {"p.py": "import no_such_module_xyz\n"})
    with pytest.raises(PoolError, match="does not load: ModuleNotFoundError"):
        load_pool_dir(d)
    abstract = "from envs.base import Strategy\n\nclass Policy(Strategy):\n    name = 'p'\n"
    d = write_pool_dir(tmp_path / "d", [member("p", "p.py")], {"p.py": abstract})
    with pytest.raises(PoolError, match="abstract"):
        load_pool_dir(d)


def test_illegal_and_crashing_actions(tmp_path):
    d = write_pool_dir(tmp_path, [member("p", "p.py")], {"p.py": ILLEGAL_POLICY})
    with pytest.raises(PoolError, match="'p' played an illegal action in seat 0"):
        load_pool_dir(d)
    crash = "class Policy:\n    def act(self, view):\n        return 1 / 0\n"
    d = write_pool_dir(tmp_path / "b", [member("p", "p.py")], {"p.py": crash})
    with pytest.raises(PoolError, match="failed in a smoke episode.*ZeroDivisionError"):
        load_pool_dir(d)


def test_manifest_validation(tmp_path):
    files = {"p.py": FIRST_LEGAL_POLICY}
    with pytest.raises(PoolError, match="'format' must be 'sepo-pool-manifest/1'"):
        load_pool_dir(write_pool_dir(tmp_path / "a", [member("p", "p.py")], files, fmt="v0"))
    bad = member("p", "p.py")
    del bad["class_name"]
    with pytest.raises(PoolError, match="missing key"):
        load_pool_dir(write_pool_dir(tmp_path / "b", [bad], files))
    with pytest.raises(PoolError, match="unknown pool 'shift'; choose one of: training, exploit, collusive"):
        load_pool_dir(write_pool_dir(tmp_path / "c", [member("p", "p.py", pool="shift")], files))
    with pytest.raises(PoolError, match="unknown game 'go'"):
        load_pool_dir(write_pool_dir(tmp_path / "d", [member("p", "p.py", game="go")], files))
    with pytest.raises(PoolError, match="snake_case"):
        load_pool_dir(write_pool_dir(tmp_path / "e", [member("Bad-Name", "p.py")], files))
    with pytest.raises(PoolError, match="shadows the scripted ipd strategy"):
        load_pool_dir(write_pool_dir(tmp_path / "f", [member("tit_for_tat", "p.py")], files))
    with pytest.raises(PoolError, match="appears twice"):
        load_pool_dir(write_pool_dir(tmp_path / "g", [member("p", "p.py"), member("p", "p.py")], files))
    (tmp_path / "outside.py").write_text(FIRST_LEGAL_POLICY)
    with pytest.raises(PoolError, match="outside the pool directory"):
        load_pool_dir(write_pool_dir(tmp_path / "h", [member("p", "../outside.py")], files))
    with pytest.raises(PoolError, match="does not exist"):
        load_pool_dir(write_pool_dir(tmp_path / "i", [member("p", "p.py")], files) / "nope")
    (tmp_path / "j").mkdir()
    with pytest.raises(PoolError, match="no manifest.json"):
        load_pool_dir(tmp_path / "j")
    (tmp_path / "j" / "manifest.json").write_text("{not json")
    with pytest.raises(PoolError, match="not valid JSON"):
        load_pool_dir(tmp_path / "j")
    with pytest.raises(PoolError, match="'view' must be one of object, dict"):
        load_pool_dir(write_pool_dir(tmp_path / "k", [member("p", "p.py", view="text")], files))


def test_pool_loader_holes_of_issue_23_are_closed(tmp_path):
    """A trailing newline no longer passes the name check (fullmatch); absurd nesting and size are PoolErrors; a hard
    link or a symbolic link to a host file is refused before it is read, and no error shows a file's bytes."""
    files = {"p.py": FIRST_LEGAL_POLICY}
    # `re.match(r"^...$")` accepts "tit_for_tat\n", which then shadowed the scripted strategy
    with pytest.raises(PoolError, match="snake_case"):
        load_pool_dir(write_pool_dir(tmp_path / "a", [member("tit_for_tat\n", "p.py")], files))
    with pytest.raises(PoolError, match="64 hex"):
        load_pool_dir(write_pool_dir(tmp_path / "a2", [member("p", "p.py", sha256="0" * 64 + "\n")], files))
    deep = tmp_path / "b"
    deep.mkdir()
    (deep / "manifest.json").write_text('{"format": "sepo-pool-manifest/1", "members": ' + "[" * 50_000 + "]" * 50_000 + "}")
    with pytest.raises(PoolError, match="nested deeper than 16"):
        load_pool_dir(deep)
    nested = member("p", "p.py", source={"a": [[[[[[[[[[[[[[[[[[{}]]]]]]]]]]]]]]]]]]})
    with pytest.raises(PoolError, match="nested deeper than 16"):
        load_pool_dir(write_pool_dir(tmp_path / "b2", [nested], files))
    big = write_pool_dir(tmp_path / "c", [member("p", "p.py", description="x" * (1 << 20))], files)
    with pytest.raises(PoolError, match="larger than 1048576 bytes"):
        load_pool_dir(big)
    # a hard link inside the pool directory to a host file: same inode, so the path check alone passed it
    secret = tmp_path / "host_secret.py"
    secret.write_text("SECRET_TOKEN_8d1f = 'sk-not-for-the-pool'\n" + FIRST_LEGAL_POLICY)
    linked = write_pool_dir(tmp_path / "d", [], {})
    os.link(secret, linked / "p.py")
    write_pool_dir(linked, [member("p", "p.py", sha256=hashlib.sha256(secret.read_bytes()).hexdigest())], {})
    with pytest.raises(PoolError, match="has 2 hard links") as info:
        load_pool_dir(linked)
    assert "SECRET_TOKEN" not in str(info.value) and "sk-not" not in str(info.value)
    # ... and with a wrong digest, the old loader echoed the linked file through its error; now nothing is read
    write_pool_dir(linked, [member("p", "p.py", sha256="0" * 64)], {})
    with pytest.raises(PoolError, match="hard links") as info:
        load_pool_dir(linked)
    assert "SECRET_TOKEN" not in str(info.value)
    # a hard-linked manifest, a symlinked member file and a symlinked directory on the way
    manifest_link = tmp_path / "e"
    manifest_link.mkdir()
    (tmp_path / "m.json").write_text(json.dumps({"format": MANIFEST_FORMAT, "members": []}))
    os.link(tmp_path / "m.json", manifest_link / "manifest.json")
    with pytest.raises(PoolError, match="has 2 hard links"):
        load_pool_dir(manifest_link)
    symlinked = write_pool_dir(tmp_path / "f", [], {})
    (symlinked / "p.py").symlink_to(secret)
    write_pool_dir(symlinked, [member("p", "p.py", sha256=hashlib.sha256(secret.read_bytes()).hexdigest())], {})
    with pytest.raises(PoolError, match="symbolic link"):
        load_pool_dir(symlinked)
    via_dir = write_pool_dir(tmp_path / "g", [], {})
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "p.py").write_text(FIRST_LEGAL_POLICY)
    (via_dir / "sub").symlink_to(tmp_path / "real")
    write_pool_dir(via_dir, [member("p", "sub/p.py", sha256=hashlib.sha256(FIRST_LEGAL_POLICY.encode()).hexdigest())], {})
    with pytest.raises(PoolError, match="symbolic link"):
        load_pool_dir(via_dir)
    # a manifest that is not JSON: the error gives the position, not the text
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "manifest.json").write_text("SECRET_TOKEN_8d1f = not json")
    with pytest.raises(PoolError, match=r"not valid JSON \(line 1, column 1\)") as info:
        load_pool_dir(tmp_path / "h")
    assert "SECRET_TOKEN" not in str(info.value)
    # control characters in an echoed manifest value are escaped
    with pytest.raises(PoolError, match="unknown pool") as info:
        load_pool_dir(write_pool_dir(tmp_path / "i", [member("p", "p.py", pool="x\x1b[2J\rtraining")], files))
    assert "\x1b" not in str(info.value) and "\r" not in str(info.value) and "\\x1b" in str(info.value)


@pytest.mark.parametrize("kind", ["scripted", "adaptive", None, 3])
def test_pool_loader_refuses_a_source_kind_the_trainer_cannot_build(tmp_path, kind):
    """A member claiming `"source": {"kind": "scripted"}` passed the loader and its smoke test, then the trainer
    (which builds scripted members itself and takes factories only for the rest) crashed at its first rollout.
    Only sandboxed code ("code", or no kind) comes from a pool directory, and every loaded member gets a factory."""
    from sepo.grpo.rollouts import exported_factories

    files = {"p.py": FIRST_LEGAL_POLICY}
    claimed = write_pool_dir(tmp_path / "x", [member("p", "p.py", source={"kind": kind})], files)
    with pytest.raises(PoolError, match="source kind .* cannot come from a pool directory") as info:
        load_pool_dir(claimed)
    assert "\n" not in str(info.value)
    good = write_pool_dir(tmp_path / "y", [member("p", "p.py", source={"kind": "code"}), member("q", "p.py")], files)
    pools = load_pools("ipd", extra_dir=good)
    assert {"p", "q"} <= set(exported_factories({"ipd": pools}))
