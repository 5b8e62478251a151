"""Typed errors of mlgo_host. Each says what went wrong and where."""

from __future__ import annotations


class MlgoHostError(Exception):
    """Base class of every error this package raises on purpose."""


class CompatibilityWarning(RuntimeWarning):
    """A policy answers on a compiler it was not made with, but an input of it means something else
    there. The command says it once (cli.py); pool workers leave it to that command."""


class ProtocolError(MlgoHostError):
    """The bytes from the compiler do not follow the channel's format (at stream ``offset``, in ``context``)."""

    def __init__(self, message: str, offset: int | None = None, context: str | None = None):
        self.message = message
        self.offset = offset
        self.context = context
        where = []
        if offset is not None:
            where.append(f"byte {offset}")
        if context is not None:
            where.append(f"context {context!r}")
        super().__init__(message + (f" (at {', '.join(where)})" if where else ""))


class ChannelTimeout(MlgoHostError):
    """The compiler did not open, write or read the channel in time."""


class CompilerError(MlgoHostError):
    """The compiler died or misbehaved during a session."""

    def __init__(self, message: str, returncode: int | None = None, stderr_tail: str = ""):
        self.returncode = returncode
        text = message
        if returncode is not None:
            text += f" (exit status {returncode})"
        if stderr_tail.strip():
            text += "; compiler stderr ends with: " + stderr_tail.strip().replace("\n", " | ")[-600:]
        super().__init__(text)


class AdviceError(MlgoHostError):
    """A policy produced advice that the compiler would crash or misbehave on."""


class CorpusError(MlgoHostError):
    """A corpus or one of its modules is malformed."""


class ConfigError(MlgoHostError):
    """A command line or gin configuration is wrong."""


class WorkerPoolError(MlgoHostError, RuntimeError):
    """A worker pool lost its workers or a worker failed a broadcast."""
