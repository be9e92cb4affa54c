"""Start, observe and stop N coordination-only agents of either protocol, through one interface.

`Ours` runs real `gym-agent` processes (no Ray, no judge, a sleeping driver) on 127.0.0.(2+i);
`Anchor` runs bench/anchor_agent.py processes. Both read their own heartbeats back for sequence
numbers and self-counted filesystem operations, and normalise their failure records so that the
harness measures both the same way. A wall-clock skew is injected into one process only, through
the GYM_TEST_CLOCK_SKEW_S environment variable both honour (agent/ground/clock.py, anchor_agent.wall).
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from schemas import names
from tests.harness.specs import small_spec

IDLE_DRIVER = 'command = ["python", "-c", "import time; time.sleep(3600)"]'


@dataclass(frozen=True)
class Settings:
    heartbeat_interval: float = 2.0
    poll_interval: float = 1.0
    heartbeat_timeout: float = 60.0  # ours; the anchor's stale threshold takes the same value


@dataclass(frozen=True)
class Record:
    """A failure record, normalised: who, when it tripped, when written, when it became visible
    to readers, and why."""

    rank: int
    why: str  # "signal" (the bench's own SIGTERM), "peer" (reacting to a record) or "own" (a detection)
    tripped_wall: float
    written_wall: float  # the writer's stamp, taken before the write
    cause: str
    published_wall: float = 0.0  # the file's ctime: set by the rename (or last write) that published it


class Cluster:
    name = ""

    def __init__(self, n: int, root: Path, settings: Settings, skew: dict[int, float] | None = None) -> None:
        self.n = n
        self.root = root
        self.settings = settings
        self.skew = skew or {}
        self.procs: list[subprocess.Popen] = []

    # -- hooks ---------------------------------------------------------------------------------

    def argv(self, rank: int) -> list[str]:
        raise NotImplementedError

    def heartbeat_path(self, rank: int) -> Path:
        raise NotImplementedError

    def ready(self, hb: dict) -> bool:
        raise NotImplementedError

    def records(self) -> dict[int, Record]:
        raise NotImplementedError

    @property
    def run_dir(self) -> Path:
        raise NotImplementedError

    # -- common --------------------------------------------------------------------------------

    def start(self) -> None:
        for r in range(self.n):
            self.start_one(r)

    def start_one(self, r: int) -> None:
        """Start rank r (ranks are started in order: procs[r] is rank r)."""
        assert len(self.procs) == r
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
        env.pop("GYM_TEST_CLOCK_SKEW_S", None)
        if r in self.skew:
            env["GYM_TEST_CLOCK_SKEW_S"] = str(self.skew[r])
        self.procs.append(
            subprocess.Popen(
                self.argv(r),
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )

    def heartbeats(self) -> dict[int, dict]:
        out = {}
        for r in range(self.n):
            try:
                out[r] = orjson.loads(self.heartbeat_path(r).read_bytes())
            except (OSError, ValueError):
                pass
        return out

    def wait_ready(self, timeout: float) -> bool:
        """True once every agent is in its steady state; False at once if any failure record appears."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.records():
                return False
            hbs = self.heartbeats()
            if len(hbs) == self.n and all(self.ready(h) for h in hbs.values()):
                return True
            time.sleep(0.5)
        raise RuntimeError(f"{self.name} N={self.n}: agents did not reach their steady state in {timeout:.0f}s")

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def wait_exit(self, timeout: float) -> float:
        """Wait until every agent exited; returns the wall time of the last exit seen (polled at 5 ms)."""
        end = time.monotonic() + timeout
        pending = list(self.procs)
        while pending and time.monotonic() < end:
            pending = [p for p in pending if p.poll() is None]
            if pending:
                time.sleep(0.005)
        if pending:
            raise RuntimeError(f"{self.name} N={self.n}: {len(pending)} agents still running after {timeout:.0f}s")
        return time.time()

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM every live agent, then SIGKILL its process group after `grace` (by pid only)."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()


class Ours(Cluster):
    name = "gym-agent"

    def __init__(self, n: int, root: Path, settings: Settings, skew: dict[int, float] | None = None) -> None:
        super().__init__(n, root, settings, skew)
        self.uuid = f"bench-{n}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.spec = root / "bench.toml"
        s = settings
        self.spec.write_text(
            small_spec(
                name="bench",
                replicas=n,
                node_gpus=1,
                driver=IDLE_DRIVER,
                placement=None,
                startup_timeout=120 + n,
                heartbeat_timeout=s.heartbeat_timeout,
                heartbeat_interval=s.heartbeat_interval,
                poll_interval=s.poll_interval,
                teardown_grace=2.0,
                ack_timeout=None,
                ray=False,
            )
        )

    @property
    def run_dir(self) -> Path:
        return self.root / "out" / "cluster" / self.uuid

    def argv(self, rank: int) -> list[str]:
        first = ipaddress.ip_address("127.0.0.2")
        return [
            sys.executable,
            "-m",
            "agent.cli",
            "--uuid",
            self.uuid,
            "--config",
            str(self.spec),
            "--output-root",
            str(self.root / "out"),
            "--rank",
            str(rank),
            "--replicas",
            str(self.n),
            "--address",
            str(first + rank),
        ]

    def heartbeat_path(self, rank: int) -> Path:
        return self.run_dir / names.heartbeat(rank)

    def ready(self, hb: dict) -> bool:
        return hb.get("phase") == "driver"

    def records(self) -> dict[int, Record]:
        out: dict[int, Record] = {}
        d = self.run_dir / names.FAILURES_DIR
        try:
            listed = os.listdir(d)
        except OSError:
            return out
        for name in listed:
            if names.rank_in(names.FAILURES_DIR, name) is None:
                continue
            try:
                doc = orjson.loads((d / name).read_bytes())
                published = os.stat(d / name).st_ctime_ns / 1e9
            except (OSError, ValueError):
                continue
            kind = doc.get("kind")
            why = "signal" if kind == "signal" else "peer" if kind == "peer_failure" else "own"
            r = int(doc["rank"])
            cause = f"{kind}: {doc.get('cause')}"
            out[r] = Record(r, why, float(doc["wall_time"]), float(doc["written_at"]), cause, published)
        return out


class Anchor(Cluster):
    name = "anchor"

    @property
    def run_dir(self) -> Path:
        return self.root / "anchor"

    def argv(self, rank: int) -> list[str]:
        s = self.settings
        return [
            sys.executable,
            "-m",
            "bench.anchor_agent",
            "--dir",
            str(self.run_dir),
            "--rank",
            str(rank),
            "--replicas",
            str(self.n),
            "--heartbeat",
            str(s.heartbeat_interval),
            "--stale",
            str(s.heartbeat_timeout),
            "--glob-every",
            str(s.poll_interval),
        ]

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        super().start()

    def heartbeat_path(self, rank: int) -> Path:
        return self.run_dir / names.leaf(names.heartbeat(rank))  # the anchor's flat directory

    def ready(self, hb: dict) -> bool:
        return int(hb.get("seq", 0)) >= 2

    def records(self) -> dict[int, Record]:
        out: dict[int, Record] = {}
        try:
            listed = os.listdir(self.run_dir)
        except OSError:
            return out
        for name in listed:
            if not (name.startswith("failed-") and name.endswith(".json")):
                continue
            try:
                doc = orjson.loads((self.run_dir / name).read_bytes())
                published = os.stat(self.run_dir / name).st_ctime_ns / 1e9
            except (OSError, ValueError):
                continue  # written non-atomically, as in the anchor: seen again later
            error = str(doc.get("error"))
            kind = (doc.get("reacting_to") or {}).get("kind")
            why = "signal" if error.startswith("received") else "peer" if kind == "peer" else "own"
            r = int(doc["rank"])
            out[r] = Record(r, why, float(doc["wall_time"]), float(doc["written_at"]), error, published)
        return out


class OursFilesOnly(Ours):
    """gym-agent with `doorbell = false`: the files alone, as before the doorbell."""

    name = "files-only"

    def __init__(self, n: int, root: Path, settings: Settings, skew: dict[int, float] | None = None) -> None:
        super().__init__(n, root, settings, skew)
        text = self.spec.read_text()
        self.spec.write_text(text.replace("[launch.coordination]\n", "[launch.coordination]\ndoorbell = false\n", 1))


SYSTEMS: dict[str, type[Cluster]] = {"ours": Ours, "anchor": Anchor, "files": OursFilesOnly}
