"""The HTML report's view of the collective a hang stopped in (audit/_collectives.py): its headline,
then one row per rank: what it did with that collective and its last completed sequence id."""

from __future__ import annotations

from html import escape

from audit._collectives import Summary

__all__ = ["collectives_html"]

STATES = {
    "entered": "entered it, waits",
    "completed": "completed it",
    "elsewhere": "sits in another operation",
    "never_entered": "never entered it",
}


def collectives_html(summary: Summary | None) -> str:
    if summary is None:
        return ""
    parts = []
    for s in summary.stuck:
        rows = "".join(
            f'<tr class="{r.state}"><td>rank {r.rank}</td><td>{escape(STATES.get(r.state, r.state))}'
            + (f" ({escape(r.op or '')})" if r.state == "elsewhere" else "")
            + f"</td><td>{'#' + str(r.last_completed) if r.last_completed is not None else '-'}</td>"
            f'<td class="muted">node {r.node}, pid {r.pid}</td></tr>'
            for r in s.ranks
        )
        rows += "".join(
            f'<tr class="no_trace"><td>rank {m}</td><td>left no trace</td><td>-</td><td></td></tr>' for m in s.missing
        )
        parts.append(
            f'<p class="collective"><b>Collective:</b> {escape(s.headline())}</p>'
            '<table class="collectives"><tr><th>rank</th><th>in that collective</th><th>last completed</th>'
            f"<th>where</th></tr>{rows}</table>"
        )
    parts += [f'<p class="group-error">{escape(e)}</p>' for e in summary.errors]
    if not parts:
        parts.append(f"<p>{escape(summary.lines()[0])}</p>")
    return '<div id="collectives">' + "".join(parts) + "</div>"
