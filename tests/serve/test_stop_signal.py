"""A stop signal that arrives while the server's main thread holds the lock
inside ``threading.Event`` (as it does for a moment in every wait) still stops
the server: the handler records the signal and takes no lock."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import os, signal, sys
    from mlgo_host.serve.server import Server

    srv = Server(sys.argv[1], slots=1)
    srv.install_signals()
    with srv.stopping._cond:  # the main thread inside an Event's wait or set
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # bytecodes: the handler runs here
            pass
    print(signal.Signals(srv.signalled).name)
""")


def test_sigterm_inside_an_event_lock_is_recorded(tmp_path):
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "ch")], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "SIGTERM"
