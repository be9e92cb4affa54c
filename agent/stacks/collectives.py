"""A hang's collective traces on one node: every supervised process whose collective-trace hook
answers (agent/proc/collective_hook.py) gives its Flight Recorder dump, kept as the fields of
collectives-RANK.json. Node-local work only, within one time bound; the caller writes the record.

Only what the audit's analysis needs is kept, from each process's last MAX_ENTRIES collectives:
the group, the sequence id, the operation, the sizes and whether it completed; and per group the
recorder's own last completed and last enqueued sequence ids.
"""

from __future__ import annotations

from typing import Any

from agent.ground import clock
from agent.proc import collective_hook
from agent.stacks._targets import Target

__all__ = ["MAX_ENTRIES", "collect", "entry_of", "process_of"]

MAX_ENTRIES = 64
PARALLEL = 4
BACKEND_PREFIXES = ("gloo:", "nccl:", "ucc:", "mpi:")


def collect(targets: list[Target], *, dump_dir: str, timeout: float, reason: str) -> dict[str, Any] | None:
    """The record's fields, or None when no target answered (no process uses torch.distributed)."""
    from concurrent.futures import ThreadPoolExecutor, wait  # loaded on a hang only: an idle agent stays lean

    t0 = clock.mono()
    started_at = clock.wall()
    deadline = t0 + timeout
    pythons = [t for t in targets if t.python]
    answers: dict[int, dict[str, Any] | None] = {}
    with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="collectives") as pool:
        futures = {t.pid: pool.submit(collective_hook.ask, dump_dir, t.pid, timeout) for t in pythons}
        wait(futures.values(), timeout=max(0.0, deadline - clock.mono()))
        for pid, f in futures.items():
            answers[pid] = f.result() if f.done() else {"torch": None, "problem": f"no answer within {timeout:g}s"}
    processes = [
        process_of(t, a) for t in pythons if (a := answers.get(t.pid)) is not None and a.get("torch") is not False
    ]
    if not processes:
        return None
    return {
        "reason": reason,
        "started_at": started_at,
        "seconds": round(clock.mono() - t0, 3),
        "timeout": timeout,
        "processes": processes,
    }


def process_of(t: Target, answer: dict[str, Any]) -> dict[str, Any]:
    trace = _dict(answer.get("trace"))
    raw = trace.get("entries")
    entries = [e for e in (entry_of(r) for r in (raw if isinstance(raw, list) else []) if isinstance(r, dict)) if e]
    status = _dict(trace.get("pg_status"))
    config = _dict(trace.get("pg_config"))
    names = {str(e["pg_id"]): e["group"] for e in entries}
    groups = []
    for pg_id, st in sorted(status.items()):
        if not isinstance(st, dict):
            continue
        groups.append(
            {
                "pg_id": str(pg_id),
                "group": names.get(str(pg_id), "default_pg" if str(pg_id) == "0" else str(pg_id)),
                "ranks": _ranks(config, str(pg_id)),
                "last_completed": _int(st.get("last_completed_collective")),
                "last_enqueued": _int(st.get("last_enqueued_collective")),
            }
        )
    return {
        "pid": t.pid,
        "role": t.role,
        "rank": answer.get("rank") if isinstance(answer.get("rank"), int) else None,
        "world_size": answer.get("world_size") if isinstance(answer.get("world_size"), int) else None,
        "backend": str(answer["backend"]) if answer.get("backend") else None,
        "problem": str(answer["problem"])[:500] if answer.get("problem") else None,
        "groups": groups,
        "entries": entries[-MAX_ENTRIES:],
        "entries_cut": max(0, len(entries) - MAX_ENTRIES),
    }


def entry_of(raw: dict[str, Any]) -> dict[str, Any] | None:
    """One recorder entry as the record keeps it; None for a point-to-point one or a malformed one."""
    seq = _int(raw.get("collective_seq_id"))
    if seq is None or raw.get("is_p2p"):
        return None
    name = str(raw.get("profiling_name") or "")
    for prefix in BACKEND_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    pg = raw.get("process_group")
    group = str(pg[1]) if isinstance(pg, list) and len(pg) == 2 else "default_pg"
    return {
        "pg_id": str(raw.get("pg_id", pg[0] if isinstance(pg, list) and pg else "0")),
        "group": group,
        "seq": seq,
        "op": name or "unknown",
        "input_sizes": _sizes(raw.get("input_sizes")),
        "output_sizes": _sizes(raw.get("output_sizes")),
        "completed": bool(raw.get("retired")) or raw.get("state") == "completed",
        "state": str(raw.get("state") or ""),
    }


def _sizes(value: Any) -> list[list[int]]:
    if not isinstance(value, list):
        return []
    return [[int(x) for x in s if isinstance(x, int)] for s in value[:16] if isinstance(s, list)]


def _ranks(config: dict[str, Any], pg_id: str) -> list[int] | None:
    # gloo keys the default group's config '' (PyTorch's own analyser trips on it): either key.
    for key in (pg_id, "") if pg_id == "0" else (pg_id,):
        doc = config.get(key)
        if isinstance(doc, dict) and isinstance(doc.get("ranks"), str):
            try:
                return [int(x) for x in doc["ranks"].strip("[]").split(",") if x.strip()]
            except ValueError:
                return None
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
