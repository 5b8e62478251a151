"""A training run's curves as a PNG: held-out size change against -Oz and
the mean module reward per iteration, read from ``state.json``."""

from __future__ import annotations

import json
import os

from mlgo_host.fsutil import atomic_path


def _history(state_path: str | os.PathLike) -> list[dict]:
    if not os.path.exists(state_path):
        return []
    with open(state_path) as f:
        return json.load(f).get("history", [])


def pyplot():
    import matplotlib  # lazily: slow to import, and only plots need it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(plt, fig, png) -> str:
    """Write the figure atomically (a reader never sees half a PNG) and free it."""
    fig.tight_layout()
    try:
        with atomic_path(png, suffix=".tmp.png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return str(png)


def plot_training(state_path: str | os.PathLike, png: str | os.PathLike, title: str | None = None) -> str | None:
    """Write the curves of the run whose ``state.json`` is ``state_path``; the PNG path, or None when
    the run has no iteration yet."""
    history = _history(state_path)
    if not history:
        return None
    plt = pyplot()
    it = [h["iteration"] for h in history]
    ev = [(h["iteration"], h["heldout_size_change_pct"]) for h in history if "heldout_size_change_pct" in h]
    rw = [(h["iteration"], h["reward_mean"]) for h in history if h.get("reward_mean") is not None]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    if ev:
        a1.plot([x for x, _ in ev], [y for _, y in ev], "o-", color="tab:blue")
    a1.axhline(0.0, color="black", linewidth=0.8)
    a1.set_ylabel("held-out .text vs -Oz (%)")
    a1.set_title(title or "greedy policy on the held-out modules (lower is smaller)", fontsize=9)
    a1.grid(True, alpha=0.3)
    if rw:
        a2.plot([x for x, _ in rw], [y for _, y in rw], ".-", color="tab:green")
    a2.axhline(0.0, color="black", linewidth=0.8)
    a2.set_ylabel("mean module reward\n(stochastic policy vs -Oz)")
    a2.set_xlabel("iteration")
    a2.set_xlim(0.5, max(it) + 0.5)
    a2.grid(True, alpha=0.3)
    return save_figure(plt, fig, png)


def plot_search(state_path: str | os.PathLike, png: str | os.PathLike, title: str | None = None) -> str | None:
    """The curves of a search-then-imitate run: per round, the search's headroom and the policy on the
    training, validation and held-out modules, against -Oz."""
    history = _history(state_path)
    if not history:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = (("headroom_pct", "search: best found (train)", "tab:gray", "s--"),
              ("train_policy_pct", "policy at round start (train)", "tab:green", ".-"),
              ("validation_pct", "gated policy (validation)", "tab:orange", "o-"),
              ("heldout_pct", "gated policy (held-out)", "tab:blue", "o-"))
    for key, label, color, style in series:
        pts = [(h["round"], h[key]) for h in history if h.get(key) is not None]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, color=color, label=label)
    ax.axhline(0.0, color="black", linewidth=0.8)
    rounds = [h["round"] for h in history]
    ax.set_xticks(rounds)
    ax.set_xlim(min(rounds) - 0.5, max(rounds) + 0.5)
    ax.set_xlabel("round")
    ax.set_ylabel(".text vs clang -Oz (%)")
    ax.set_title(title or "search, then imitate (lower is smaller)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(plt, fig, png)
