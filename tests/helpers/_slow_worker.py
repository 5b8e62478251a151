"""A collect worker whose policy answers one module slowly (imported by Ray actors in pool tests).

The compiler blocks on the channel while the policy sleeps, so the module named ``slow`` stays
mid-compile until the pool cancels it, however loaded the machine is: a straggler test then does
not depend on how long the real compiles take against each other.
"""

import time

from mlgo_host.policies.base import Policy
from mlgo_host.workers.worker import CollectWorker

SLOW_MODULE = "slow"
DELAY_S = 0.5  # per decision: the slow module has hundreds


class SleepingPolicy(Policy):
    """``base``'s answers, each after ``DELAY_S``."""

    def __init__(self, base: Policy):
        self.base = base
        self.name = base.name

    def bind(self, header, advisor) -> None:
        self.base.bind(header, advisor)

    def act(self, obs):
        time.sleep(DELAY_S)
        return self.base.act(obs)


class SlowModuleWorker(CollectWorker):
    def collect(self, task: dict, seed: int, greedy: bool = False, record: bool = True) -> dict:
        self.slow = task["name"] == SLOW_MODULE
        return super().collect(task, seed, greedy, record)

    def _policy(self, greedy: bool, seed: int) -> Policy:
        policy = super()._policy(greedy, seed)
        return SleepingPolicy(policy) if self.slow else policy
