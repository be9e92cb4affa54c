"""The HTML report's view of the sample ledger (audit/_ledger.py, read from its JSON): the stream of
each attempt drawn over the declared order (committed, replayed, repeated), the gaps above them,
and a row per attempt (its steps, the checkpoint it resumed from, what it committed and replayed)."""

from __future__ import annotations

from html import escape
from typing import Any

__all__ = ["ledger_html"]

COLOURS = {"committed": "#2e7d32", "replayed": "#9e9e9e", "repeated": "#ef6c00", "skipped": "#c62828"}
WIDTH, LEFT, ROW = 900, 110, 22


def ledger_html(ledger: dict[str, Any] | None) -> str:
    if not ledger:
        return ""
    parts = ['<h2>Sample ledger</h2><section id="ledger">', _headline(ledger)]
    if ledger.get("checked") and ledger.get("order_ids"):
        parts.append(_stream(ledger))
    parts.append(_table(ledger))
    parts.append("</section>")
    return "".join(parts)


def _headline(ledger: dict[str, Any]) -> str:
    if not ledger.get("checked"):
        return '<p class="muted">No dataset order declared ([driver.ledger] order): the ledger is not checked.</p>'
    skipped, repeated = ledger["skipped"]["count"], ledger["repeated"]["count"]
    return (
        f'<p id="ledger-summary">Order <code>{escape(str(ledger.get("order")))}</code>, '
        f"{ledger['order_ids']} ids: <b>{skipped}</b> skipped, <b>{repeated}</b> repeated, "
        f"{ledger['replayed']} replayed after a checkpoint (work redone on resume), "
        f"{ledger['unknown']['count']} not in the order.</p>"
    )


def _stream(ledger: dict[str, Any]) -> str:
    """One row per attempt over the order (epoch after epoch), and a row of the gaps on top."""
    n = int(ledger["order_ids"])
    epochs = 1 + max(
        [s[0] for a in ledger["attempts"] for s in a["segments"]] + [g["epoch"] for g in ledger["skipped"]["gaps"]],
        default=0,
    )
    span = max(1, n * epochs)

    def x(epoch: int, pos: int) -> float:
        return LEFT + (WIDTH - LEFT - 10) * (epoch * n + pos) / span

    def bar(y: int, epoch: int, start: int, end: int, kind: str, tip: str) -> str:
        x0, x1 = x(epoch, start), x(epoch, end)
        return (
            f'<rect class="{kind}" x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 1.0):.1f}" height="{ROW - 6}" '
            f'fill="{COLOURS[kind]}"><title>{escape(tip)}</title></rect>'
        )

    rows = [f'<text x="4" y="{ROW - 8}" font-size="12">skipped</text>']
    for g in ledger["skipped"]["gaps"]:
        where = f"attempt {g['attempt']} step {g['step']}" if g["attempt"] is not None else "unknown step"
        tip = f"skipped: {g['count']} ids (epoch {g['epoch']}, {g['from']}..{g['to'] - 1}); gap opened at {where}"
        rows.append(bar(2, g["epoch"], g["from"], g["to"], "skipped", tip))
    for i, a in enumerate(ledger["attempts"], 1):
        y = i * ROW
        rows.append(f'<text x="4" y="{y + ROW - 8}" font-size="12">attempt {a["attempt"]}</text>')
        for epoch, start, end, kind in a["segments"]:
            tip = f"attempt {a['attempt']}, {kind}: epoch {epoch}, positions {start}..{end - 1}"
            rows.append(bar(y + 2, epoch, start, end, kind, tip))
    for e in range(1, epochs):
        rows.append(
            f'<line x1="{x(e, 0):.1f}" x2="{x(e, 0):.1f}" y1="0" y2="{(len(ledger["attempts"]) + 1) * ROW}" '
            'stroke="#555" stroke-dasharray="3,3"/>'
        )
    height = (len(ledger["attempts"]) + 1) * ROW + 4
    legend = " ".join(f'<span style="color:{c}">■</span> {k}' for k, c in COLOURS.items())
    return (
        f'<svg id="ledger-stream" width="{WIDTH}" height="{height}" role="img" '
        f'aria-label="the sample stream of each attempt over the declared order">{"".join(rows)}</svg>'
        f'<p class="muted">{legend}; x: position in the declared order, epoch after epoch</p>'
    )


def _table(ledger: dict[str, Any]) -> str:
    head = (
        "<tr><th>attempt</th><th>steps</th><th>first..last step</th><th>resumed from checkpoint</th>"
        "<th>committed until step</th><th>committed ids</th><th>replayed ids</th><th>checkpoints</th></tr>"
    )
    rows = "".join(
        f"<tr><td>{a['attempt']}</td><td>{a['steps']}</td><td>{a['first_step']}..{a['last_step']}</td>"
        f"<td>{_or_dash(a['resumed_from'])}</td><td>{_or_dash(a['committed_until_step'], 'all')}</td>"
        f"<td>{a['committed_ids']}</td><td>{a['replayed_ids']}</td><td>{a['checkpoint_count']}</td></tr>"
        for a in ledger["attempts"]
    )
    return f'<table id="ledger-attempts">{head}{rows}</table>'


def _or_dash(value: object, none: str = "-") -> str:
    return none if value is None else escape(str(value))
