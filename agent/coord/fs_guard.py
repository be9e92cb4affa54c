"""The filesystem guard: what the output root lives on, and whether it can hold the contract.

Run once at agent start, before anything is written (agent/cli.py):

- an object-store FUSE mount (s3fs, gcsfuse, mountpoint-s3, goofys, rclone and the like) is
  refused: its rename is a copy and a delete, so the atomic replace every record relies on
  (schemas/safe_io.py) does not exist there;
- an NFS mount whose attribute cache can hide another node's write for longer than the heartbeat
  settings assume gets one warning naming the option, its value and what to set. The liveness
  round reads every record once per `heartbeat_interval`, so that is the budget a cache may use:
  past it, a record another node writes (a failure) reaches this node through the files that much
  later, and past `heartbeat_timeout` a failed peer can be named silent before its record is seen.
  Which caches matter: listings (`acdirmin`/`acdirmax`, defaults 30/60 s; `actimeo=N` sets all
  four, `noac` none), "no such file" answers (`lookupcache=all`, the default, keeps them as long as
  the directory's attributes), and, with `nocto` only, file contents (`acregmin`/`acregmax`, 3/60 s;
  close-to-open otherwise revalidates every open).

The facts (type, source, mount point, options, the warnings) go into the placement record, with
every option value that could hold a credential dropped. The kernel prints an NFS cache option
only when it differs from the default, so an absent option means the default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.coord import _mountinfo as mountinfo
from schemas import records

__all__ = [
    "Filesystem",
    "Guard",
    "Heartbeat",
    "LOG_OPTIONS",
    "NFS_DEFAULTS",
    "NFS_TYPES",
    "NfsCache",
    "OBJECT_STORES",
    "RCLONE_WHY",
    "REDACTED",
    "cache_warnings",
    "check",
    "nfs_cache",
    "object_store",
    "redact",
    "redact_source",
    "refusal",
]

# FUSE daemons that present an object store: no atomic rename (copy + delete), often no
# directories of their own. Matched on the FUSE subtype (fstype fuse.NAME) or, for a mount
# without one, on the source the daemon names itself with.
OBJECT_STORES: Mapping[str, str] = {
    "s3fs": "s3fs (Amazon S3)",
    "gcsfuse": "gcsfuse (Google Cloud Storage)",
    "mountpoint-s3": "Mountpoint for Amazon S3",
    "mount-s3": "Mountpoint for Amazon S3",
    "goofys": "goofys (S3)",
    "geesefs": "GeeseFS (S3)",
    "tigrisfs": "TigrisFS (S3)",
    "riofs": "RioFS (S3)",
    "yas3fs": "yas3fs (S3)",
    "ossfs": "ossfs (Alibaba OSS)",
    "cosfs": "cosfs (Tencent COS)",
    "obsfs": "obsfs (Huawei OBS)",
    "blobfuse": "blobfuse (Azure Blob Storage)",
    "blobfuse2": "blobfuse2 (Azure Blob Storage)",
    # Any remote: object-store remotes rename by copy and delete, and its directory cache holds a
    # listing for minutes by default, so other nodes' records stay unseen whatever the remote.
    "rclone": "rclone mount",
}
RCLONE_WHY = (
    "On object-store remotes its rename is a copy and a delete, and on any remote its directory cache "
    "keeps other nodes' new files out of a listing for minutes by default"
)
NFS_TYPES = frozenset({"nfs", "nfs4"})
NFS_DEFAULTS: Mapping[str, float] = {"acregmin": 3, "acregmax": 60, "acdirmin": 30, "acdirmax": 60}  # nfs(5)
# Option names whose value may be a secret (cifs password=, ceph secret=, credentials= files...).
_SECRET = re.compile(r"pass|key|secret|token|cred|auth", re.IGNORECASE)
_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<user>[^@/\s]*:[^@/\s]*)@")
REDACTED = "<redacted>"
LOG_OPTIONS = 1000  # characters of options on the agent log's line (the record keeps them all)


@dataclass(frozen=True)
class Filesystem:
    fstype: str
    source: str
    mount_point: str
    options: tuple[str, ...]

    @classmethod
    def of(cls, mount: mountinfo.Mount) -> Filesystem:
        return cls(mount.fstype, mount.source, mount.mount_point, mount.options)

    def describe(self) -> str:
        return f"{self.fstype} {redact_source(self.source)} at {self.mount_point}"


@dataclass(frozen=True)
class NfsCache:
    """How long this NFS client may answer from its caches, in seconds (0: never)."""

    acregmin: float
    acregmax: float
    acdirmin: float
    acdirmax: float
    lookupcache: str  # all, positive or none
    nocto: bool
    spelled: Mapping[str, str]  # which option set a bound, as the mount spelled it

    @property
    def listing(self) -> float:
        return max(self.acdirmin, self.acdirmax)

    @property
    def negative(self) -> float:
        return self.listing if self.lookupcache == "all" else 0.0

    @property
    def content(self) -> float:
        return max(self.acregmin, self.acregmax) if self.nocto else 0.0


@dataclass(frozen=True)
class Heartbeat:
    """The heartbeat settings the guard measures a cache against ([launch.coordination])."""

    interval: float
    timeout: float


@dataclass(frozen=True)
class Guard:
    """What the guard found for one path: the facts, a refusal, the warnings."""

    path: str
    filesystem: Filesystem | None
    unknown_because: str | None = None
    refusal: str | None = None
    warnings: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The placement record's `filesystem` object (schemas.records.filesystem_fields)."""
        fs = self.filesystem
        if fs is None:
            return records.filesystem_fields(
                fstype="unknown", source="", mount_point="", options=(), warnings=(), note=self.unknown_because
            )
        return records.filesystem_fields(
            fstype=fs.fstype,
            source=redact_source(fs.source),
            mount_point=fs.mount_point,
            options=redact(fs.options),
            warnings=self.warnings,
        )

    def log_lines(self) -> list[str]:
        """The agent log's lines: the facts always, the warnings once, in one line."""
        fs = self.filesystem
        if fs is None:
            return [f"filesystem of {self.path}: unknown ({self.unknown_because})"]
        options = ",".join(redact(fs.options)) or "no options"
        if len(options) > LOG_OPTIONS:  # an overlay's layer list can run to kilobytes
            options = options[: LOG_OPTIONS - 1] + "…"
        lines = [f"filesystem of {self.path}: {fs.describe()} ({options})"]
        if self.warnings:
            lines.append("filesystem warning: " + " ".join(self.warnings))
        return lines


def _parsed(options: Sequence[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for opt in options:
        name, eq, value = opt.partition("=")
        out[name] = value if eq else None  # the kernel prints the one in force last
    return out


def redact(options: Sequence[str]) -> tuple[str, ...]:
    """Options with every value whose name could hold a credential dropped (the name stays)."""
    out = []
    for opt in options:
        name, eq, _ = opt.partition("=")
        out.append(f"{name}={REDACTED}" if eq and _SECRET.search(name) else opt)
    return tuple(out)


def redact_source(source: str) -> str:
    """A source with a `user:password@` part (a URL's userinfo) dropped."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme') or ''}{REDACTED}@", source, count=1)


def object_store(fs: Filesystem) -> str | None:
    """What object store the mount presents, or None."""
    kind, _, subtype = fs.fstype.partition(".")
    if kind not in ("fuse", "fuseblk"):
        return None
    if subtype:
        return OBJECT_STORES.get(subtype.lower())
    # No subtype: a daemon names itself in the source ("s3fs", "mountpoint-s3", old "s3fs#bucket").
    head = re.split(r"[#:\s]", fs.source, maxsplit=1)[0].lower()
    return OBJECT_STORES.get(head)


def _seconds(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def nfs_cache(fs: Filesystem) -> NfsCache | None:
    """The NFS client's cache bounds for this mount, or None for another filesystem."""
    if fs.fstype not in NFS_TYPES:
        return None
    opts = _parsed(fs.options)
    bounds = dict(NFS_DEFAULTS)
    spelled = {k: f"{k}={v:g} (the NFS default: the mount sets neither {k} nor actimeo)" for k, v in bounds.items()}
    actimeo = _seconds(opts.get("actimeo"))
    if actimeo is not None:
        for k in bounds:
            bounds[k], spelled[k] = actimeo, f"actimeo={opts['actimeo']}"
    for k in bounds:
        given = _seconds(opts.get(k))
        if given is not None:
            bounds[k], spelled[k] = given, f"{k}={opts[k]}"
    if "noac" in opts:
        for k in bounds:
            bounds[k], spelled[k] = 0.0, "noac"
    lookup = (opts.get("lookupcache") or "all").lower()
    lookup = {"pos": "positive", "positive": "positive", "none": "none"}.get(lookup, "all")
    return NfsCache(
        acregmin=bounds["acregmin"],
        acregmax=bounds["acregmax"],
        acdirmin=bounds["acdirmin"],
        acdirmax=bounds["acdirmax"],
        lookupcache=lookup,
        nocto="nocto" in opts,
        spelled=spelled,
    )


def _suggest(budget: float) -> str:
    # actimeo takes whole seconds; below one second only no attribute cache at all fits.
    return "actimeo=1" if budget >= 1 else "noac"


def cache_warnings(fs: Filesystem, hb: Heartbeat) -> tuple[str, ...]:
    """One sentence per cache that exceeds what the heartbeat settings assume (see the module doc)."""
    cache = nfs_cache(fs)
    if cache is None:
        return ()
    budget = hb.interval
    out: list[str] = []

    def late(bound: float) -> str:
        if bound + hb.interval >= hb.timeout:
            return (
                f", beyond heartbeat_timeout={hb.timeout:g} s: a failed peer can be named silent "
                "before its failure record is seen"
            )
        return ""

    if cache.listing > budget:
        key = "acdirmax" if cache.acdirmax >= cache.acdirmin else "acdirmin"
        out.append(
            f"NFS mount {fs.mount_point}: {cache.spelled[key]} lets this node list a directory from its "
            f"cache for up to {cache.listing:g} s, longer than heartbeat_interval={hb.interval:g} s, which the "
            f"heartbeat settings assume: a failure another node records reaches this node through the files "
            f"up to {cache.listing:g} s late{late(cache.listing)}. Remount with {_suggest(budget)} "
            f"(or acdirmin and acdirmax at most {budget:g})."
        )
    if cache.negative > budget:
        what = "lookupcache=all (the NFS default)" if "lookupcache" not in _parsed(fs.options) else "lookupcache=all"
        out.append(
            f"NFS mount {fs.mount_point}: {what} keeps a 'no such file' answer for a name as long "
            f"({cache.negative:g} s), so a record created on another node stays unopenable here: "
            "remount with lookupcache=positive."
        )
    if cache.content > budget:
        key = "acregmax" if cache.acregmax >= cache.acregmin else "acregmin"
        out.append(
            f"NFS mount {fs.mount_point}: nocto with {cache.spelled[key]} serves a peer's heartbeat from this "
            f"node's cache for up to {cache.content:g} s, longer than heartbeat_interval={hb.interval:g} s"
            f"{late(cache.content)}. Remount without nocto."
        )
    return tuple(out)


def refusal(path: str, fs: Filesystem) -> str | None:
    what = object_store(fs)
    if what is None:
        return None
    why = RCLONE_WHY if what == OBJECT_STORES["rclone"] else "Its rename is a copy and a delete, not atomic"
    return (
        f"the output root {path} is on an object-store FUSE mount: {fs.describe()}, {what}. {why}, so a peer "
        "can read a torn or missing record and the run directory's contract cannot hold. Put [output] root "
        "(or --output-root) on a POSIX shared filesystem (NFS, Lustre, WEKA, GPFS, BeeGFS, CephFS); "
        "nothing was written"
    )


def check(path: str, hb: Heartbeat, *, table: str | None = None) -> Guard:
    """The guard's finding for `path` (which may not exist yet), from the mount table `table`
    (default: this process's, mountinfo.MOUNTINFO)."""
    table = table or mountinfo.MOUNTINFO
    resolved = mountinfo.resolve(path)
    try:
        mounts = mountinfo.read(table)
    except OSError as exc:
        return Guard(resolved, None, unknown_because=f"cannot read {table}: {exc.strerror or exc}")
    mount = mountinfo.mount_of(resolved, mounts)
    if mount is None:
        return Guard(resolved, None, unknown_because=f"no mount in {table} contains it")
    fs = Filesystem.of(mount)
    return Guard(resolved, fs, refusal=refusal(resolved, fs), warnings=cache_warnings(fs, hb))
