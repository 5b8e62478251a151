"""Whether a directory that steers compiles (channels, tune directory) can be trusted: by ssh's rule for
``~/.ssh``, owned by you (or root), writable by no one else (docs/serving.md).  Imported by
``mlgo-clang`` on every compile: standard library only."""

from __future__ import annotations

import os
import stat


def untrusted(path: str) -> str:
    """Why ``path`` is not a directory only you can change, in one line with the fix; "" when it is,
    or does not exist (the caller creates it, or says it is missing)."""
    path = os.path.abspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    except OSError as e:
        return f"cannot check {path}: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        try:
            target = f" (to {os.readlink(path)})"
        except OSError:
            target = ""
        return (f"{path} is a symbolic link{target}: name the directory itself (a link can lead to "
                "one someone else controls)")
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if st.st_uid not in (os.geteuid(), 0):
        import pwd

        try:
            owner = f"{pwd.getpwuid(st.st_uid).pw_name} (uid {st.st_uid})"
        except KeyError:
            owner = f"uid {st.st_uid}"
        return f"{path} is owned by {owner}, not by you: its owner decides what is in it"
    if loose := [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]:
        return (f"{path} is writable by {' and '.join(loose)} (mode {stat.S_IMODE(st.st_mode):04o}): "
                f"another user could replace the files in it (chmod go-w {path})")
    return ""


def untrusted_tune_dir(path: str) -> str:
    """:func:`untrusted` of a tune directory and of its replay files' directory."""
    from mlgo_host.search.tunedir import REPLAYS

    return untrusted(path) or untrusted(os.path.join(path, REPLAYS))
