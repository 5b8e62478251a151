"""Saved policy directories (docs/formats.md), written by :func:`mlgo_host.learning.export.save_policy`
and read here without TensorFlow (the SavedModel, none when the metadata's ``saved_model`` is null, is
for TensorFlow tooling)."""

from __future__ import annotations

import dataclasses
import os
import shutil

from mlgo_host.errors import ConfigError
from mlgo_host.formats import read_format_json
from mlgo_host.fsutil import atomic_write_bytes, atomic_write_json
from mlgo_host.policies.actor import ACTIVATIONS, NumpyActor, NumpyPolicy
from mlgo_host.policies.base import Policy
from mlgo_host.policies.outline import OutlineModel, OutlinePolicy
from mlgo_host.policies.specs import PolicySpec
from mlgo_host.policies.vocab import BUCKETS_SUFFIX, NormConfig, Vocab

FORMAT = "mlgo_host.policy/1"
METADATA = "metadata.json"
WEIGHTS = "actor.npz"
VOCAB_DIR = "vocab"
SAVED_MODEL_DIR = "saved_model"
OUTPUT_SPEC = "output_spec.json"
#: metadata field naming the policies that answer one language's compiles instead
BY_LANGUAGE = "by_language"
LANGUAGES = ("C", "C++")


@dataclasses.dataclass(eq=False)  # compared and hashed by identity
class SavedPolicy:
    """The TF-free content of a saved policy directory."""

    path: str
    metadata: dict
    actor: NumpyActor

    @property
    def spec(self) -> PolicySpec:
        return self.actor.spec

    @property
    def compiler(self) -> str | None:
        """The compiler the policy was trained with (``--version`` line)."""
        c = self.metadata.get("compiler")
        return str(c) if c else None


def read_metadata(path: str) -> dict:
    """The metadata of saved policy directory ``path``."""
    return read_format_json(os.path.join(path, METADATA), FORMAT, "saved policy")


def read_saved_policy(path: str) -> SavedPolicy:
    """Metadata and numpy actor of a saved policy directory; ConfigError naming a missing or damaged file."""
    md = read_metadata(path)
    where = os.path.join(path, METADATA)
    try:
        spec = PolicySpec.from_json(md.get("spec", {}))
        norm = NormConfig.from_json(md.get("norm", {}))
    except (ConfigError, AttributeError, TypeError) as e:  # e.g. "spec": a list
        raise ConfigError(f"{where}: {e}") from None
    activation = str(md.get("activation", "relu"))
    if activation not in ACTIVATIONS:
        raise ConfigError(f"{where}: activation {activation!r} has no numpy version (have {', '.join(ACTIVATIONS)})")
    vocab_dir = os.path.join(path, VOCAB_DIR)
    vocab = Vocab.load(vocab_dir, names=spec.input_names, eps=norm.eps)
    missing = [n for n in spec.input_names if n not in vocab]
    if missing:
        raise ConfigError(f"{vocab_dir}: no {', '.join(n + BUCKETS_SUFFIX for n in missing)} "
                          f"for the policy's input features")
    weights_path = os.path.join(path, WEIGHTS)
    weights = NumpyActor.load_weights(weights_path)
    try:
        actor = NumpyActor(spec, vocab, norm, weights, activation=activation)
    except ConfigError as e:  # the weights do not fit the spec in metadata.json
        raise ConfigError(f"{weights_path}: {e}") from None
    return SavedPolicy(path, md, actor)


def load_saved_policy(path: str, greedy: bool = True, seed: int = 0) -> NumpyPolicy:
    """A :class:`NumpyPolicy` from a saved policy directory: greedy (behind its gate) or sampling."""
    sp = read_saved_policy(path)
    name = os.path.basename(os.path.normpath(path)) or "saved"
    return NumpyPolicy(sp.actor, greedy=greedy, seed=seed, name=name, gate=gate_of(sp.metadata, path),
                       trained_with=sp.compiler)


def gate_of(metadata: dict, path: str = "") -> float | None:
    """The gate threshold a saved policy's metadata carries, or None."""
    gate = metadata.get("gate")
    if gate is None:
        return None
    try:
        return float(gate["threshold"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{os.path.join(path, METADATA)}: bad gate {gate!r} (expected {{\"threshold\": p}})") from None


def language_parts(path: str) -> dict[str, Policy]:
    """Language -> the outline policy answering its compiles instead (metadata ``by_language``)."""
    parts = read_metadata(path).get(BY_LANGUAGE) or {}
    if not isinstance(parts, dict) or not set(parts) <= set(LANGUAGES):
        raise ConfigError(f"{os.path.join(path, METADATA)}: bad {BY_LANGUAGE} {parts!r} "
                          f"(expected {{language: file}}, languages {', '.join(LANGUAGES)})")
    name = os.path.basename(os.path.normpath(path)) or "saved"
    return {lang: OutlinePolicy(OutlineModel.load(os.path.join(path, str(f))), name=f"{name}[{lang}]")
            for lang, f in parts.items()}


def set_language_part(path: str, language: str, model_file: str) -> None:
    """Copy outline model ``model_file`` into ``path`` to answer its compiles of ``language``."""
    if language not in LANGUAGES:
        raise ConfigError(f"language {language!r}: expected one of {', '.join(LANGUAGES)}")
    OutlineModel.load(model_file)  # a bad model fails here, not at its first compile
    md = read_metadata(path)
    name = f"{language.lower().replace('+', 'x')}_outline.json"
    with open(model_file, "rb") as f:
        atomic_write_bytes(os.path.join(path, name), f.read())
    md[BY_LANGUAGE] = dict(md.get(BY_LANGUAGE) or {}, **{language: name})
    atomic_write_json(os.path.join(path, METADATA), md)


def copy_without_saved_model(src: str, dest: str) -> None:
    """Copy saved policy ``src`` to a new ``dest`` without its SavedModel (only TensorFlow reads it)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(SAVED_MODEL_DIR))
    say_no_saved_model(dest)


def say_no_saved_model(path: str) -> None:
    """Record in the metadata of ``path``, a copy without SavedModel, that it has none."""
    md = read_metadata(path)
    if md.get("saved_model") is not None:
        md["saved_model"] = None
        atomic_write_json(os.path.join(path, METADATA), md)


def set_gate(path: str, threshold: float | None, **info) -> None:
    """Write the gate (chosen on a validation split) into a saved policy's metadata; None removes it."""
    md = read_metadata(path)
    if threshold is None:
        md.pop("gate", None)
    else:
        md["gate"] = {"threshold": float(threshold), **info}
    atomic_write_json(os.path.join(path, METADATA), md)
