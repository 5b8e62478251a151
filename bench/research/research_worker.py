"""The pool worker of the research scripts beside this file (ceiling.py,
effects.py): one module's measurement per task.  The pool imports it by
name ("research_worker:ResearchWorker"), so this directory must be on
sys.path: it is for a script run from it."""

from __future__ import annotations

from mlgo_host.workers.worker import CollectWorker


class ResearchWorker(CollectWorker):
    def _cfg(self) -> dict:
        """How this worker compiles: its clang, llvm-size and per-module timeout."""
        c = self.config
        return {"clang": c.clang, "llvm_size": c.llvm_size, "module_timeout": c.module_timeout}

    def ceiling(self, task: dict, result: dict, max_sites: int, pairs_of: int) -> dict:
        """What lies past one module's tuned best set (``ceiling.ceiling_of``)."""
        from ceiling import ceiling_of

        return ceiling_of(self._module(task), result, self._cfg(), max_sites=max_sites, pairs_of=pairs_of)

    def effects(self, task: dict, root: str, cap: int, seed: int, split: str) -> dict:
        """One module of the flip-effect table (``effects.py``), measured from
        the compiler's default and written to ``root``; returns its summary."""
        from effects import measure_and_store

        return measure_and_store(self._module(task), root, self._cfg(), cap=cap, seed=seed, split=split)
