"""`mlgo-host trace` and `mlgo-host vocab` on a small real corpus (clang-19)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mlgo_host.channel import codec
from mlgo_host.cli import main
from mlgo_host.errors import ConfigError
from mlgo_host.evaluation.traces import Trace, read_log, record_trace
from mlgo_host.policies.vocab import Vocab


def test_default_trace_index_and_logs(default_trace, small_corpus):
    from mlgo_host.corpus.corpus import load_corpus
    from mlgo_host.measure.compile import compile_plain

    out, index = default_trace
    assert json.loads((out / "trace.json").read_text()) == index
    assert index["advisor"] == "inline" and index["policy"] == "default"
    assert index["compiler"] and "clang" in index["compiler"]
    assert index["default_slot"] in ("callee_basic_block_count", "inlining_default")
    rows = {m["name"]: m for m in index["modules"]}
    corpus = load_corpus(str(small_corpus))
    assert set(rows) == {m.name for m in corpus}
    failed = [m for m in index["modules"] if m["status"] != "ok"]
    assert len(failed) == 1 and failed[0]["reason"] and failed[0]["log"] is None
    assert index["totals"]["ok"] == len(rows) - 1
    for m in corpus:
        r = rows[m.name]
        if r["status"] != "ok":
            continue
        lg = read_log(str(out / r["log"]), "inlining_decision")
        assert lg.n == r["observations"] > 0
        counts = {str(k): int(v) for k, v in zip(*np.unique(lg.actions, return_counts=True))}
        assert counts == r["decisions"]
        # the default policy reproduces the compiler's -Oz object: same text size
        assert r["text_size"] == compile_plain(m).text_size
    assert index["totals"]["observations"] == sum(m["observations"] for m in index["modules"] if m["status"] == "ok")
    assert not [p for p in out.parent.iterdir() if p.name != out.name]  # no temp dirs left


def test_trace_logs_are_training_logs(default_trace):
    out, index = default_trace
    row = next(m for m in index["modules"] if m["status"] == "ok")
    recs = codec.decode((out / row["log"]).read_bytes())
    header = recs[0]
    assert header.features[-1].name == "inlining_decision"  # the advice taken is the last feature
    obs = [r for r in recs if isinstance(r, codec.Observation)]
    assert len(obs) == row["observations"]
    # the log's default-slot column is the decision the default policy took
    slot = index["default_slot"]
    for o in obs:
        assert int(o["inlining_decision"][0]) == (1 if int(o[slot][0]) else 0)


def test_vocab_command(default_trace, tmp_path, capsys):
    out, _ = default_trace
    rc = main(["vocab", "--trace", str(out), "--output", str(tmp_path / "v"), "--num_buckets", "50"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    vocab = Vocab.load(str(tmp_path / "v"))
    assert printed["features"] == len(vocab)
    assert "inlining_decision" not in vocab and "cost_estimate" in vocab
    trace = Trace(str(out))
    allv = np.concatenate([lg.records["cost_estimate"].ravel() for lg in trace.logs()]).astype(float)
    np.testing.assert_allclose(vocab["cost_estimate"].raw, np.quantile(allv, np.linspace(0, 1, 50)))
    rc = main(["vocab", "--trace", str(out), "--output", str(tmp_path / "s"), "--sampling_fraction", "0.3"])
    assert rc == 0 and len(Vocab.load(str(tmp_path / "s"))) == len(vocab)


def test_trace_command_and_bad_inputs(small_corpus, tmp_path, capsys):
    rc = main(["trace", "--corpus", str(small_corpus), "--output", str(tmp_path / "t"), "--policy", "never",
               "--modules", "2", "--no_progress"])
    assert rc == 0
    index = json.loads((tmp_path / "t" / "trace.json").read_text())
    assert index["policy"] == "never" and len(index["modules"]) == 2
    for m in index["modules"]:
        assert set(m["decisions"]) == {"0"}
    capsys.readouterr()
    assert main(["vocab", "--trace", str(tmp_path), "--output", str(tmp_path / "v")]) == 2
    assert "not a trace directory" in capsys.readouterr().err
    with pytest.raises(ConfigError):
        record_trace(str(small_corpus), str(tmp_path / "x"), policy="no-such-policy", progress=False)
    assert not os.path.exists(tmp_path / "x")
    # an index whose modules are not module records
    bad = tmp_path / "bad"
    bad.mkdir()
    for modules in (5, ["x"], [{"status": "ok", "log": 3}]):
        (bad / "trace.json").write_text(json.dumps({"format": "mlgo_host.trace/1", "modules": modules}))
        assert main(["vocab", "--trace", str(bad), "--output", str(tmp_path / "v")]) == 2
        assert "'modules' must be a list of module records" in capsys.readouterr().err


def test_a_module_that_opens_no_channel_is_traced_with_no_decisions(tmp_path):
    """The eviction advisor never opens the channel for a module without function bodies: its row is
    ok with no decisions, beside a module that has them."""
    from _corpus_helpers import build_generated_corpus
    from mlgo_host.corpus import synth

    corpus = build_generated_corpus(tmp_path / "c", {}, sources={
        "nobody": synth.no_body_module(), "pressure": synth.pressure_module(2, 36, seed=5)})
    index = record_trace(str(corpus), str(tmp_path / "trace"), advisor="regalloc-evict", progress=False)
    rows = {m["name"].rsplit("/", 1)[-1].split(".")[0]: m for m in index["modules"]}
    assert {r["status"] for r in rows.values()} == {"ok"}, rows
    assert rows["nobody"]["observations"] == 0 and rows["pressure"]["observations"] > 0
