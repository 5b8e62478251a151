"""A model of each decision's effect, learned from measured flips.

Rows: the flip-effect table's training-split entries
(``effects.py`` beside this file: flips alone from the default) and the
search rounds' flips (:mod:`mlgo_host.training.search_loop`: flips around
the policy of the round), each a feature record, the action it flipped from
and the bytes the flip changed.  Only flips the compiler applied count.

The target is the same for both actions: **the bytes inlining saves** at
the decision, ``t = size(not inlined) - size(inlined)``: a flip from
``not inline`` changed the object by ``-t``, one from ``inline`` by ``t``.
The network is the project's actor (:func:`~mlgo_host.learning.imitate.fit_actor`,
the default decision an input), read as a regression: its logit difference
``d = logit[1] - logit[0]`` predicts ``slog(t) = sign(t) * log1p(|t|)``
(bytes span five orders of magnitude; the log keeps a few huge flips from
owning the fit while the weights, the bytes at stake, keep them important).

Deployed, ``d`` goes through the gate the imitation policy already has
(:class:`~mlgo_host.policies.actor.NumpyPolicy`): the default is left only
where the model predicts the flip saves more than ``tau`` bytes, i.e. ``d``
beyond ``log1p(tau)``, which is gate probability ``sigmoid(log1p(tau))``.
So an effect model is a normal saved policy (numpy ``actor.npz``, loadable
by ``--policy DIR``); ``metadata.json`` says what its output means
(``extra.effect_model``) and its gate carries ``tau_bytes``.

Run as a script: learn from the flip-effect table and compare methods on
the validation split by real compiles (``bench/results/effect_models.json``).

Data: the table's training-split entries (``effects.py``) plus the
flips of a search run's rounds (``<run>/search/round-N.pkl``: training
modules only, checked).  Methods, all the project's actor network on the
same normalized features (the default decision an input):

* ``imitation``: the weighted imitation classifier (labels: the better
  action, weights: bytes at stake) retrained on these flips; gate p;
* ``mlp_huber`` / ``mlp_mse``: a regression of the bytes inlining saves
  (signed log), weighted by bytes at stake; the default is flipped where
  the predicted saving exceeds tau bytes;
* ``linear_huber``: the same regression without hidden layers (baseline).

Each (method, threshold) is compiled on the validation modules; the
choice is the smallest validation total with no module more than 1 %
bigger than -Oz.  Only the chosen one is then measured on the held-out
split and the external corpus (reporting only).  Every evaluation is
cached under ``--root`` (a rerun goes on).

usage: .venv/bin/python bench/research/effect_models.py --table effects_out/table --rounds RUN/search
       --corpus pretrain_out/training_corpus --external pretrain_out/external_corpus
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import pickle
import shutil
import sys
import time
from typing import Any, Iterable, Sequence

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.dirname(BENCH))
sys.path.insert(0, BENCH)  # (pretrain.py's figures)

from mlgo_host.channel.codec import Header  # noqa: E402
from mlgo_host.corpus.corpus import load_corpus, split_three  # noqa: E402
from mlgo_host.errors import ConfigError  # noqa: E402
from mlgo_host.learning.imitate import Examples, fit_actor  # noqa: E402

from effects import entries  # noqa: E402

#: a flip's weight: the bytes at stake, clipped (one huge flip must not be the whole loss)
MAX_WEIGHT = 4096.0


def bytes_saved_by_inlining(delta: np.ndarray, from_action: np.ndarray) -> np.ndarray:
    """``t`` of each flip (see the module docstring)."""
    return np.where(np.asarray(from_action) == 1, delta, -np.asarray(delta)).astype(np.float64)


def slog(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


def gate_of_tau(tau: float) -> float:
    """The gate probability that leaves the default only where the predicted
    saving exceeds ``tau`` bytes."""
    return 1.0 / (1.0 + math.exp(-math.log1p(max(float(tau), 0.0))))


def tau_of_gate(gate: float) -> float:
    g = min(max(float(gate), 0.5), 1.0 - 1e-12)
    return math.expm1(math.log(g / (1.0 - g)))


# -- rows --------------------------------------------------------------------------


def flips_of_table(entries: Iterable[dict], splits: Sequence[str] = ("train",)) -> list[tuple[dict, dict]]:
    """(entry, flip) of the table's entries in ``splits`` (applied flips)."""
    return [(e, f) for e in entries if e["status"] == "ok" and e["split"] in splits
            for f in e["flips"] if f["applied"] and f.get("raw")]


def flips_of_rounds(paths: Sequence[str], allowed: set[str]) -> list[tuple[dict, dict]]:
    """(result, flip) of search rounds' pickles, for modules in ``allowed``
    only (a round's module outside it is refused: a choice must not read a
    validation or held-out module)."""
    out = []
    for p in paths:
        with open(p, "rb") as f:
            results = pickle.load(f)
        for r in results:
            if r.get("status") != "ok":
                continue
            if r["name"] not in allowed:
                raise ConfigError(f"{os.path.basename(p)}: module {r['name']!r} is not in the training split")
            out += [(r, fl) for fl in r["flips"] if fl.get("raw") and fl.get("applied")]
    return out


def effect_examples(pairs: Sequence[tuple[dict, dict]], max_weight: float = MAX_WEIGHT) -> "EffectRows":
    """Feature records, flipped-from actions, deltas and weights of (source, flip) pairs sharing one header."""
    if not pairs:
        raise ConfigError("no measured flip to learn from")
    header = Header.from_json(pairs[0][0]["header"])
    dt = header.record_dtype
    recs = np.frombuffer(b"".join(f["raw"] for _, f in pairs), dtype=dt)
    frm = np.array([f["from"] for _, f in pairs], dtype=np.int64)
    delta = np.array([f["delta"] for _, f in pairs], dtype=np.float64)
    return EffectRows(header, recs, frm, delta, np.clip(np.abs(delta), 1.0, max_weight),
                      [src["name"] for src, _ in pairs])


class EffectRows:
    """Measured flips: records, the action flipped from, the change, the weight, the module."""

    def __init__(self, header: Header, records: np.ndarray, from_action: np.ndarray, delta: np.ndarray,
                 weights: np.ndarray, modules: list[str]):
        self.header, self.records, self.from_action = header, records, from_action
        self.delta, self.weights, self.modules = delta, weights, modules

    def __len__(self) -> int:
        return int(self.delta.shape[0])

    def __add__(self, other: "EffectRows") -> "EffectRows":
        return EffectRows(self.header, np.concatenate([self.records, other.records]),
                          np.concatenate([self.from_action, other.from_action]),
                          np.concatenate([self.delta, other.delta]), np.concatenate([self.weights, other.weights]),
                          self.modules + other.modules)

    @property
    def saved(self) -> np.ndarray:
        return bytes_saved_by_inlining(self.delta, self.from_action)

    def as_imitation(self) -> Examples:
        """The same flips as the imitation's examples: the better action
        (the flipped one when it shrank the object), weight the bytes at stake."""
        labels = np.where(self.delta < 0, 1 - self.from_action, self.from_action)
        return Examples(self.header, self.records, labels.astype(np.int64), self.weights)


# -- training ------------------------------------------------------------------------


def _loss(kind: str, huber_delta: float = 1.0):
    """A regression of the logit difference on the target (slog bytes)."""
    import tensorflow as tf

    def loss(logits, target, wts):
        d = logits[:, 1] - logits[:, 0]
        err = d - target
        if kind == "huber":
            a = tf.abs(err)
            per = tf.where(a <= huber_delta, 0.5 * err * err, huber_delta * (a - 0.5 * huber_delta))
        elif kind == "mse":
            per = err * err
        else:
            raise ConfigError(f"effect loss must be 'huber' or 'mse', got {kind!r}")
        return tf.reduce_sum(per * wts) / tf.reduce_sum(wts)

    return loss


#: example weights: the bytes at stake (clipped), their square root, or none
WEIGHTINGS = ("bytes", "sqrt", "none")


def _weights(rows: EffectRows, weighting: str) -> np.ndarray:
    if weighting not in WEIGHTINGS:
        raise ConfigError(f"effect weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    return {"bytes": rows.weights, "sqrt": np.sqrt(rows.weights), "none": np.ones_like(rows.weights)}[weighting]


def train_effect_model(rows: EffectRows, output_dir: str, *, default_slot: str, loss: str = "huber",
                       weighting: str = "bytes", fc_layer_params: Sequence[int] = (40, 40, 20), epochs: int = 20,
                       seed: int = 0, compiler: str | None = None, extra: dict | None = None, **kw) -> dict[str, Any]:
    """Fit the effect regression (``fc_layer_params=()``: linear) on
    ``rows`` and save it as a policy (no gate yet: :func:`set_tau`)."""
    target = slog(rows.saved).astype(np.float32)
    info = {"target": "signed log1p of the bytes inlining saves (logit[1] - logit[0])", "loss": loss,
            "weighting": weighting, "rows": len(rows), **(extra or {})}
    sp, last = fit_actor(rows.header, rows.records, target, _weights(rows, weighting), _loss(loss), output_dir,
                         default_slot=default_slot, fc_layer_params=fc_layer_params, epochs=epochs, seed=seed,
                         compiler=compiler, saved_model=False, extra={"effect_model": info}, **kw)
    return {"rows": len(rows), "loss": last, **fit_report(sp.actor, rows)}


def predicted_saving(actor, records: np.ndarray) -> np.ndarray:
    """The bytes inlining saves, as the model predicts them."""
    lg = actor.logits(records)
    d = lg[:, 1] - lg[:, 0]
    return np.sign(d) * np.expm1(np.abs(d))


def fit_report(actor, rows: EffectRows, taus: Sequence[float] = (0.0, 8.0, 32.0)) -> dict[str, Any]:
    """How well the model ranks the flips of ``rows``: for flips it would
    take at each ``tau``, how many and the bytes they measured (a table's
    flips are alone from the default, so their sum is what taking them one
    by one would give)."""
    pred = predicted_saving(actor, rows.records)
    # the predicted change of flipping: -t from not inlined, t from inlined
    pflip = np.where(rows.from_action == 1, pred, -pred)
    out = {"weighted_sign_accuracy": float(np.sum((np.sign(pflip) == np.sign(rows.delta)) * rows.weights)
                                           / np.sum(rows.weights))}
    for tau in taus:
        take = pflip < -tau
        out[f"tau{tau:g}"] = {"flips": int(take.sum()), "bytes": int(rows.delta[take].sum())}
    return out


def set_tau(policy_dir: str, tau: float, **info) -> None:
    """Gate an effect model at ``tau`` bytes (see the module docstring)."""
    from mlgo_host.policies.saved import set_gate

    set_gate(policy_dir, gate_of_tau(tau), tau_bytes=float(tau), **info)


# -- the comparison (the script) --------------------------------------------------

IMITATION_GATES = (0.5, 0.6, 0.7, 0.9)
TAUS = (0.0, 2.0, 4.0, 8.0, 32.0)
METHODS = {
    "imitation": {"kind": "imitation", "fc": (40, 40, 20)},
    "mlp_huber": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber"},
    "mlp_mse": {"kind": "regression", "fc": (40, 40, 20), "loss": "mse"},
    "linear_huber": {"kind": "regression", "fc": (), "loss": "huber"},
    "mlp_huber_sqrt": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber", "weighting": "sqrt"},
    "mlp_huber_unweighted": {"kind": "regression", "fc": (40, 40, 20), "loss": "huber", "weighting": "none"},
    "linear_huber_unweighted": {"kind": "regression", "fc": (), "loss": "huber", "weighting": "none"},
    "imitation_unweighted": {"kind": "imitation", "fc": (40, 40, 20), "weighting": "none"},
}


def _round_rows(rounds: str, train_names: set[str], root: str):
    """The rounds' flips, cached (the round pickles are slow to load)."""
    path = os.path.join(root, "round_rows.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return pickle.load(f)
    rows = effect_examples(flips_of_rounds(sorted(glob.glob(os.path.join(rounds, "round-*.pkl"))), train_names))
    with open(path, "wb") as f:
        pickle.dump(rows, f, protocol=pickle.HIGHEST_PROTOCOL)
    return rows


def _rows(table: str, rounds: str, train_names: set[str], val_names: set[str], root: str):
    ents = list(entries(table))
    bad = [e["name"] for e in ents if e["name"] not in train_names | val_names]
    if bad:
        raise SystemExit(f"the table holds modules outside training and validation: {bad[:3]}")
    tab = effect_examples(flips_of_table(ents, ("train",)))
    rnd = _round_rows(rounds, train_names, root)
    val = effect_examples(flips_of_table(ents, ("validation",))) if any(
        e["split"] == "validation" and e["flips"] for e in ents) else None
    return tab, rnd, val


def _train(name: str, m: dict, rows, out: str, slot: str, val_rows) -> dict:
    from mlgo_host.learning.imitate import train_imitation

    if os.path.exists(os.path.join(out, "metadata.json")):  # trained before: how it fits, from the saved weights
        from mlgo_host.policies.saved import read_saved_policy

        actor = read_saved_policy(out).actor
        if m["kind"] == "imitation":
            ex = rows.as_imitation()
            acc = float(np.sum((actor.greedy(ex.records) == ex.labels) * ex.weights) / np.sum(ex.weights))
            return {"cached": True, "weighted_accuracy": acc}
        return {"cached": True, **fit_report(actor, rows)}
    t0 = time.monotonic()
    if m["kind"] == "imitation":
        ex = rows.as_imitation()
        if m.get("weighting") == "none":
            ex.weights = np.ones_like(ex.weights)
        fit = train_imitation(ex, out, default_slot=slot, fc_layer_params=m["fc"], saved_model=False,
                              extra={"data": "effect table + search rounds"})
    else:
        fit = train_effect_model(rows, out, default_slot=slot, loss=m["loss"], fc_layer_params=m["fc"],
                                    weighting=m.get("weighting", "bytes"))
        if val_rows is not None:
            from mlgo_host.policies.saved import read_saved_policy

            fit["validation_table"] = fit_report(read_saved_policy(out).actor, val_rows)
    fit["train_s"] = round(time.monotonic() - t0, 1)
    return fit


def _thresholds(m: dict) -> list[tuple[str, float]]:
    return [("gate", g) for g in IMITATION_GATES] if m["kind"] == "imitation" else [("tau", t) for t in TAUS]


def _gated(src: str, dst: str, kind: str, thr: float) -> str:
    from mlgo_host.policies.saved import set_gate

    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if kind == "gate":
        set_gate(dst, thr, chosen_on="validation")
    else:
        set_tau(dst, thr, chosen_on="validation")
    return dst


def _val_figures(rep) -> dict:
    ok = [r for r in rep.rows if r.ok]
    b = sum(r.baseline_text for r in ok)
    p = sum(r.policy_text for r in ok)
    worst = max((100.0 * (r.policy_text - r.baseline_text) / max(r.baseline_text, 1) for r in ok), default=0.0)
    return {"modules": len(ok), "failed": len(rep.rows) - len(ok), "oz_text": b, "policy_text": p,
            "change_pct": round(100.0 * (p - b) / b, 4), "worst_module_pct": round(worst, 3),
            "bigger_1pct": sum(r.policy_text > 1.01 * r.baseline_text for r in ok)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", required=True)
    ap.add_argument("--rounds", required=True, help="a search run's search/ directory (round-N.pkl)")
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--external", default=None)
    ap.add_argument("--root", default="effect_models_out")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--final", action="store_true", help="measure the chosen one on held-out and external")
    ap.add_argument("--output", default=os.path.join(BENCH, "results", "effect_models.json"))
    args = ap.parse_args()
    from mlgo_host.channel.default_slot import default_slot
    from mlgo_host.evaluation.evaluate import evaluate

    root = os.path.abspath(args.root)
    os.makedirs(root, exist_ok=True)
    cache = os.path.join(root, "evals.json")
    evals = json.load(open(cache)) if os.path.exists(cache) else {}
    corpus = load_corpus(args.corpus)
    train, val, _ = split_three(corpus.modules, 0.2, 0.2, 0)
    tab, rnd, val_rows = _rows(args.table, args.rounds, {m.name for m in train}, {m.name for m in val}, root)
    rows = tab + rnd
    slot = default_slot("clang-19", 300.0)
    report = {"data": {"table_train_rows": len(tab), "round_rows": len(rnd), "rows": len(rows),
                       "validation_table_rows": len(val_rows) if val_rows is not None else 0},
              "methods": {}}
    baselines = os.path.join(root, "baselines")
    for name in args.methods.split(","):
        m = METHODS[name]
        pdir = os.path.join(root, name)
        fit = _train(name, m, rows, pdir, slot, val_rows)
        report["methods"][name] = {"fit": fit, "validation": {}}
        for kind, thr in _thresholds(m):
            key = f"{name}@{kind}={thr:g}"
            if key not in evals:
                t0 = time.monotonic()
                gated = _gated(pdir, os.path.join(root, "gated", key.replace("=", "_")), kind, thr)
                rep = evaluate(args.corpus, gated, selected=val, jobs=args.workers, cache_dir=baselines,
                               progress=False)
                evals[key] = dict(_val_figures(rep), eval_s=round(time.monotonic() - t0, 1))
                with open(cache, "w") as f:
                    json.dump(evals, f, indent=1)
            report["methods"][name]["validation"][f"{kind}={thr:g}"] = evals[key]
            print(key, evals[key], flush=True)
    ok = [(v["change_pct"], k) for k, v in evals.items()
          if not k.startswith("final:") and v["worst_module_pct"] <= 1.0 and v["failed"] == 0 and k.split("@")[0] in args.methods.split(",")]
    chosen = min(ok)[1] if ok else None
    report["chosen"] = chosen
    if args.final and chosen:
        if f"final:{chosen}" not in evals:
            evals[f"final:{chosen}"] = _final(args, root, chosen, evaluate)
            with open(cache, "w") as f:
                json.dump(evals, f, indent=1)
        report["chosen_figures"] = evals[f"final:{chosen}"]
    os.makedirs(os.path.dirname(args.output), exist_ok=True)
    with open(args.output, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    print("chosen on validation:", chosen)
    return 0


def _final(args, root: str, chosen: str, evaluate) -> dict:
    """The chosen policy on the held-out split and the external corpus, per project (reported only)."""
    from pretrain import _figures

    path = os.path.join(root, "gated", chosen.replace("=", "_"))
    out = {"policy": chosen}
    held = evaluate(args.corpus, path, split="heldout", heldout_fraction=0.2, jobs=args.workers, seed=0,
                    cache_dir=os.path.join(root, "baselines"), progress=False)
    out["heldout"] = _figures(held)
    if args.external:
        ext = evaluate(args.external, path, jobs=args.workers, seed=0, cache_dir=os.path.join(root, "baselines"),
                       progress=False)
        out["external"] = _figures(ext)
    return out


if __name__ == "__main__":
    sys.exit(main())
