"""The batched search end to end (mlgo_host.search.driver)
with the real clang-19: call-site keys, the compiler's replay of a decision
set, and whole searches of a module, cut and resumed."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from _search_helpers import search
from mlgo_host.policies import load_policy
from mlgo_host.search.driver import result_of, search_module_batched, search_result
from mlgo_host.search.probe import probe_module
from mlgo_host.search.replay import ReplayEvaluator
from mlgo_host.search.result import SearchResult
from mlgo_host.search.scheduling import Scheduler


def _plain_object(module, out: Path) -> bytes:
    subprocess.run(module.compile_command("clang-19", str(out)), check=True, capture_output=True)
    return out.read_bytes()


@pytest.mark.parametrize("name", ["gen", "shapes", "globals", "copies", "lambda", "macros"])
def test_replaying_the_defaults_decisions_gives_the_Oz_object_byte_for_byte(batched_corpus, tmp_path, name):
    m = batched_corpus[name]
    probe = probe_module(m, load_policy("default"))
    assert probe.episode.n >= 3
    ev = ReplayEvaluator(m, {d.site.caller for d in probe.decisions})
    yes = [d.site for d in probe.decisions if d.inlined]
    remarks = ev.compile(yes, str(tmp_path / "replayed.o"))
    assert (tmp_path / "replayed.o").read_bytes() == _plain_object(m, tmp_path / "plain.o")
    assert "inlined into" in remarks


def test_every_key_of_a_c_module_is_one_the_compiler_matches(batched_corpus):
    # each not-inlined decision flipped alone is inlined by the replay: its
    # key (caller-relative line, inline chain) names the site the compiler sees
    m = batched_corpus["gen"]
    probe = probe_module(m, load_policy("default"))
    scope = {d.site.caller for d in probe.decisions}
    ev = ReplayEvaluator(m, scope)
    yes = {d.site.key: d.site for d in probe.decisions if d.inlined}
    base = ev.measure(yes.values())
    assert set(yes) <= base.inlined
    no = [d.site for d in probe.decisions if not d.inlined]
    assert len(no) >= 5
    for s in no[:12]:
        got = ev.measure([*yes.values(), s])
        assert s.key in got.inlined, s.key


def test_the_batched_search_measures_many_flips_per_compile_and_never_ends_bigger(batched_corpus):
    m = batched_corpus["gen"]
    from mlgo_host.measure.compile import baseline_size

    d = baseline_size(m, cache_dir=None)
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=d)
    assert r["status"] == "ok" and r["compiles"] <= 20
    assert r["flips_measured"] >= 3 * (r["compiles"] - 3), r  # probe (2) and the reference (1) measure no flip
    assert r["best_size"] <= d
    if r["inline"] is not None:  # the best set, replayed, is the size it claims
        from mlgo_host.search.sites import site_of_line

        ev = ReplayEvaluator(m, r["scope"])
        assert ev.measure([site_of_line(x) for x in r["inline"]]).text == r["best_size"]


def test_the_flips_the_search_applied_add_up_to_its_gain(batched_corpus):
    # each flip applied once (but when undone: winners that interact), its
    # bytes measured against the reference as it was: their sum is the final
    # compile's gain (to the byte but for .eh_frame's padding, which follows
    # the total), also when a flip's change spilled out of its predicted
    # functions (read from the object's total, the reference then is that
    # compile), once the compiled references' drift from the derived ones is
    # counted
    s = search(batched_corpus, budget=60, copies=True)
    st = s.state
    s.run()
    assert st.compiled
    applied = [o for o in st.outcomes if o.accepted]
    undone = {o.candidate.key for o in applied if o.candidate.kind == "undo"}
    kept = [o.candidate.key for o in applied if o.candidate.key not in undone]
    assert len(kept) >= 3 and len(set(kept)) == len(kept)
    assert all(sum(o.candidate.key == k for o in applied) == 2 for k in undone)  # applied, then undone
    gain = st.start_text - st.base.text
    drift = s.reference.drift
    assert abs(gain + sum(o.delta for o in applied) + drift) <= 4, (gain, [o.delta for o in applied], drift)
    # what tune keeps: a flip is accepted once, and only while it is in the best set
    r = result_of(s, st.probe.text, 0.0)
    kept = [f["key"] for f in r["flips"] if f["accepted"]]
    assert len(set(kept)) == len(kept) and set(kept) <= {o.candidate.key for o in applied}


def test_the_users_deadline_bounds_the_probe(batched_corpus, tmp_path, monkeypatch):
    import tempfile
    import time

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what the cut probe leaves behind is seen
    m = batched_corpus["gen"]
    t0 = time.time()
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=1,
                              deadline=t0 + 0.05)
    assert time.time() - t0 < 2.0  # the probe is cut at the deadline, not at the module's 300 s timeout
    assert r == {"name": m.name, "status": "skipped", "compiles": 0}  # not a failure: a later run probes again
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20, default_size=1,
                              deadline=time.time() - 1)
    assert r["status"] == "skipped"  # past the deadline: no compile at all
    assert list(tmp_path.iterdir()) == []  # no FIFO, temp file or directory left


def test_a_module_without_decisions_costs_one_compile(batched_corpus):
    from mlgo_host.measure.compile import baseline_size

    m = batched_corpus["leaf"]
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=20,
                              default_size=baseline_size(m, cache_dir=None))
    assert r["decisions"] == 0 and r["compiles"] == 1 and r["stopped"] == "exhausted"


def test_the_groups_are_formed_again_from_each_new_best_and_none_is_measured_twice(batched_corpus, monkeypatch):
    s = search(batched_corpus, budget=400, copies=True)
    formed = []
    real = s.cands.groups

    def groups():
        out = real()
        formed.append({c.key for c in out})
        return out

    monkeypatch.setattr(s.cands, "groups", groups)
    s.run()
    assert s.exhausted and len(formed) >= 2  # (after every pass that measured all it queued, not only the first)
    measured = [o.candidate.key for o in s.state.outcomes if o.candidate.kind == "group"]
    assert measured and len(measured) == len(set(measured))
    assert set(measured) <= set().union(*formed)


def test_a_sweep_the_compiles_left_do_not_afford_is_left_to_the_resumed_search(batched_corpus, monkeypatch):
    # (every sweep unaffordable: tune's next pass gives the module its compiles)
    monkeypatch.setattr(Scheduler, "affords", lambda self, sweep: False)
    from mlgo_host.measure.compile import baseline_size

    m = batched_corpus["gen"]
    d = baseline_size(m, cache_dir=None)
    r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=400, default_size=d)
    assert r["stopped"] == "sweep" and r["compiles"] < 400
    assert {p["kind"] for p in r["pending"]} == {"again"} and "again" not in {f["kind"] for f in r["flips"]}
    for _ in range(8):
        n = len(r["flips"])
        r = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=r["compiles"] + 400,
                                  default_size=d, resume=r)
        assert "again" in {f["kind"] for f in r["flips"][n:]}  # the resumed search measured the sweep
        if r["stopped"] != "sweep":
            break
    assert r["stopped"] == "exhausted" and r["sweep_mark"] == r["wins"]  # (the last sweep won nothing)


def test_flips_a_budget_cuts_off_are_measured_by_the_resumed_search(batched_corpus, monkeypatch):
    s = search(batched_corpus, budget=40)
    st = s.state
    s.reference.compile_start()  # (the replay's own start: a failed attribution is the batch's)
    a, b = s.batches_of(s.candidates())[0][:2]
    # the budget runs out between the halves of a split batch: the second half is not measured
    st.budget = st.ev.compiles + 3
    monkeypatch.setattr(s.attribution, "read", lambda batch, m: (None, "a function outside every footprint changed"))
    touched, lost, rest = s.one_pass([a, b])
    assert [c.key for c in rest] == [b.key] and b.key not in st.tried  # kept, not lost as tried
    monkeypatch.undo()
    # end to end: a search cut by its budget keeps what it queued, and the resumed one measures it
    from mlgo_host.measure.compile import baseline_size
    m = batched_corpus["gen"]
    d = baseline_size(m, cache_dir=None)
    r1 = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=8, default_size=d)
    assert r1["stopped"] == "budget" and r1["pending"]
    measured1 = {f["key"] for f in r1["flips"]}
    assert set(r1["tried"]) <= measured1  # nothing counted as tried that was not measured
    r2 = search_module_batched(m, load_policy("default"), {"clang": "clang-19"}, budget=r1["compiles"] + 200,
                               default_size=d, resume=r1)
    again = [f["key"] for f in r2["flips"][len(r1["flips"]):]]
    assert r2["stopped"] in ("exhausted", "sweep")  # (a sweep is left when it won: see the sweep's test)
    # every queued flip is measured (an answered one, under its key, unless its functions changed since)
    plain = {" + ".join(p["keys"]) for p in r1["pending"] if not p.get("release")}
    answered = {" + ".join(p["keys"]) + " (answered)" for p in r1["pending"] if p.get("release")}
    assert plain and plain <= set(again)
    assert {k for k in again if k.endswith(" (answered)")} <= answered


def test_passes_too_short_to_split_an_unreadable_batch_pack_smaller_ones_until_flips_are_measured(
        batched_corpus, monkeypatch):
    # a deadline's pass may give a module one compile: when its batch cannot be read (validation's woff2_out:
    # any flip there makes a destructor no footprint holds), the halves wait for the next pass, which packed
    # the same batch again, failed again, and never measured a flip
    from mlgo_host.measure.compile import baseline_size
    from mlgo_host.search.attribution import Attribution

    real = Attribution.read
    monkeypatch.setattr(Attribution, "read", lambda self, batch, m: real(self, batch, m) if len(batch) == 1
                        else (None, "a function outside every footprint changed"))
    m, cfg = batched_corpus["gen"], {"clang": "clang-19", "copies": False}  # (a flip in copies is read apart)
    d = baseline_size(m, cache_dir=None)
    r = search_module_batched(m, load_policy("default"), cfg, budget=5, default_size=d)
    assert r["flips_measured"] == 0 and r["batch_cap"] is not None
    caps = [r["batch_cap"]]
    for _ in range(8):
        if r["flips_measured"]:
            break
        r = search_module_batched(m, load_policy("default"), cfg, budget=r["compiles"] + 2,
                                  default_size=d, resume=r)
        caps.append(r["batch_cap"])
    assert r["flips_measured"] > 0 and r["tried"]
    assert all(a is not None and a < 48 for a in caps[:-1])  # (smaller batches until one was read)


def test_the_stored_result_is_the_search_results_fields_under_the_keys_tune_reads(batched_corpus):
    s = search(batched_corpus, "accessor", budget=10)
    r = result_of(s, s.state.probe.text, 0.5)
    assert list(r) == [f.name for f in dataclasses.fields(SearchResult)] == [
        "name", "module_key", "status", "reason", "search", "default_size", "policy_size", "start_size",
        "replay_start_size", "replay_matches", "best_size", "compiles", "batches", "splits", "flips_measured",
        "flips_in_copies", "flips", "pending", "grouped", "wins", "sweep_mark", "interacting", "batch_cap", "no_copies",
        "not_in_copies", "broken_keys",
        "broken", "decisions", "wall_s", "tried", "promise", "stopped", "reference", "inline", "scope",
        "inline_all", "probe", "header", "raw", "probe_actions", "actions", "default_slot"]
    typed = search_result(s, s.state.probe.text, 0.5)
    assert typed.probe is r["probe"] is s.state.probe and typed.wall_s == r["wall_s"] == 0.5
    assert typed.inline_all == r["inline_all"] and list(typed.actions) == list(r["actions"])
