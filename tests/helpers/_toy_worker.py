"""A tiny worker for pool tests (imported by spawned worker processes)."""

import os
import sys
import time


class ToyWorker:
    def __init__(self, scale: int = 1, closed: str | None = None):
        self.scale = scale
        self.policy = None
        self.closed = closed

    def close(self):
        if self.closed:
            with open(self.closed, "a") as f:
                f.write("closed\n")

    def set_policy(self, blob):
        self.policy = blob
        return os.getpid()

    def work(self, x, sleep_s=0.0):
        time.sleep(sleep_s)
        if x < 0:
            raise ValueError(f"negative input {x}")
        return {"x": x * self.scale, "policy": self.policy, "pid": os.getpid(),
                "tf": "tensorflow" in sys.modules}
