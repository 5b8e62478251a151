"""A channels directory no other user can hijack, with the real clang-19: a
symbolic link, a directory writable by others and one of another uid are
refused by `serve` (one line, exit 2, nothing written there) and by
`mlgo-clang` (the plain compile, or under MLGO_FALLBACK=fail exit 2, with
one line saying why); a directory of one's own is served as before, is
created 0700, and is empty after a clean stop."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys

import pytest

from _serve_util import ServerProc, mlgo_clang, needs_clang, plain_object, write_sources
from mlgo_host.serve import slots as S
from mlgo_host.serve.trust import untrusted

pytestmark = needs_clang

OTHER_UID = 65534  # nobody


def _serve(channels: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mlgo_host", "serve", "--channels", channels, "--slots", "1"],
                          capture_output=True, text=True, timeout=60)


def _loose_dirs(tmp_path) -> dict[str, tuple[str, str]]:
    """name -> (channels path, words of its refusal)."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "open").mkdir()
    os.chmod(tmp_path / "open", 0o777)
    (tmp_path / "theirs").mkdir(mode=0o700)
    os.chown(tmp_path / "theirs", OTHER_UID, -1)
    return {"symlink": (str(tmp_path / "link"), "is a symbolic link"),
            "0777": (str(tmp_path / "open"), "is writable by group and others (mode 0777)"),
            "other uid": (str(tmp_path / "theirs"), f"is owned by nobody (uid {OTHER_UID}), not by you")}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_serve_refuses_a_symlink_a_0777_dir_and_another_users_dir(tmp_path):
    for name, (ch, words) in _loose_dirs(tmp_path).items():
        r = _serve(ch)
        assert r.returncode == 2, (name, r.stderr)
        assert r.stderr.startswith(f"mlgo-host serve: error: --channels: {ch} {words}"), (name, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
        assert os.listdir(os.path.realpath(ch)) == [], name  # nothing written there (nor where the link leads)


def test_a_new_channels_dir_is_0700_and_a_clean_stop_leaves_it_empty(tmp_path):
    d = str(tmp_path)
    (src,) = write_sources(d, 1)
    ch = os.path.join(d, "ch")
    with ServerProc(ch, slots=2) as srv:
        assert stat.S_IMODE(os.stat(ch).st_mode) == 0o700
        for k in range(2):
            assert stat.S_IMODE(os.stat(S.slot_dir(ch, k)).st_mode) == 0o700
        assert sorted(os.listdir(ch)) == ["heartbeat", "server.json", "server.lock", "slot-0", "slot-1"]
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "a.o")], ch)
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert srv.terminate() == 0, srv.output()
    assert os.listdir(ch) == []
    # an existing directory of one's own (0755, as mkdir makes it) is served as before
    own = tmp_path / "own"
    own.mkdir(mode=0o755)
    with ServerProc(str(own), slots=1) as srv:
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "b.o")], str(own))
        assert r.returncode == 0 and r.stderr == "", r.stderr
        assert srv.terminate() == 0, srv.output()
    assert os.listdir(own) == [] and stat.S_IMODE(own.stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_mlgo_clang_refuses_a_served_dir_once_it_is_a_symlink_0777_or_another_users(tmp_path):
    d = str(tmp_path)
    (src,) = write_sources(d, 1)
    plain = plain_object(src, os.path.join(d, "plain.o"))
    ch = os.path.join(d, "ch")
    with ServerProc(ch, slots=2) as srv:
        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "served.o")], ch)
        assert r.returncode == 0 and r.stderr == "", r.stderr  # served: its own directory

        link = os.path.join(d, "link")
        os.symlink(ch, link)

        def refused(channels: str, *words: str) -> None:
            out = os.path.join(d, "x.o")
            r = mlgo_clang(["-Oz", "-c", src, "-o", out], channels, "plain")
            assert r.returncode == 0, r.stderr
            assert r.stderr.startswith("mlgo-clang: warning: MLGO_CHANNELS: "), r.stderr
            assert all(w in r.stderr for w in words), r.stderr
            assert r.stderr.count("\n") == 1 and r.stderr.endswith("; compiling without the server\n"), r.stderr
            with open(out, "rb") as f:
                assert f.read() == plain
            os.unlink(out)
            r = mlgo_clang(["-Oz", "-c", src, "-o", out], channels, "fail")
            assert r.returncode == 2 and not os.path.exists(out)
            assert r.stderr.startswith("mlgo-clang: error: MLGO_CHANNELS: "), r.stderr
            assert all(w in r.stderr for w in words), r.stderr
            assert r.stderr.count("\n") == 1 and "MLGO_FALLBACK=fail" in r.stderr, r.stderr

        refused(link, f"{link} is a symbolic link (to {ch})")
        os.chmod(ch, 0o777)
        refused(ch, f"{ch} is writable by group and others (mode 0777)")
        os.chmod(ch, 0o700)
        os.chown(ch, OTHER_UID, -1)
        refused(ch, f"{ch} is owned by nobody (uid {OTHER_UID}), not by you")
        os.chown(ch, os.geteuid(), -1)
        for k in range(2):  # a slot another user could write to
            os.chmod(S.slot_dir(ch, k), 0o770)
        refused(ch, f"{ch}/slot-", " is writable by group (mode 0770)")
        for k in range(2):
            os.chmod(S.slot_dir(ch, k), 0o700)

        r = mlgo_clang(["-Oz", "-c", src, "-o", os.path.join(d, "again.o")], ch)
        assert r.returncode == 0 and r.stderr == "", r.stderr  # its own again: served
        assert srv.terminate() == 0, srv.output()
    assert os.listdir(ch) == []


def test_untrusted_says_nothing_of_a_missing_path_and_refuses_a_file(tmp_path):
    assert untrusted(str(tmp_path / "nope")) == ""
    assert untrusted(str(tmp_path)) == ""
    f = tmp_path / "f"
    f.write_text("")
    assert untrusted(str(f)) == f"{f} is not a directory"


def test_a_server_never_keeps_a_lock_file_a_stopping_server_removed(tmp_path, monkeypatch):
    # the race of a stop: the starting server opened server.lock, the
    # stopping one removed it and let go of its lock; the flock then succeeds
    # on a file no longer in the directory, where a third server would
    # create and lock a new one
    root = str(tmp_path)
    path = os.path.join(root, S.SERVER_LOCK)
    stale = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(path)
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)
    real_try_lock = S.try_lock
    handed = []

    def try_lock(p):
        if not handed:
            handed.append(stale)
            return stale
        return real_try_lock(p)

    monkeypatch.setattr(S, "try_lock", try_lock)
    fd = S.lock_server(root, 1.0)
    assert fd is not None and S.same_file(fd, path)
    assert S.lock_server(root, 0.1) is None  # and it is the lock the next server sees
    os.close(fd)
