"""Whether a directory that steers compiles (a channels or tune directory) can be trusted: on a
shared machine, another user who can write there (or a symbolic link's owner) could put their own
FIFOs, flags or replays there. The rule is ssh's for ``~/.ssh``: owned by you (or root), writable by
no one else. Imported by ``mlgo-clang`` on every compile: standard library only.
"""

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
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"{path} is owned by {_user(st.st_uid)}, not by you: its owner decides what is in it"
    loose = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if loose:
        return (f"{path} is writable by {' and '.join(loose)} (mode {stat.S_IMODE(st.st_mode):04o}): "
                f"another user could replace the files in it (chmod go-w {path})")
    return ""


def untrusted_tune_dir(path: str) -> str:
    """:func:`untrusted` of a tune directory and of its replay files' directory."""
    from mlgo_host.search.tunedir import REPLAYS

    for d in (path, os.path.join(path, REPLAYS)):
        if why := untrusted(d):
            return why
    return ""


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
