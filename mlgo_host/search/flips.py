"""Search better inlining decisions for one module: flips around a trajectory.

A module's *trajectory* is the sequence of decisions one compile takes.  The
search starts from a base policy's trajectory (the compiler's default in the
first round), flips one decision at a time (forcing the other action at that
decision index, the base policy deciding everywhere else), keeps a flip when
the object's ``.text`` shrinks, and goes on from the new best trajectory.
Every compile is recorded, so each flip is known as (the observation it was
tried at, the action tried, the bytes it changed).

Where to flip comes from a *prior* over the decisions of the current
trajectory (:func:`flip_scores`):

* the winner patterns measured on real code: inlining where the default
  refused a callee with few users and several blocks, and not inlining a
  tiny callee with two or more users;
* the base policy's uncertainty (|P(inline) - 1/2| small: flip first);
* a flip-gain model learned from the flips tried so far
  (:class:`FlipGainModel`: logistic regression on log-scaled features, numpy
  only, fitted by the learner and shipped to the workers).

The compile budget follows the bytes: :func:`budgets` gives large modules
more flips.  The pool worker that runs it is :class:`mlgo_host.search.worker.SearchWorker`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Sequence

import numpy as np

from mlgo_host.channel.codec import Header
from mlgo_host.corpus.compile import ModuleResult, baseline_size, compile_module
from mlgo_host.corpus.corpus import Module
from mlgo_host.episode import Episode
from mlgo_host.policies.base import Policy
from mlgo_host.progress import progress_bar
from mlgo_host.policies.replay import Replay, ReplayPolicy

log = logging.getLogger("mlgo_host.search")

#: features the pattern prior reads (inliner, present in every clang >= 17 header)
_USERS, _COST, _MULTI = "callee_users", "cost_estimate", "is_multiple_blocks"


# -- the flip-gain model ------------------------------------------------------


def _log_features(feats: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Signed log1p of each named scalar feature: the model's inputs."""
    cols = [np.asarray(feats[n], dtype=np.float64).reshape(len(feats), -1)[:, 0] for n in names]
    x = np.stack(cols, axis=1) if cols else np.zeros((len(feats), 0))
    return np.sign(x) * np.log1p(np.abs(x))


@dataclasses.dataclass
class FlipGainModel:
    """P(a flip shrinks the object | the observation, the action it flips
    from): logistic regression on log-scaled features, one weight vector per
    base action (inline -> no and no -> inline gain for different reasons)."""

    names: list[str]
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # [2, 1 + len(names)]: bias first, per base action

    def predict(self, feats: np.ndarray, base_actions: np.ndarray) -> np.ndarray:
        x = (_log_features(feats, self.names) - self.mean) / self.scale
        w = self.weights[np.asarray(base_actions, dtype=np.int64).clip(0, 1)]
        z = w[:, 0] + np.einsum("ij,ij->i", x, w[:, 1:])
        return 1.0 / (1.0 + np.exp(-z))

    def to_json(self) -> dict:
        return {"names": list(self.names), "mean": self.mean.tolist(), "scale": self.scale.tolist(),
                "weights": self.weights.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> "FlipGainModel":
        return cls(list(d["names"]), np.asarray(d["mean"]), np.asarray(d["scale"]), np.asarray(d["weights"]))

    @classmethod
    def fit(cls, feats: np.ndarray, base_actions: np.ndarray, gained: np.ndarray, names: Sequence[str],
            l2: float = 1.0, steps: int = 300, lr: float = 0.5) -> "FlipGainModel":
        """Fit on tried flips: ``gained`` is 1 where the flip shrank the object."""
        names = list(names)
        x = _log_features(feats, names)
        mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-6
        x = (x - mean) / scale
        w = np.zeros((2, 1 + len(names)))
        for a in (0, 1):
            sel = np.asarray(base_actions) == a
            if sel.sum() < 8:
                continue
            xa = np.hstack([np.ones((int(sel.sum()), 1)), x[sel]])
            ya = np.asarray(gained, dtype=np.float64)[sel]
            wa = np.zeros(xa.shape[1])
            for _ in range(steps):  # full-batch gradient descent: a few thousand rows at most
                p = 1.0 / (1.0 + np.exp(-(xa @ wa)))
                grad = xa.T @ (p - ya) / len(ya) + l2 * np.r_[0.0, wa[1:]] / len(ya)
                wa -= lr * grad
            w[a] = wa
        return cls(names, mean, scale, w)


# -- the prior ------------------------------------------------------------------


def pattern_scores(feats: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """The measured winner patterns, as a score in [0, 1] per decision."""
    names = feats.dtype.names or ()
    n = len(actions)
    if not all(k in names for k in (_USERS, _COST, _MULTI)):
        return np.zeros(n)
    users = feats[_USERS].reshape(n, -1)[:, 0].astype(np.float64)
    cost = feats[_COST].reshape(n, -1)[:, 0].astype(np.float64)
    multi = feats[_MULTI].reshape(n, -1)[:, 0].astype(np.float64)
    refused = actions == 0
    # inline where the default refused: few callee users, a cost just above
    # the threshold (the near misses: measured winners had a median cost
    # estimate of 50, the flips that lost 165), several blocks
    s_in = 0.3 * (users <= 2) + 0.2 * (multi > 0) + 0.5 / (1.0 + np.maximum(cost, 0.0) / 60.0)
    # don't inline a tiny callee that has two or more users; never first
    # where the inliner's cost is negative (a bonus, e.g. the last call of a
    # static function: -15000): of 330 such flips tried by `tune` on C and
    # C++ modules, 2 paid, against 8 of 29 with a cost in [0, 30)
    s_out = 0.6 * (users >= 2) + 0.4 * ((cost >= 0) & (cost < 30)) - 0.6 * (cost < 0)
    return np.where(refused, s_in, s_out)


def flip_scores(feats: np.ndarray, actions: np.ndarray, *, model: FlipGainModel | None = None,
                policy_p1: np.ndarray | None = None, prior_flip_p: np.ndarray | None = None) -> np.ndarray:
    """Where to flip first (higher = earlier): the learned flip-gain model
    when there is one, else the patterns; plus the base policy's
    uncertainty.  ``prior_flip_p``: a trained policy's probability of the
    other action at each decision (the shipped one): it leads
    (:data:`PRIOR_WEIGHT`), the rest breaks its ties."""
    s = model.predict(feats, actions) if model is not None else pattern_scores(feats, actions)
    if policy_p1 is not None:
        s = s + 0.5 * (1.0 - 2.0 * np.abs(np.asarray(policy_p1) - 0.5))
    if prior_flip_p is not None:
        s = PRIOR_WEIGHT * np.asarray(prior_flip_p, dtype=np.float64) + s
    return s


#: the trained prior's weight against the patterns' (or the fitted model's) score in [0, 1]
PRIOR_WEIGHT = 4.0


def budgets(sizes: Sequence[int], decisions: Sequence[int], total: int, *, floor: int = 2) -> list[int]:
    """Compiles per module, ``total`` in all, shared in proportion to the
    square root of each module's ``.text`` bytes (where the bytes are), at
    least ``floor`` and at most one per decision."""
    w = np.sqrt(np.maximum(np.asarray(sizes, dtype=np.float64), 1.0))
    raw = total * w / w.sum() if w.sum() > 0 else np.zeros(len(w))
    return [int(min(max(floor, round(r)), max(d, 0))) for r, d in zip(raw, decisions)]


# -- one module's search --------------------------------------------------------


@dataclasses.dataclass
class Trial:
    """One compile of the search: the trajectory it took and its size."""

    forced: dict[int, int]
    size: int | None
    episode: Episode | None
    reason: str = ""


def _trial(module: Module, base: Policy, forced: dict[int, int], cfg: dict) -> Trial:
    pol = ReplayPolicy(Replay(forced=dict(forced), base=getattr(base, "name", "policy")), base) if forced else base
    res: ModuleResult = compile_module(module, pol, advisor="inline", clang=cfg["clang"],
                                       llvm_size=cfg.get("llvm_size"), timeout=cfg.get("module_timeout", 300.0),
                                       record=True)
    if res.status != "ok":
        return Trial(dict(forced), None, None, res.reason or "failed")
    return Trial(dict(forced), int(res.text_size), res.episode)


def search_module(module: Module, base: Policy, budget: int, cfg: dict, *, default: Policy,
                  model: FlipGainModel | None = None, start_forced: dict[int, int] | None = None,
                  policy_probs=None, patience: int | None = None, exclude=(), deadline: float | None = None,
                  in_order: bool = False, resume: dict | None = None) -> dict:
    """Greedy flip search on one module; returns its best trajectory and
    every flip tried (see the module docstring).  ``patience``: stop after
    that many flips in a row that did not shrink the object (the module
    does not pay); ``exclude``: decision indices not to try (tried before);
    ``deadline``: no compile starts after this ``time.time()``;
    ``in_order``: no prior, decisions in index order (the plain greedy pass);
    ``resume``: an earlier result of this module to go on from (its best
    trajectory, not compiled again; ``start_forced`` is then ignored)."""
    t0 = time.monotonic()
    default_size = baseline_size(module, clang=cfg["clang"], llvm_size=cfg.get("llvm_size"),
                                 cache_dir=cfg.get("baseline_cache"), timeout=cfg.get("module_timeout", 300.0))
    if resume is not None:
        best = _resumed(resume, base, default)
    else:
        best = _start(module, base, default, dict(start_forced or {}), default_size, cfg)
    compiles = best["compiles"]
    cur: Trial = best["trial"]
    flips: list[dict] = []
    tried: set[int] = {int(i) for i in exclude}
    won = [f for f in (resume or {}).get("flips", ()) if f["accepted"]]  # a winner's family goes first
    misses = 0
    while (compiles < budget and cur.episode is not None and cur.episode.n > 0
           and (patience is None or misses < patience) and (deadline is None or time.time() < deadline)):
        order = _candidates(cur, tried, model, policy_probs, in_order, won)
        if not order:
            break
        i = order[0]
        tried.add(i)
        ep = cur.episode
        a = int(ep.actions[i])
        trial = _trial(module, best["base"], {**cur.forced, i: 1 - a}, cfg)
        compiles += 1
        if trial.size is None:
            continue
        delta = trial.size - cur.size
        flips.append({"index": i, "raw": ep.raw[i * ep.header.observation_nbytes:(i + 1) * ep.header.observation_nbytes],
                      "from": a, "delta": int(delta), "accepted": delta < 0})
        if delta < 0:
            cur = trial
            won.append(flips[-1])
            misses = 0
        else:
            misses += 1
    ep = cur.episode
    return {
        "name": module.name, "module_key": module.key, "status": "ok" if ep is not None else "failed",
        "reason": cur.reason,
        "default_size": int(default_size), "policy_size": best["policy_size"], "start_size": best["start_size"],
        "best_size": cur.size, "default_slot": cfg["default_slot"],
        "base": best["base_name"], "forced": {str(k): v for k, v in sorted(cur.forced.items())},
        "compiles": compiles, "flips": flips, "wall_s": time.monotonic() - t0,
        "tried": sorted(tried), "stopped": "budget" if compiles >= budget else "patience" if (
            patience is not None and misses >= patience) else "time" if (
            deadline is not None and time.time() >= deadline) else "exhausted",
        "header": ep.header.to_json() if ep is not None else None,
        "raw": ep.raw if ep is not None else b"",
        "actions": ep.actions if ep is not None else np.zeros(0, np.int64),
    }


def _start(module: Module, base: Policy, default: Policy, forced: dict[int, int], default_size: int,
           cfg: dict) -> dict:
    """The search's start: the base policy's trajectory (with the forced
    flips kept from an earlier round), or the default's when that is smaller:
    the default is always a candidate, so the best is never worse than -Oz."""
    trial = _trial(module, base, forced, cfg)
    policy_size = trial.size
    compiles = 1
    base_name = getattr(base, "name", "policy")
    if base is not default and (trial.size is None or trial.size > default_size):
        dtrial = _trial(module, default, {}, cfg)
        compiles += 1
        if dtrial.size is not None and (trial.size is None or dtrial.size <= trial.size):
            trial, base, base_name = dtrial, default, "default"
    return {"trial": trial, "base": base, "base_name": base_name, "compiles": compiles,
            "start_size": trial.size, "policy_size": policy_size}


def _resumed(res: dict, base: Policy, default: Policy) -> dict:
    """:func:`_start`'s answer from an earlier result (no compile)."""
    forced = {int(k): int(v) for k, v in res["forced"].items()}
    trial = Trial(forced, res["best_size"], episode_from_result(res))
    from_default = res["base"] == "default"
    return {"trial": trial, "base": default if from_default else base, "compiles": 0,
            "base_name": "default" if from_default else getattr(base, "name", "policy"),
            "start_size": res["best_size"], "policy_size": res["best_size"]}


def _family(feats: np.ndarray, actions: np.ndarray, won: Sequence[dict]) -> np.ndarray:
    """1 where a decision looks like a flip that paid in this module (same
    action, callee users and cost: mostly the same callee at another call
    site; winners come in such families), else 0."""
    names = feats.dtype.names or ()
    n = len(actions)
    if not won or _USERS not in names or _COST not in names:
        return np.zeros(n)
    key = np.stack([actions, feats[_USERS].reshape(n, -1)[:, 0], feats[_COST].reshape(n, -1)[:, 0]], axis=1)
    hit = np.zeros(n, dtype=bool)
    for f in won:
        x = np.frombuffer(f["raw"], dtype=feats.dtype, count=1)
        want = np.array([f["from"], x[_USERS].reshape(1, -1)[0, 0], x[_COST].reshape(1, -1)[0, 0]])
        hit |= (key == want).all(axis=1)
    return hit.astype(np.float64)


def _candidates(cur: Trial, tried: set[int], model: FlipGainModel | None, policy_probs,
                in_order: bool = False, won: Sequence[dict] = ()) -> list[int]:
    """Untried decision indices of the current trajectory, best score first
    (the families of the flips that paid in this module first)."""
    ep = cur.episode
    if ep.n == 0:  # a module without inlining decisions
        return []
    if in_order:
        return [i for i in range(ep.n) if i not in tried]
    feats = ep.features()
    acts = np.asarray(ep.actions, dtype=np.int64)
    p1 = policy_probs(feats) if policy_probs is not None else None
    s = flip_scores(feats, acts, model=model, policy_p1=p1) + 2.0 * _family(feats, acts, won)
    order = np.argsort(-s, kind="stable")
    return [int(i) for i in order if int(i) not in tried]


def episode_from_result(res: dict) -> Episode:
    """The best trajectory of a search result as an :class:`Episode`."""
    hdr = Header.from_json(res["header"])
    n = len(res["actions"])
    return Episode(hdr, res["raw"], np.asarray(res["actions"]), np.zeros(n, np.float32), [""] * n)


def total_gain_pct(results: Sequence[dict]) -> float:
    ok = [r for r in results if r.get("status") == "ok" and r.get("best_size") is not None]
    d = sum(r["default_size"] for r in ok)
    b = sum(r["best_size"] for r in ok)
    return 100.0 * (b - d) / d if d else math.nan


# -- passes over many modules (the training loop's rounds and `tune`) ---------------


def run_searches(pool, tasks: list[tuple], desc: str, progress: bool, on_result=None,
                 method: str = "search") -> dict[str, dict]:
    """``SearchWorker.search(*task)`` for every task over the pool, under a
    progress bar; name -> result of the searches that answered (the others
    are logged).  ``on_result(result)`` sees each result as it comes."""
    with progress_bar(total=len(tasks), desc=desc, enabled=progress, leave=False) as bar:
        def got(o) -> None:
            bar.update(1)
            if on_result is not None and o.ok and o.value is not None:
                on_result(o.value)

        outcomes = pool.map_unordered(method, tasks, None, on_result=got)
    out = {}
    for o in sorted(outcomes, key=lambda o: o.index):
        if o.ok and o.value is not None:
            out[o.value["name"]] = o.value
        else:
            log.warning("%s: search of %s failed: %s", desc, tasks[o.index][0]["name"], o.error)
    return out


def paid_budgets(results: Sequence[dict], left: int) -> list[tuple[dict, int]]:
    """The second pass: ``left`` compiles to the modules whose search paid,
    in proportion to the bytes they gained (each at least one)."""
    paid = [x for x in results if x["status"] == "ok" and x["best_size"] is not None
            and x["best_size"] < x["start_size"]]
    if left <= 0 or not paid:
        return []
    gains = np.array([x["start_size"] - x["best_size"] for x in paid], dtype=np.float64)
    extra = np.floor(left * gains / gains.sum()).astype(int)
    return [(x, int(e) + 1) for x, e in zip(paid, extra) if e > 0]


def continued(first: dict, second: dict) -> dict:
    """One module's two searches as one result: the second's best (it
    started from the first's), both searches' flips, tries and compiles."""
    tried = sorted(set(first.get("tried", [])) | set(second.get("tried", [])))
    if second["status"] != "ok" or second["best_size"] is None or (
            first["best_size"] is not None and second["best_size"] > first["best_size"]):
        return dict(first, compiles=first["compiles"] + second["compiles"], tried=tried,
                    flips=first["flips"] + second.get("flips", []))
    return dict(second, policy_size=first["policy_size"], start_size=first["start_size"], tried=tried,
                compiles=first["compiles"] + second["compiles"], flips=first["flips"] + second["flips"])


def fit_flip_model(results: Sequence[dict], min_flips: int = 32) -> FlipGainModel | None:
    """The flip-gain model fitted on every flip of ``results`` (search
    results sharing one header), or None below ``min_flips`` flips."""
    flips = [f for r in results for f in r.get("flips", ()) if f.get("raw")]  # exposed sites have no features
    if len(flips) < min_flips:
        return None
    header = Header.from_json(next(r["header"] for r in results if r.get("header")))
    feats = np.concatenate([np.frombuffer(f["raw"], dtype=header.record_dtype) for f in flips])
    names = [s.name for s in header.features if s.size == 1 and s.name != (header.advice.name if header.advice else "")]
    return FlipGainModel.fit(feats, np.array([f["from"] for f in flips]),
                             np.array([f["accepted"] for f in flips], dtype=np.float64), names)
