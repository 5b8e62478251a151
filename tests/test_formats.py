"""The package's versioned JSON files read through one reader: the same
fault gives the same message, whatever the file (saved policy metadata, tune
manifest, replay file)."""

from __future__ import annotations

import os

import pytest

from mlgo_host.search import tunedir as tuned
from mlgo_host.errors import ConfigError
from mlgo_host.policies import replay, saved

# kind: (read it, the file it reads under a directory, the words naming it, its format)
READERS = {
    "saved policy": (saved.read_metadata, lambda d: d / saved.METADATA, "saved policy", saved.FORMAT),
    "tune manifest": (tuned.read_manifest, lambda d: d / tuned.MANIFEST, "tune directory", tuned.FORMAT),
    "replay": (replay.read_replay, lambda d: d / "r.json", "replay file", replay.FORMAT),
}


def _newer(fmt: str) -> str:
    kind, n = fmt.rsplit("/", 1)
    return f"{kind}/{int(n) + 1}"


# fault: (write the fault at path p, given the reader's format; the message, {file} {what} {fmt} filled in)
FAULTS = {
    "missing": (lambda p, fmt: None, "{file}: not a {what} (no such file)"),
    "a directory": (lambda p, fmt: p.mkdir(), "{file}: not a {what} (a directory)"),
    "unreadable": (lambda p, fmt: os.symlink(p, p), "{file}: unreadable {what}: Too many levels of symbolic links"),
    "not UTF-8": (lambda p, fmt: p.write_bytes(b'{"format": "\xff"}'), "{file}: unreadable {what}: not UTF-8 text"),
    "not JSON": (lambda p, fmt: p.write_text('{"format": '),
                 "{file}: unreadable {what}: not JSON (Expecting value: line 1 column 12 (char 11))"),
    "not an object": (lambda p, fmt: p.write_text("[1, 2]"), "{file}: not a {what} (a JSON array, not an object)"),
    "another format": (lambda p, fmt: p.write_text('{"format": "mlgo_host.other/1"}'),
                       "{file}: not a {what} (format 'mlgo_host.other/1', expected '{fmt}')"),
    "no format": (lambda p, fmt: p.write_text("{}"), "{file}: not a {what} (format None, expected '{fmt}')"),
    "newer version": (lambda p, fmt: p.write_text('{"format": "%s"}' % _newer(fmt)),
                      "{file}: a {what} from a newer mlgo_host (format '{newer}', this one reads 1); upgrade mlgo_host"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("kind", sorted(READERS))
def test_the_same_fault_gives_the_same_message(tmp_path, kind, fault):
    read, file_in, what, fmt = READERS[kind]
    write, template = FAULTS[fault]
    d = tmp_path / "thing"
    d.mkdir()
    path = file_in(d)
    write(path, fmt)
    with pytest.raises(ConfigError) as ei:
        read(d if path.parent == d and kind != "replay" else path)
    want = template.format(file=path, what=what, fmt=fmt, newer=_newer(fmt))
    msg = str(ei.value)
    assert msg == want or (fault == "missing" and msg.startswith(want + "; ")), msg
