"""Wake on new entries in one local directory (Linux inotify through libc, no extra thread).

An optimisation only: inotify sees writes made on this host, not on other NFS clients, so the
liveness loop still lists the directory every poll interval; this only lets it look at once when
a record lands locally. Used as a file descriptor in the loop's own poll(2).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from collections.abc import Callable

__all__ = ["DirWatch", "IN_CREATE", "IN_MOVED_TO"]

IN_CREATE = 0x100
IN_MOVED_TO = 0x80
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of name


class DirWatch:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    @classmethod
    def open(cls, path: str) -> DirWatch:
        """Watch `path` for names created or renamed into it. Raises OSError where inotify is
        unavailable (not Linux; EMFILE: fs.inotify.max_user_instances reached, as with hundreds of
        agents on one host; ENOSPC: no watches left): the caller's polling covers it."""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            init, add = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError) as exc:
            raise OSError(f"no inotify here ({exc})") from None
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_init1: {os.strerror(err)}")
        if add(fd, os.fsencode(path), IN_CREATE | IN_MOVED_TO) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise OSError(err, f"inotify_add_watch: {os.strerror(err)}")
        return cls(fd)

    def fileno(self) -> int:
        return self._fd

    def new_names(self, keep: Callable[[str], bool]) -> bool:
        """Drain pending events; True when any of them named an entry `keep` accepts (a writer's
        temp file is created, then renamed: only the rename is news)."""
        news = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except (BlockingIOError, OSError):
                return news
            if not data:
                return news
            at = 0
            while at + _EVENT.size <= len(data):
                _wd, _mask, _cookie, length = _EVENT.unpack_from(data, at)
                at += _EVENT.size
                name = data[at : at + length].rstrip(b"\0").decode(errors="replace")
                at += length
                news = news or keep(name)

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
