"""A model of one NFS client: a FUSE passthrough of a directory with NFS's client-side caches.

Each mount is one client (Linux NFS defaults with lookupcache=all, as far as the coordination
protocol can tell them apart):

- a directory's listing is served from this client's cache for `dir_ttl` s after it was read;
- a name found missing (lookup/stat/open by name) stays missing for `neg_ttl` s;
- a change this client makes in a directory (create, mkdir, link, symlink, rename, unlink, rmdir)
  drops that directory's listing and negative entries for this client: its own writes are visible
  to itself at once, another client's only when the caches expire;
- open() and stat of an existing name always reach the backing file (close-to-open: content is
  fresh); rename, link and O_EXCL create are the backing filesystem's, hence atomic.

Two opt-in behaviours (`stale_eexist`, `cto_dirs`) model the race of two clients creating one
directory: with `stale_eexist` a create this client's server refuses with EEXIST keeps the name's
negative entry (the next lookup still answers ENOENT, as the issue's NFS-like mounts did); with
`cto_dirs` opening a directory by name revalidates it (close-to-open): when its mtime changed since
this client cached its negative entries and listing, they are dropped. Without `cto_dirs` (an NFS
`nocto` mount) only the negative timeout ends a stale entry. `race_mkdir` names directories that
another client makes on the server between this client's lookup (which finds them missing) and
its own mkdir of them, the first time only: the race, deterministically.

The kernel's own FUSE caches are switched off (entry/attr/negative timeouts 0) so this daemon is
the only cache. Inotify on a FUSE mount sees what this mount's processes did, never what went
through another mount: agents on the other client fall back to polling, as across NFS hosts.

    with nfs_clients(src, [a, b], dir_ttl=3, neg_ttl=3) as (client_a, client_b):
        ...                                   # a and b now show src, each with its own caches
        client_a.stall(); client_a.resume()   # SIGSTOP / SIGCONT the daemon: a hung filesystem

The daemon is `python tests/harness/nfs_model.py SRC MNT --dir-ttl S --neg-ttl S` (a child of the
caller, stopped by its PID); it needs root, /dev/fuse, fusepy and libfuse 2 (fuse_install.py).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

FSNAME = "nfs-model"  # /proc/mounts shows the type fuse.nfs-model
DEFAULT_TTL = 30.0


# -- the daemon ------------------------------------------------------------------------------------


class ClientCache:
    """One client's view of directories: listings and negative lookups with their expiry times.
    Pure bookkeeping (paths are the mount's, "/"-rooted), so it is unit-testable without FUSE."""

    def __init__(self, dir_ttl: float, neg_ttl: float, clock: Any = time.monotonic) -> None:
        self.dir_ttl = dir_ttl
        self.neg_ttl = neg_ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._listings: dict[str, tuple[float, list[str]]] = {}
        self._missing: dict[str, dict[str, float]] = {}  # dir -> name -> expiry
        self._verifier: dict[str, tuple[int, ...]] = {}  # dir -> its mtime when its negatives were cached

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        head, _, name = path.rpartition("/")
        return head or "/", name

    def listing(self, path: str) -> list[str] | None:
        with self._lock:
            hit = self._listings.get(path)
            if hit is None or hit[0] <= self._clock():
                self._listings.pop(path, None)
                return None
            return hit[1]

    def store_listing(self, path: str, entries: list[str]) -> None:
        if self.dir_ttl > 0:
            with self._lock:
                self._listings[path] = (self._clock() + self.dir_ttl, entries)

    def is_missing(self, path: str) -> bool:
        parent, name = self.split(path)
        with self._lock:
            names = self._missing.get(parent, {})
            until = names.get(name)
            if until is None:
                return False
            if until <= self._clock():
                del names[name]
                return False
            return True

    def store_missing(self, path: str, parent_version: tuple[int, ...] | None = None) -> None:
        if self.neg_ttl > 0 and path != "/":
            parent, name = self.split(path)
            with self._lock:
                self._missing.setdefault(parent, {})[name] = self._clock() + self.neg_ttl
                if parent_version is not None:
                    self._verifier.setdefault(parent, parent_version)

    def revalidate(self, path: str, version: tuple[int, ...]) -> None:
        """Directory `path` was opened and found at `version`: if it changed since this client
        cached what lies in it, forget the listing and negative entries (NFS close-to-open on a
        directory compares its change attribute with the one its negative dentries were made under)."""
        with self._lock:
            seen = self._verifier.get(path)
            if seen is not None and seen != version:
                self._listings.pop(path, None)
                self._missing.pop(path, None)
                del self._verifier[path]

    def changed(self, *paths: str) -> None:
        """This client changed the directories holding `paths` (and whatever lay below a renamed
        or removed directory): forget what it cached there."""
        with self._lock:
            for path in paths:
                parent, _ = self.split(path)
                for d in (parent, path):
                    self._listings.pop(d, None)
                    self._missing.pop(d, None)
                    self._verifier.pop(d, None)
                below = path.rstrip("/") + "/"
                for d in [d for d in self._listings if d.startswith(below)]:
                    del self._listings[d]
                for d in [d for d in self._missing if d.startswith(below)]:
                    del self._missing[d]


def version(path: str) -> tuple[int, ...]:
    """A directory's change attribute as this model approximates NFS's: mtime, ctime, link count."""
    st = os.stat(path)
    return st.st_mtime_ns, st.st_ctime_ns, st.st_nlink


def serve(
    src: str,
    mnt: str,
    dir_ttl: float,
    neg_ttl: float,
    *,
    stale_eexist: bool = False,
    cto_dirs: bool = False,
    race_mkdir: Sequence[str] = (),
) -> None:
    """Mount `src` at `mnt` as one client and serve until unmounted (foreground, threaded)."""
    import fuse  # imported here: loading it needs libfuse.so.2

    os.umask(0)  # the kernel already applied the caller's umask to every mode it sends
    cache = ClientCache(dir_ttl, neg_ttl)
    racing = set(race_mkdir)
    root = os.path.realpath(src)
    as_root = os.geteuid() == 0

    def real(path: str) -> str:
        return root + path

    def own(path: str) -> None:
        # Files a non-root caller creates belong to it, as on the server.
        if as_root:
            uid, gid, _pid = fuse.fuse_get_context()
            with contextlib.suppress(OSError):
                os.lchown(real(path), uid, gid)

    @contextlib.contextmanager
    def changing(*paths: str) -> Iterator[None]:
        try:
            yield
        except FileExistsError:
            if not stale_eexist:
                cache.changed(*paths)
            raise
        except BaseException:
            cache.changed(*paths)
            raise
        else:
            cache.changed(*paths)

    class Client(fuse.Operations):
        use_ns = True

        def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
            if fh:
                st = os.fstat(fh.fh)
            else:
                if cache.is_missing(path):
                    raise fuse.FuseOSError(errno.ENOENT)
                try:
                    st = os.lstat(real(path))
                except FileNotFoundError:
                    parent = cache.split(path)[0]
                    with contextlib.suppress(OSError):
                        cache.store_missing(path, version(real(parent)))
                    raise
            keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size")
            out = {k: getattr(st, k) for k in keys}
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return out

        def opendir(self, path: str) -> int:
            if cto_dirs:
                cache.revalidate(path, version(real(path)))
            return 0

        def readdir(self, path: str, fh: int) -> list[str]:
            entries = cache.listing(path)
            if entries is None:
                entries = os.listdir(real(path))
                cache.store_listing(path, entries)
            return [".", "..", *entries]

        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(real(path))
            keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
            return {k: getattr(sv, k) for k in (*keys, "f_flag", "f_frsize", "f_namemax")}

        def chmod(self, path: str, mode: int) -> None:
            os.chmod(real(path), mode)

        def chown(self, path: str, uid: int, gid: int) -> None:
            os.lchown(real(path), uid, gid)

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
            if times is None:
                os.utime(real(path), follow_symlinks=False)
            else:
                os.utime(real(path), ns=times, follow_symlinks=False)

        def truncate(self, path: str, length: int, fh: Any = None) -> None:
            if fh:
                os.ftruncate(fh.fh, length)
            else:
                os.truncate(real(path), length)

        # -- directory changes: through to the backing filesystem; this client's caches of the
        # directory drop whether it worked or not: the server's reply (EEXIST too) carries the
        # directory's new attributes, and Linux NFS drops the dentry of a failed create.

        def mkdir(self, path: str, mode: int) -> None:
            name = cache.split(path)[1]
            if name in racing:
                racing.discard(name)
                time.sleep(0.02)  # the other client's mkdir lands a moment later (coarse timestamps)
                with contextlib.suppress(FileExistsError):
                    os.mkdir(real(path), mode)
            with changing(path):
                os.mkdir(real(path), mode)
                own(path)

        def rmdir(self, path: str) -> None:
            with changing(path):
                os.rmdir(real(path))

        def unlink(self, path: str) -> None:
            with changing(path):
                os.unlink(real(path))

        def symlink(self, target: str, source: str) -> None:
            with changing(target):
                os.symlink(source, real(target))
                own(target)

        def link(self, target: str, source: str) -> None:
            with changing(target):
                os.link(real(source), real(target))

        def rename(self, old: str, new: str) -> None:
            with changing(old, new):
                os.rename(real(old), real(new))

        def mknod(self, path: str, mode: int, dev: int) -> None:
            with changing(path):
                os.mknod(real(path), mode, dev)
                own(path)

        # -- files: every open reaches the backing file

        def create(self, path: str, mode: int, fi: Any) -> int:
            # fi.flags carries O_EXCL: the backing filesystem decides, even where this client
            # still believes the name missing.
            with changing(path):
                fi.fh = os.open(real(path), fi.flags | os.O_CREAT, mode)
                own(path)
            return 0

        def open(self, path: str, fi: Any) -> int:
            fi.fh = os.open(real(path), fi.flags)
            return 0

        def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
            return os.pread(fi.fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fi: Any) -> int:
            return os.pwrite(fi.fh, data, offset)

        def flush(self, path: str, fi: Any) -> None:
            return None

        def fsync(self, path: str, datasync: int, fi: Any) -> None:
            (os.fdatasync if datasync else os.fsync)(fi.fh)

        def release(self, path: str, fi: Any) -> None:
            os.close(fi.fh)

    fuse.FUSE(
        Client(),
        mnt,
        raw_fi=True,
        foreground=True,
        nothreads=False,
        allow_other=True,
        default_permissions=True,
        use_ino=True,
        hard_remove=True,  # no .fuse_hidden* names in listings after unlinking an open file
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
        fsname=FSNAME,
        subtype=FSNAME,
    )


# -- the caller's side -----------------------------------------------------------------------------


def mounted(path: Path) -> bool:
    """From /proc/self/mounts, without touching the mount (which may be hung)."""
    target = os.path.realpath(path)
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(len(f := line.split()) > 1 and f[1].replace("\\040", " ") == target for line in lines)


def _until_stopped(pid: int, timeout: float = 10.0) -> None:
    """kill() only queues SIGSTOP: each of the daemon's threads stops on its way back to user space,
    on a loaded host a moment later, and one still running may answer a request first. Return once
    every thread is stopped (state T in /proc), so that what the caller does next meets a hung mount."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return  # the daemon is gone: nothing is left to answer
        states = []
        for tid in tids:
            try:
                states.append(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue  # that thread ended meanwhile
        if states and all(st in ("T", "t") for st in states):
            return
        time.sleep(0.01)
    raise RuntimeError(f"the NFS model's daemon (pid {pid}) did not stop within {timeout:g} s of SIGSTOP")


class NfsClient:
    """One mounted client: its daemon (a child process) and its mount point."""

    def __init__(
        self, src: Path, mnt: Path, dir_ttl: float, neg_ttl: float, log: Path, flags: Sequence[str] = ()
    ) -> None:
        self.src, self.mnt, self.dir_ttl, self.neg_ttl, self.log = src, mnt, dir_ttl, neg_ttl, log
        self.flags = list(flags)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stalled = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def mount(self, timeout: float = 20.0) -> None:
        self.mnt.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, str(Path(__file__).resolve()), str(self.src), str(self.mnt)]
        argv += ["--dir-ttl", str(self.dir_ttl), "--neg-ttl", str(self.neg_ttl), *self.flags]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        end = time.monotonic() + timeout
        while not mounted(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.unmount()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the NFS model did not mount {self.mnt} (daemon log {self.log}):\n{tail}")
            time.sleep(0.05)

    def stall(self) -> None:
        """The filesystem hangs: every operation on this mount blocks until resume()."""
        if self.proc:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.stalled = True
            _until_stopped(self.proc.pid)

    def resume(self) -> None:
        if self.proc:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.stalled = False

    def unmount(self) -> None:
        """fusermount -u (umount for root), then a lazy unmount if still busy; the daemon by PID."""
        if self.stalled:
            self.resume()
        for argv in (["fusermount", "-u"], ["fusermount3", "-u"], ["umount", "-l"]):
            if not mounted(self.mnt):
                break
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                subprocess.run([*argv, str(self.mnt)], capture_output=True, timeout=30)
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)


@contextlib.contextmanager
def nfs_clients(
    src: Path,
    mounts: Sequence[Path],
    *,
    dir_ttl: float = DEFAULT_TTL,
    neg_ttl: float = DEFAULT_TTL,
    stale_eexist: bool = False,
    cto_dirs: bool = False,
    race_mkdir: Sequence[str] = (),
) -> Iterator[list[NfsClient]]:
    """Mount `src` once per path in `mounts`, each its own client; all unmounted on the way out,
    also when the body failed. FuseUnavailable (fuse_install) when FUSE cannot exist here."""
    from tests.harness import fuse_install

    fuse_install.ensure_installed()
    src.mkdir(parents=True, exist_ok=True)
    clients: list[NfsClient] = []
    try:
        for mnt in mounts:
            flags = ["--stale-eexist"] * stale_eexist + ["--cto-dirs"] * cto_dirs
            flags += [f"--race-mkdir={name}" for name in race_mkdir]
            client = NfsClient(src, mnt, dir_ttl, neg_ttl, mnt.parent / f".{mnt.name}.nfs-model.log", flags)
            clients.append(client)
            client.mount()
        yield clients
    finally:
        for client in clients:
            client.unmount()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="serve SRC at MNT as one NFS-like client (foreground)")
    ap.add_argument("src")
    ap.add_argument("mnt")
    ap.add_argument("--dir-ttl", type=float, default=DEFAULT_TTL, help="seconds a listing is cached")
    ap.add_argument("--neg-ttl", type=float, default=DEFAULT_TTL, help="seconds a missing name stays missing")
    ap.add_argument("--stale-eexist", action="store_true", help="a create refused with EEXIST keeps the negative entry")
    ap.add_argument("--cto-dirs", action="store_true", help="opening a directory revalidates its negative entries")
    ap.add_argument("--race-mkdir", action="append", default=[], help="another client makes NAME just before our mkdir")
    args = ap.parse_args(argv)
    serve(
        args.src,
        args.mnt,
        args.dir_ttl,
        args.neg_ttl,
        stale_eexist=args.stale_eexist,
        cto_dirs=args.cto_dirs,
        race_mkdir=args.race_mkdir,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
