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

    def compile_killed_once(self, src, marker):
        """Start a real clang-19 blocked on a channel nobody opens and, the
        first time only (``marker`` not there yet), SIGKILL it from outside the
        compiler's supervisor, as Ray and the OOM killer do; then answer."""
        import signal
        import tempfile

        from mlgo_host.channel.process import CompilerProcess

        d = tempfile.mkdtemp()
        for end in ("out", "in"):
            os.mkfifo(os.path.join(d, f"ch.{end}"))
        p = CompilerProcess(["clang-19", "-Oz", "-c", src, "-o", os.path.join(d, "x.o"), "-mllvm",
                             "-enable-ml-inliner=release", "-mllvm",
                             "-inliner-interactive-channel-base=" + os.path.join(d, "ch")], os.path.join(d, "log"))
        try:
            first = not os.path.exists(marker)
            if first:
                open(marker, "w").close()
                time.sleep(0.2)
                os.kill(p.pid, signal.SIGKILL)
                rc = p.wait(10)
            else:
                p.kill()
                rc = p.returncode
            return {"rc": rc, "pid": os.getpid()}
        finally:
            p.close()
            import shutil
            shutil.rmtree(d, ignore_errors=True)
