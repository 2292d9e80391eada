"""The compile cache's files: where they live, and how they are written, read, trusted and evicted.

Settings, read at each use (a program or a test may change them):

- ``THUNDER_EXT_CACHE``: unset or ``1``, the cache is on for every compilation that does not say
  ``compile_cache=False``; ``0`` turns it off everywhere, ``compile_cache=True`` included; ``opt-in``, it is on only
  where a compilation asks (``thunder_ext.jit(..., compile_cache=True)``); ``verify``, each call compiles afresh and
  is compared with its entry. An entry runs only where the Python state its object reaches is the one it compiled
  for, and its prologue's checks pass (``thunder026/python_guards.py``: every value the trace read);
- ``THUNDER_EXT_CACHE_DIR``: the folder; else ``$XDG_CACHE_HOME/thunder_ext``, else ``~/.cache/thunder_ext``;
- ``THUNDER_EXT_CACHE_MAX_MB``: the size limit (default 1024): after each save the least recently used entries are
  removed until the cache is within it.

Layout: ``<folder>/<key>/<digest>.entry``: ``key`` names the compilation (``compile_cache/key.py``), ``digest`` the
file's content. A file is one header line, ``thunder_ext compile cache <FORMAT> sha256=<digest of the rest>``, then
the entry as JSON. The rules:

- **Trusted**: a folder or file is read only if it is no symbolic link, belongs to the user and no other user may
  write it; the folders are made so (mode 0700). Anything else is ignored, with a log line (once per process, with
  the fix), and nothing is written into a folder refused so.
- **Atomic**: a file is written under a temporary name in its folder, then renamed over the entry: a reader sees
  the whole old file or the whole new one, and two processes writing the same entry leave one whole file.
- **Checked**: a file whose header, digest or JSON is wrong (truncated, corrupt, of another format) is never
  executed: it is removed with a log line (left, where it is not the user's own); the compilation it would have
  saved runs, and saves a whole file.
- **Least recently used goes first**: loading an entry marks it used (its modification time).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("thunder_ext")

# 2: each entry holds the digest of the compiled object's state (compile_cache/state.py); 3: and the autocast its
# programs were built under; 4: each program holds its bytecode
FORMAT = 4
_HEADER = f"thunder_ext compile cache {FORMAT} sha256="
_SUFFIX = ".entry"
DEFAULT_MAX_MB = 1024


_ON, _OFF, _VERIFY, _OPT_IN = ("1", "true", "on", "yes"), ("0", "false", "off", "no"), "verify", "opt-in"


def enabled(requested: bool | None = None) -> bool:
    """Whether a compilation uses the cache, given its own ``compile_cache=`` (None where it says nothing):
    ``THUNDER_EXT_CACHE=0`` wins, then ``requested``; then on but with ``THUNDER_EXT_CACHE=opt-in``."""
    value = _setting()
    if value in _OFF:
        return False
    return requested if requested is not None else value != _OPT_IN


def verifying() -> bool:
    """``THUNDER_EXT_CACHE=verify``: each call compiles afresh, and the compilation is compared with the entry
    stored for its call, which is neither loaded nor replaced (``attach``)."""
    return _setting() == _VERIFY


def _setting() -> str:
    value = os.environ.get("THUNDER_EXT_CACHE", "").strip().lower()
    if value not in ("", *_ON, *_OFF, _VERIFY, _OPT_IN):
        raise ValueError(f"THUNDER_EXT_CACHE must be 1 (on, the default), 0 (off), opt-in or verify, got {value!r}")
    return value


def folder() -> Path:
    """Where the cache lives."""
    if os.environ.get("THUNDER_EXT_CACHE_DIR"):
        return Path(os.environ["THUNDER_EXT_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "thunder_ext"


def max_bytes() -> int:
    value = os.environ.get("THUNDER_EXT_CACHE_MAX_MB", str(DEFAULT_MAX_MB))
    try:
        return int(float(value) * 2**20)
    except ValueError:
        raise ValueError(f"THUNDER_EXT_CACHE_MAX_MB must be a number of megabytes, got {value!r}") from None


def untrusted(path: Path) -> str | None:
    """Why ``path`` may not be read (a link, another owner, writable by others), or None."""
    try:
        st = os.lstat(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "belongs to another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "may be written by other users"
    return None


@dataclass(frozen=True)
class Stored:
    """An entry file as ``entries`` found it."""

    path: Path
    payload: dict
    size: int
    last_used: float


def _folder_of(key: str) -> Path:
    return folder() / key


def _refused(path: Path, why: str) -> str:
    """That the cache does not use the folder ``path`` because it ``why``, and what would make it use one."""
    root, own = folder(), "set THUNDER_EXT_CACHE_DIR to a folder of your own"
    if why == "may be written by other users" and os.lstat(path).st_mode & stat.S_ISVTX:
        fix = f"{own}, such as {path / 'thunder_ext'}"  # shared on purpose, as /tmp is: a folder inside is made yours
    elif why == "may be written by other users":
        fix = f"chmod 700 {path}" + (f", or {own}" if path == root else "")
    elif path == root:
        fix = own
    else:  # a key's folder that the user's own cache folder holds: a compilation saves a new one
        fix = f"remove it (rm -r {path})"
    return f"not using {path}: it {why}; {fix}"


def refusal() -> str | None:
    """Why the cache does not use its folder, with the fix (what the log says), or None where it does: a folder not
    made yet is made the user's own when first saved to, where its nearest existing parent is a folder they may
    write."""
    root = folder()
    if not os.path.lexists(root):
        parent = next(p for p in root.absolute().parents if os.path.lexists(p))
        if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK):
            return None
        return _refused(root, f"cannot be made: {parent} is no folder you may write")
    why = untrusted(root)
    if why is None and not root.is_dir():
        why = "is no folder"
    return None if why is None else _refused(root, why)


# the refusals logged: each once per process (every load and save looks at the folders again)
_logged: set[tuple[Path, str]] = set()


def _trusted_folder(path: Path) -> bool:
    why = untrusted(path)
    if why is not None and (path, why) not in _logged:
        _logged.add((path, why))
        log.warning("thunder_ext: compile cache: %s", _refused(path, why))
    return why is None


def _files(key: str) -> Iterator[tuple[Path, Stored | None, str]]:
    """Each entry file saved under ``key``, with what ``read`` found in it; none where a folder is not trusted."""
    at = _folder_of(key)
    if not at.is_dir() or not (_trusted_folder(folder()) and _trusted_folder(at)):
        return
    for path in sorted(at.glob(f"*{_SUFFIX}")):
        yield path, *read(path)


def entries(key: str) -> Iterator[Stored]:
    """The whole, trusted entries saved under ``key``; each other file is skipped with a log line."""
    for path, stored, why in _files(key):
        if stored is not None:
            yield stored
        elif untrusted(path) is None:  # the user's own file, damaged: its compilation will save a whole one
            log.warning("thunder_ext: compile cache: ignored and removed %s: %s", path, why)
            remove(path)
        else:
            log.warning("thunder_ext: compile cache: ignored %s: %s", path, why)


def read(path: Path) -> tuple[Stored | None, str]:
    """The entry in ``path``, or None and why not."""
    why = untrusted(path)
    if why is not None:
        return None, f"it {why}"
    try:
        raw = path.read_bytes()
        st = path.stat()
    except OSError as e:
        return None, f"it cannot be read ({e.strerror})"
    header, _, body = raw.partition(b"\n")
    if not header.startswith(_HEADER.encode()):
        return None, "it is no entry of this cache format (its first line)"
    if hashlib.sha256(body).hexdigest() != header[len(_HEADER) :].decode(errors="replace"):
        return None, "its content does not match its digest (truncated or changed)"
    try:
        payload = json.loads(body)
    except ValueError as e:
        return None, f"it is no JSON ({e})"
    if not isinstance(payload, dict):
        return None, "it holds no entry"
    return Stored(path, payload, st.st_size, st.st_mtime), ""


def save(key: str, payload: dict) -> Stored | None:
    """Writes ``payload`` under ``key``, atomically; None (with a log line) where the folder is not the user's."""
    at = _folder_of(key)
    folder().mkdir(parents=True, exist_ok=True, mode=0o700)
    if not _trusted_folder(folder()):  # nothing is made in a folder the cache does not use
        return None
    at.mkdir(exist_ok=True, mode=0o700)
    if not _trusted_folder(at):
        return None
    body = json.dumps(payload, sort_keys=True).encode()
    digest = hashlib.sha256(body).hexdigest()
    path = at / f"{digest[:32]}{_SUFFIX}"
    fd, temporary = tempfile.mkstemp(dir=at, prefix=".writing-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(f"{_HEADER}{digest}\n".encode() + body)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    st = path.stat()
    return Stored(path, payload, st.st_size, st.st_mtime)


def mark_used(path: Path) -> None:
    """``path`` is now the most recently used entry."""
    try:
        os.utime(path)
    except OSError:  # removed meanwhile by another process's eviction: nothing to mark
        pass


def remove(path: Path) -> None:
    path.unlink(missing_ok=True)
    try:
        path.parent.rmdir()  # the key's folder, once empty
    except OSError:
        pass


def _keys() -> list[str]:
    """The keys of the cache's folder, where it is trusted."""
    root = folder()
    if not root.is_dir() or not _trusted_folder(root):
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def every_entry() -> list[Stored]:
    """Every whole, trusted entry of the cache, least recently used first."""
    return sorted((s for key in _keys() for s in entries(key)), key=lambda s: s.last_used)


def inventory() -> tuple[list[Stored], list[tuple[Path, str]]]:
    """What ``thunder-ext cache`` lists: every whole, trusted entry, least recently used first, and each other entry
    file with why it is not read. Removes nothing (a compilation removes a damaged file it meets; ``clear``, all)."""
    whole, damaged = [], []
    for key in _keys():
        for path, stored, why in _files(key):
            if stored is not None:
                whole.append(stored)
            else:
                damaged.append((path, why))
    return sorted(whole, key=lambda s: s.last_used), damaged


def evict(limit: int | None = None) -> list[Path]:
    """Removes the least recently used entries until the cache holds at most ``limit`` bytes (the setting's by
    default); returns those removed."""
    limit = max_bytes() if limit is None else limit
    stored = every_entry()
    total, removed = sum(s.size for s in stored), []
    for s in stored:
        if total <= limit:
            break
        remove(s.path)
        total -= s.size
        removed.append(s.path)
    return removed


def clear() -> int:
    """Removes every entry (and every leftover temporary file); returns how many entries. Removes nothing from a
    folder the cache does not use (``refusal``): another user's files may be there."""
    root = folder()
    if not root.is_dir() or not _trusted_folder(root):
        return 0
    count = 0
    for key in [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]:
        for path in key.iterdir():
            if path.is_file() and (path.suffix == _SUFFIX or path.name.startswith(".writing-")):
                count += path.suffix == _SUFFIX
                path.unlink()
        try:
            key.rmdir()
        except OSError:
            pass
    return count


def age(seconds_since: float) -> str:
    """``seconds_since`` (a time stamp) as a short age: ``42 s``, ``3 min``, ``5 h``, ``2 d``."""
    s = max(0.0, time.time() - seconds_since)
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= length:
            return f"{s / length:.0f} {unit}"
    return f"{s:.0f} s"
