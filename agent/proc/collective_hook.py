"""The collective trace of a process that uses torch.distributed, asked for from outside while the
process is stuck in a collective.

PyTorch's Flight Recorder (TORCH_FR_BUFFER_SIZE, which the agent sets) keeps the process's last
collectives in a ring buffer, but on gloo nothing dumps it on a timeout, and a Python signal handler
runs only once the stuck collective returns. So a process that imported agent.driver_api with
GYM_COLLECTIVE_TRACE set runs one small daemon thread blocked in accept() on a Unix socket,
FOLDER/PID.collectives (node-local, owner-only): a connection gets the recorder's JSON dump, read in
that thread while the main thread waits in the collective (the wait releases the GIL). Never
imports torch: a process that has not imported torch.distributed answers that it has none.

The agent (a hang's teardown) connects, reads one answer, bounded; a dead process refuses the
connection, a reused pid has no listener at that path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

from schemas.vocab import DriverEnv

__all__ = ["BUFFER_ENV", "BUFFER_SIZE", "SOCKET_SUFFIX", "arm", "ask", "enabled", "env", "socket_path"]

SOCKET_SUFFIX = ".collectives"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with its NUL
MAX_ANSWER = 8 << 20  # the recorder's buffer at 2,000 entries is well under this
BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"  # PyTorch's Flight Recorder: entries kept per process (0: off)
BUFFER_SIZE = "2000"  # measured: 0-10 us per collective on gloo
_armed: list[socket.socket] = []


def enabled(setting: bool | None) -> bool:
    """[driver] collective_trace; absent: whether torch is importable here (found, never imported)."""
    if setting is not None:
        return setting
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def env(setting: bool | None, dump_dir: str | None, inherited: dict[str, str]) -> dict[str, str]:
    """What the driver's and Ray's environment get for the trace: the recorder's buffer (unless the
    user sized it) and the hook's switch; nothing when off or without a node-local folder."""
    if dump_dir is None or not enabled(setting):
        return {}
    out = {DriverEnv.COLLECTIVE_TRACE: "1"}
    if BUFFER_ENV not in inherited:
        out[BUFFER_ENV] = BUFFER_SIZE
    return out


def socket_path(folder: str, pid: int) -> str:
    return os.path.join(folder, f"{pid}{SOCKET_SUFFIX}")


def arm(folder: str) -> bool:
    """Listen on FOLDER/PID.collectives in a daemon thread; False when the folder cannot hold it."""
    path = socket_path(folder, os.getpid())
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if os.path.lexists(path):
            os.unlink(path)  # a previous process of this pid (this process never armed twice)
        old = os.umask(0o177)
        try:
            with _short(path) as short:
                sock.bind(short)
        finally:
            os.umask(old)
        sock.listen(4)
    except OSError:
        sock.close()
        return False
    _armed.append(sock)
    threading.Thread(target=_serve, args=(sock,), name="gym-collective-trace", daemon=True).start()
    return True


def _serve(sock: socket.socket) -> None:
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            try:
                conn.sendall(json.dumps(_answer()).encode("utf-8"))
            except OSError:
                continue


def _answer() -> dict[str, Any]:
    """The recorder's dump of this process, or why there is none (torch never imported here)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return {"torch": False, "problem": "torch.distributed not imported by this process"}
    out: dict[str, Any] = {"torch": True, "rank": None, "world_size": None, "backend": None}
    try:
        if dist.is_initialized():
            out.update(rank=dist.get_rank(), world_size=dist.get_world_size(), backend=str(dist.get_backend()))
        c10d = sys.modules["torch"]._C._distributed_c10d
        raw = c10d._dump_fr_trace_json(True, False)  # collectives, not only the active ones
        out["trace"] = json.loads(raw)
    except Exception as exc:  # noqa: BLE001 - whatever torch raises is the answer's problem, never the caller's
        out["problem"] = f"{type(exc).__name__}: {exc}"[:500]
    return out


def ask(folder: str, pid: int, timeout: float) -> dict[str, Any] | None:
    """The answer of `pid`'s hook within `timeout` seconds; None when it has none (not armed, gone)."""
    path = socket_path(folder, pid)
    if not os.path.exists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(max(0.05, timeout))
    chunks: list[bytes] = []
    size = 0
    try:
        with _short(path) as short:
            sock.connect(short)
        while size < MAX_ANSWER:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        return {"torch": None, "problem": f"no answer: {exc}"[:500]} if chunks or _is_timeout(exc) else None
    finally:
        sock.close()
    try:
        doc = json.loads(b"".join(chunks))
    except ValueError:
        return {"torch": None, "problem": "unreadable answer"}
    return doc if isinstance(doc, dict) else {"torch": None, "problem": "unreadable answer"}


@contextlib.contextmanager
def _short(path: str) -> Iterator[str]:
    """`path` as a socket address may spell it: a Unix socket's path is capped at 107 bytes, so a
    longer one goes through this process's descriptor of its folder (/proc/self/fd/N/NAME)."""
    if len(os.fsencode(path)) < MAX_SOCKET_PATH:
        yield path
        return
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{os.path.basename(path)}"
    finally:
        os.close(fd)


def _is_timeout(exc: OSError) -> bool:
    return isinstance(exc, TimeoutError)
