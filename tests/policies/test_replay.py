"""Replays: the file format and its errors, forcing and the fingerprint on a
recorded episode, and end to end with the real clang-19: the same replay
gives the same object byte for byte, a stale one gives the base's object."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from _policy_helpers import observations
from _corpus_helpers import needs_clang
from mlgo_host.channel import codec
from mlgo_host.corpus import synth
from mlgo_host.errors import ConfigError
from mlgo_host.policies import load_policy
from mlgo_host.policies.replay import FORMAT, Replay, ReplayPolicy, load_replay, read_replay, write_replay


def _cli(args, cwd, timeout=120):
    return subprocess.run([sys.executable, "-m", "mlgo_host"] + args, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _write(path, obj) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


# -- the file format -------------------------------------------------------
def test_roundtrip_and_load_policy(tmp_path):
    r = Replay({40: 0, 12: 1}, module="src/a.o", observations=99)
    p = tmp_path / "a.replay.json"
    write_replay(p, r)
    d = json.loads(p.read_text())
    assert d["format"] == FORMAT and d["forced"] == {"12": 1, "40": 0} and d["base"] == "default"
    back = read_replay(p)
    assert back == r and back.path == str(p)
    pol = load_policy(str(p))  # a replay file is a policy wherever policies are named
    assert isinstance(pol, ReplayPolicy) and pol.base.name == "default" and pol.replay.forced == {12: 1, 40: 0}
    assert load_replay(p, base="never").base.name == "never"
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


@pytest.mark.parametrize("content,message", [
    ("{not json", "unreadable replay file: not JSON"),
    ('{"format": "other/1", "forced": {}}', "not a replay file (format 'other/1', expected"),
    ('{"format": "mlgo_host.replay/1", "forced": {"-3": 1}}', "index '-3' is not a non-negative integer"),
    ('{"format": "mlgo_host.replay/1", "forced": {"x": 1}}', "index 'x'"),
    ('{"format": "mlgo_host.replay/1", "forced": {"3": 2}}', "forced[3]: an inlining decision is 0 or 1, got 2"),
    ('{"format": "mlgo_host.replay/1", "forced": [1]}', "'forced' must be an object"),
    ('{"format": "mlgo_host.replay/1", "advisor": "nope", "forced": {}}', "unknown advisor 'nope'"),
    ('{"format": "mlgo_host.replay/1", "forced": {}, "fingerprint": {"hash": "md5"}}', "'fingerprint' must be"),
    ('{"format": "mlgo_host.replay/1", "forced": {}, "fingerprint": {"hash": "blake2b-64", "end": "zz"}}',
     "fingerprint digest 'zz'"),
    ('{"format": "mlgo_host.replay/1", "forced": {}, "observations": -1}', "'observations' must be"),
])
def test_bad_files_name_the_file(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_text(content)
    with pytest.raises(ConfigError) as ei:
        read_replay(p)
    assert str(p) in str(ei.value) and message in str(ei.value) and "\n" not in str(ei.value)


def test_bad_base_and_missing_file(tmp_path):
    p = _write(tmp_path / "r.json", {"format": FORMAT, "base": "no/such/policy", "forced": {}})
    with pytest.raises(ConfigError, match=r"r\.json: base policy: .*no/such/policy"):
        load_replay(p)
    with pytest.raises(ConfigError, match=r"missing\.json: not a replay file \(no such file\)"):
        read_replay(tmp_path / "missing.json")


def test_cli_errors_are_one_line(tmp_path):
    bad = _write(tmp_path / "bad.json", {"format": FORMAT, "forced": {"1": 7}})
    r = _cli(["run", "--actions", bad, "--", "clang-19", "-Oz", "-c", "x.c"], tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith(f"mlgo-host run: error: {bad}: forced[1]: ")
    assert len(r.stderr.strip().splitlines()) == 1
    # --replay with a file: --actions, after one warning line (--replay takes a tune directory)
    r = _cli(["run", "--replay", bad, "--", "clang-19", "-Oz", "-c", "x.c"], tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 2, r.stderr
    assert lines[0] == "mlgo-host run: warning: --replay FILE is deprecated: use --actions FILE"
    assert lines[1].startswith(f"mlgo-host run: error: {bad}: forced[1]: ")
    r = _cli(["run", "--save-replay", "o.json", "--", "clang-19", "-Oz", "-c", "x.c"], tmp_path)
    assert r.returncode == 2 and "--save-replay needs --actions" in r.stderr
    evict = _write(tmp_path / "evict.json", {"format": FORMAT, "advisor": "regalloc-evict", "forced": {"1": 0}})
    r = _cli(["run", "--actions", evict, "--", "clang-19", "-O2", "-c", "x.c"], tmp_path)
    assert r.returncode == 2 and "is for the regalloc-evict advisor, not inline (use --advisor regalloc-evict)" in r.stderr


# -- forcing and the fingerprint on a recorded episode ------------------------
def _play(pol, header, adv, obs):
    pol.bind(header, adv)
    return [pol.act(o) for o in obs]


def test_forces_and_defers(inline_session):
    header, ep, adv = inline_session
    obs = observations(header, ep)
    default = [int(a) for a in ep.actions]
    forced = {3: 1 - default[3], 10: 1 - default[10], len(obs) + 5: 1}
    pol = ReplayPolicy(Replay(forced), load_policy("default"))
    got = _play(pol, header, adv, obs)
    want = list(default)
    want[3], want[10] = forced[3], forced[10]
    assert got == want
    assert (pol.applied, pol.missed, pol.seen, pol.stale) == (2, 1, len(obs), False)
    # act_logp (the recording path) forces the same and says log-probability 0 there
    pol.bind(header, adv)
    assert [pol.act_logp(o) for o in obs[:11]][10] == (forced[10], 0.0)


def test_fingerprint_matches_itself_and_catches_changes(inline_session):
    header, ep, adv = inline_session
    obs = observations(header, ep)
    default = [int(a) for a in ep.actions]
    rep = Replay({5: 1 - default[5], 30: 1 - default[30]})
    pol = ReplayPolicy(rep, load_policy("default"))
    _play(pol, header, adv, obs)
    made = rep.with_fingerprint(pol)
    assert made.observations == len(obs) and set(made.fingerprint["at"]) == {"5", "30"}

    # the same stream: every forced action applied, not stale
    again = ReplayPolicy(made, load_policy("default"))
    first = _play(again, header, adv, obs)
    assert (again.applied, again.stale) == (2, False)
    assert first[5] == 1 - default[5] and first[30] == 1 - default[30]

    # a stream that differs before decision 30 (observation 20 altered):
    # decision 5 is forced, 30 is not, and the rest is the base's
    changed = list(obs)
    changed[20] = type(obs[20])(20, "", bytes(len(obs[20].raw)), header)
    stale = ReplayPolicy(made, load_policy("default"))
    got = _play(stale, header, adv, changed)
    assert stale.stale and stale.stale_at == 30 and stale.applied == 1
    assert got[30] == default[30] and got[5] == 1 - default[5]

    # a change after the last forced decision is seen at the end
    tail = list(obs)
    tail[-1] = type(obs[-1])(len(obs) - 1, "", bytes(len(obs[-1].raw)), header)
    late = ReplayPolicy(made, load_policy("default"))
    _play(late, header, adv, tail)
    assert late.applied == 2 and late.stale_at is None and late.stale
    assert "after the last forced decision" in late.report()["stale_reason"]

    # fewer decisions than recorded
    short = ReplayPolicy(made, load_policy("default"))
    _play(short, header, adv, obs[:-1])
    assert short.stale


def test_wrong_advisor_is_refused(evict_session):
    header, ep, adv = evict_session
    pol = ReplayPolicy(Replay({0: 1}), load_policy("default"))
    with pytest.raises(ConfigError, match="made for the inline advisor, used for regalloc-evict"):
        pol.bind(header, adv)


def test_rejected_forced_action_goes_stale(evict_session):
    header, ep, adv = evict_session
    obs = observations(header, ep)
    illegal = next(i for i, o in enumerate(obs) if not adv.mask(o)[0])
    pol = ReplayPolicy(Replay({illegal: 0}, advisor="regalloc-evict"), load_policy("default"))
    got = _play(pol, header, adv, obs)
    assert pol.stale and pol.stale_at == illegal and pol.applied == 0
    assert got[illegal] == int(ep.actions[illegal])


# -- the real clang-19 -----------------------------------------------------------
@pytest.fixture(scope="module")
def csrc(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay_src")
    (d / "x.c").write_text(synth.inline_module(120, seed=21))
    (d / "y.c").write_text(synth.inline_module(120, seed=22))
    return d


def _run(tmp_path, args, src, out) -> dict:
    r = _cli(["run"] + args + ["--", "clang-19", "-Oz", "-c", str(src), "-o", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _taken(log) -> list[int]:
    return [int(o["inlining_decision"][0]) for o in codec.iter_log(str(log)) if isinstance(o, codec.Observation)]


@needs_clang
def test_replay_reproduces_its_object(csrc, tmp_path):
    base = _run(tmp_path, ["--log", str(tmp_path / "d.log")], csrc / "x.c", tmp_path / "d.o")
    default = _taken(tmp_path / "d.log")
    assert len(default) == base["observations"] > 40
    forced = {i: 1 - default[i] for i in (2, 9, 17, 33)}
    rfile = _write(tmp_path / "r.json", Replay(forced).to_json())
    outs = []
    for k in range(2):
        log = tmp_path / f"r{k}.log"
        out = _run(tmp_path, ["--actions", rfile, "--log", str(log)], csrc / "x.c", tmp_path / f"r{k}.o")
        assert out["replay"] == {"forced": 4, "applied": 4, "missed": 0, "decisions": out["observations"],
                                 "stale": False}
        taken = _taken(log)
        assert all(taken[i] == a for i, a in forced.items())
        assert taken[:2] == default[:2]  # the base (default) answered before the first forced decision
        outs.append((tmp_path / f"r{k}.o").read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != (tmp_path / "d.o").read_bytes()  # the flips changed the code


@needs_clang
def test_stale_fingerprint_falls_back_to_the_base(csrc, tmp_path):
    base = _run(tmp_path, ["--log", str(tmp_path / "d.log")], csrc / "x.c", tmp_path / "d.o")
    default = _taken(tmp_path / "d.log")
    rfile = _write(tmp_path / "r.json", Replay({i: 1 - default[i] for i in (4, 12)}).to_json())
    fp = str(tmp_path / "fp.json")
    made = _run(tmp_path, ["--actions", rfile, "--save-replay", fp], csrc / "x.c", tmp_path / "m.o")
    saved = read_replay(fp)
    assert saved.observations == made["observations"] and set(saved.fingerprint["at"]) == {"4", "12"}
    # the fingerprinted replay on its own module: applied, same object
    same = _run(tmp_path, ["--actions", fp], csrc / "x.c", tmp_path / "s.o")
    assert same["replay"]["applied"] == 2 and not same["replay"]["stale"]
    assert (tmp_path / "s.o").read_bytes() == (tmp_path / "m.o").read_bytes()
    # another module (what an edited source looks like): stale, the base's object
    other = _run(tmp_path, ["--actions", fp], csrc / "y.c", tmp_path / "o.o")
    assert other["replay"]["stale"] and other["replay"]["applied"] == 0
    subprocess.run(["clang-19", "-Oz", "-c", str(csrc / "y.c"), "-o", str(tmp_path / "plain_y.o")], check=True)
    assert (tmp_path / "o.o").read_bytes() == (tmp_path / "plain_y.o").read_bytes()
    # a wrong digest on the right module: stale, the base's (here: -Oz's) object
    d = json.loads(open(fp).read())
    d["fingerprint"]["at"]["4"] = "0" * 16
    wrong = _write(tmp_path / "wrong.json", d)
    w = _run(tmp_path, ["--actions", wrong], csrc / "x.c", tmp_path / "w.o")
    assert w["replay"]["stale"] and w["replay"]["applied"] == 0
    assert (tmp_path / "w.o").read_bytes() == (tmp_path / "d.o").read_bytes()
    assert base["text_size"] == w["text_size"]
