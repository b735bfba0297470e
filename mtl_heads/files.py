"""The files that run folders hold and that users share: written atomically, read back as data.

Run folders travel (a colleague's ``runs/<run>``, a paper's release), so nothing here is ever
unpickled with arbitrary globals: weights are safetensors, small records JSON, and the resumable
optimiser / RNG state goes through ``torch.load(weights_only=True)``, PyTorch's restricted
unpickler, with the allow-list :data:`STATE_GLOBALS`. Every reader turns a truncated, empty or
foreign file into :class:`UnreadableFile`, one line naming the file and what is wrong, instead of
a traceback from inside torch or safetensors, and a file that asks to run code into its subclass
:class:`RefusedFile`.

Writers write a temporary file in the same folder, flush it to disk and rename it over the
target, so that a crash at any moment leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import zipfile
from pathlib import Path

from mtl_heads.config import ConfigError

__all__ = ["UnreadableFile", "RefusedFile", "STATE_GLOBALS", "atomic_write_text", "write_json", "read_json", "save_tensors",
           "load_tensors", "load_weights", "save_state", "load_state", "load_numpy", "fsync_dir",
           "is_load_error", "unreadable", "file_sha256"]

STATE_GLOBALS: tuple = ()
"""Classes the resumable state may name besides tensors and plain Python values. Empty: the numpy
RNG state is stored as plain integers (see ``mtl_heads.training.trainer.rng_state``), so no class at all
needs to be trusted."""


class UnreadableFile(ConfigError):
    """A file the project reads is truncated, empty, of another format, or holds code; the message
    is one line that starts with the file's path."""


class RefusedFile(UnreadableFile):
    """A file that is not plain data: reading it would run code or build arbitrary objects."""


# --- writing ----------------------------------------------------------------------------------
def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def fsync_dir(folder: Path) -> None:
    """Make renames inside ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _replace(tmp: Path, path: Path) -> None:
    _fsync_file(tmp)
    os.replace(tmp, path)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tmp = _tmp(path)
    tmp.write_text(text, encoding="utf-8")
    _replace(tmp, path)


def write_json(path: Path, obj) -> None:
    """``obj`` as indented JSON, atomically (numpy / torch scalars written as floats)."""
    atomic_write_text(path, json.dumps(obj, indent=2, default=float) + "\n")


def save_tensors(tensors: dict, path: Path, metadata: dict[str, str] | None = None) -> None:
    """A ``{name: tensor}`` dict as safetensors, atomically."""
    from safetensors.torch import save_file

    path = Path(path)
    tmp = _tmp(path)
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    _replace(tmp, path)


def save_state(obj: dict, path: Path) -> None:
    """Resumable non-weight state (optimiser moments, schedule, RNG, loop counters) with
    ``torch.save``, atomically. ``obj`` must hold only tensors, plain Python values and the
    classes in :data:`STATE_GLOBALS`, so that :func:`load_state` can read it back safely."""
    import torch

    path = Path(path)
    tmp = _tmp(path)
    torch.save(obj, tmp)
    _replace(tmp, path)


# --- reading ----------------------------------------------------------------------------------
def _exists(path: Path, what: str) -> None:
    if not path.is_file():
        raise UnreadableFile(f"{path}: missing; expected {what}")
    if path.stat().st_size == 0:
        raise UnreadableFile(f"{path}: empty file (0 bytes); expected {what} (was it cut off while being written or copied?)")


def read_json(path: Path) -> dict | None:
    """The JSON in ``path``, None when absent; a clear error naming the file when broken."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UnreadableFile(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    except UnicodeDecodeError as err:
        raise UnreadableFile(f"{path}: not UTF-8 text (byte {err.start}); expected JSON") from None
    except OSError as err:
        raise UnreadableFile(f"{path}: cannot be read ({err.strerror or err})") from None


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file's bytes, read a megabyte at a time (weights too)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def load_tensors(path: Path, device: str = "cpu") -> dict:
    """The tensors of a safetensors file; :class:`UnreadableFile` when it is truncated or not one."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    _exists(path, "a safetensors weights file")
    try:
        return load_file(str(path), device=device)
    except (SafetensorError, OSError) as err:
        raise unreadable(path, err) from None


def load_weights(module, path: Path) -> None:
    """Load the safetensors file ``path`` into ``module`` (all keys, same shapes)."""
    state = load_tensors(path)
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise UnreadableFile(f"{path}: the weights do not fit the model: {_first_line(err, skip_header=True)}") from None


def load_state(path: Path) -> dict:
    """What :func:`save_state` wrote, read with PyTorch's restricted unpickler: a file that names
    any class beyond tensors, plain values and :data:`STATE_GLOBALS` (e.g. a crafted pickle that
    would run a command) is refused before anything in it runs."""
    import torch

    path = Path(path)
    _exists(path, "a resumable state file written by mtl-heads")
    try:
        with torch.serialization.safe_globals(list(STATE_GLOBALS)):
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except (*LOAD_ERRORS, ValueError) as err:
        raise unreadable(path, err) from None
    if not isinstance(obj, dict):
        raise UnreadableFile(f"{path}: holds a {type(obj).__name__}, expected the dict mtl-heads writes")
    return obj


def load_numpy(path: Path):
    """A ``.npy`` array of numbers (object arrays, which need pickle, are refused)."""
    import numpy as np

    path = Path(path)
    _exists(path, "a .npy array")
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as err:
        if "allow_pickle" in str(err):
            raise RefusedFile(f"{path}: refused, an object array (it would need pickle); "
                                 "expected an array of numbers") from None
        raise UnreadableFile(f"{path}: not a valid .npy array ({_first_line(err)})") from None
    except (OSError, EOFError) as err:
        raise UnreadableFile(f"{path}: not a valid .npy array ({_first_line(err) or type(err).__name__})") from None


LOAD_ERRORS = (pickle.UnpicklingError, EOFError, RuntimeError, zipfile.BadZipFile, OSError)
"""What torch, safetensors and transformers raise on a truncated, foreign or crafted weights file
(plus ``SafetensorError``, imported lazily; see :func:`unreadable`)."""


def is_load_error(err: BaseException) -> bool:
    """True for an exception that a corrupt or crafted weights file causes (see :data:`LOAD_ERRORS`)."""
    return isinstance(err, LOAD_ERRORS) or type(err).__name__ == "SafetensorError"


def unreadable(path: Path, err: BaseException) -> UnreadableFile:
    """The one-line :class:`UnreadableFile` (or :class:`RefusedFile`) for ``err`` raised while
    reading the weights file ``path``."""
    if isinstance(err, pickle.UnpicklingError):
        found = re.search(r"unsupported global[: ]+(\S+)", str(err), re.IGNORECASE)
        what = f"it names {found.group(1)}" if found else _first_line(err)
        return RefusedFile(f"{path}: refused, not plain data ({what}); mtl-heads does not run code from files")
    if isinstance(err, OSError) and not isinstance(err, zipfile.BadZipFile):
        return UnreadableFile(f"{path}: cannot be read ({err.strerror or _first_line(err)})")
    return UnreadableFile(f"{path}: not a complete weights file ({_first_line(err) or type(err).__name__}); "
                          "it may be truncated or of another format")


def _first_line(err: BaseException, skip_header: bool = False) -> str:
    """The first informative line of an exception message, at most 300 characters."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if skip_header and len(lines) > 1:
        lines = lines[1:]
    return (lines[0] if lines else "")[:300]
