"""The sample ledger's proof, three ways, on real processes (issue 52 item 4).

    python -m bench.ledger_proof                      # the three loaders, about 40 s each
    python -m bench.ledger_proof --only skips-ahead

For each loader of the demo trainer (examples/ledger_driver.py: correct, restarts-epoch, skips-ahead):
`gym-launch local` on two nodes, the driver's node SIGKILLed whole between two checkpoints, then
`gym-launch local --resume` to the end (tests/harness/ledger.py). Prints where the kill landed, the
audit's first lines and its ledger counts, and whether the audit found what the killed attempt's
ledger predicts; exits 1 if it did not for any loader.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.harness import BIN
from tests.harness import ledger as lg
from tests.harness.agents import forget_agent_tmp_root

HEAD_LINES = 6


def prove(loader: str, base: Path, out: list[str]) -> list[str]:
    """One loader's kill and resume; its report lines go to `out`, its problems are returned."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{loader}-", dir=base))
    try:
        run = lg.kill_then_resume(tmp, loader)
    except (AssertionError, TimeoutError, OSError) as exc:
        return [f"the kill and resume failed: {exc}"]
    finally:
        root = forget_agent_tmp_root(tmp)  # the agents' local temp root (the tests' conftest removes theirs)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
    k = run.killed
    out.append(
        f"== {loader}: attempt 1 killed at step {k.last_step} (last checkpoint {k.checkpoint}, "
        f"{len(k.replayed)} ids after it); the resumed launch exited {run.code}"
    )
    text = subprocess.run([str(BIN / "gym-audit"), str(run.run_dir)], capture_output=True, text=True).stdout
    out += text.splitlines()[:HEAD_LINES]
    _code, doc = lg.audit_json(run.run_dir)
    led = doc.get("ledger") or {}
    out.append(
        f"   ledger: {led.get('order_ids')} ids in the order; replayed {led.get('replayed')}, "
        f"repeated {(led.get('repeated') or {}).get('count')}, skipped {(led.get('skipped') or {}).get('count')}"
    )
    return lg.audit_problems(doc, loader, k)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ledger_proof", description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=lg.LOADERS, metavar="LOADER", help="loaders (default: all three)")
    args = ap.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="gym-ledger-", dir="/tmp"))
    failed = 0
    try:
        for loader in args.only or lg.LOADERS:
            lines: list[str] = []
            problems = prove(loader, base, lines)
            print("\n".join(lines))
            print(f"   {'as predicted' if not problems else 'NOT as predicted: ' + '; '.join(problems)}\n", flush=True)
            failed += bool(problems)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
