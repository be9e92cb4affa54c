"""`gym-audit --html FILE`: one self-contained page (inline CSS and SVG, no scripts, no network)
with the verdict, the first cause, a per-replica timeline of phases, a GPU map per node, each judge's
requests and latency (from its gateway) and the training evidence (loss per step, refreshes).

Everything from the run directory is untrusted and goes through html.escape."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from audit._doorbell import describe as describe_doorbell
from audit._filesystem import describe as describe_filesystem
from audit._model import AuditResult, Cause, Finding, NodeMap, PhaseSpan, RankSummary
from audit._report_charts import bar_chart, line_chart
from audit._report_collectives import collectives_html
from audit._report_ledger import ledger_html
from audit._report_text import cause_headline
from audit._sanitize import clean_text
from audit.stacks import NO_LOCKS
from schemas import Phase, timefmt

__all__ = ["CSS", "FIRST_CAUSE", "OTHER_PHASE", "PHASE_COLORS", "REACTION", "ROLE_COLORS", "render", "run_span"]

PHASE_COLORS: dict[str, str] = {  # keyed by Phase, looked up by the recorded phase name
    Phase.RENDEZVOUS: "#4e79a7",
    Phase.PLAN_AGREEMENT: "#a0cbe8",
    Phase.DATA_CHECK: "#e15759",
    Phase.DEVICES: "#f28e2b",
    Phase.PREFLIGHT: "#e8a33d",
    Phase.PLACEMENT: "#ffbe7d",
    Phase.JUDGES_START: "#b07aa1",
    Phase.JUDGE_HEALTH: "#d4a6c8",
    Phase.RAY_START: "#59a14f",
    Phase.READINESS: "#8cd17d",
    Phase.REGISTRY: "#b6992d",
    Phase.CANARIES: "#f1ce63",
    Phase.DRIVER: "#499894",
    Phase.COMPLETE: "#86bcb6",
    Phase.ACKNOWLEDGE: "#9d7660",
    Phase.TEARDOWN: "#bab0ac",
}
OTHER_PHASE = "#79706e"
# Darker, saturated hues no phase uses: a GPU's role never reads as a phase of the timeline.
ROLE_COLORS = {
    "trainer": "#1a237e",
    "rollout": "#004d40",
    "judge": "#880e4f",
    "unused": "#e8e8e8",
    "ray": "#bf360c",
}
FIRST_CAUSE = "#c62828"
REACTION = "#555"

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:24px 0 8px;border-bottom:1px solid #ddd}
.verdict{display:inline-block;padding:4px 12px;border-radius:4px;color:#fff;font-weight:700}
.verdict.pass{background:#2e7d32}.verdict.fail{background:#c62828}
.muted{color:#666} code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre.excerpt{background:#1e1e1e;color:#eee;padding:8px;overflow:auto;max-height:320px}
table{border-collapse:collapse}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
tr.error td.sev{color:#c62828;font-weight:700} tr.warning td.sev{color:#e65100} tr.info td.sev{color:#666}
.nodes{display:flex;flex-direction:column;gap:10px}
.node{display:flex;align-items:center;gap:8px}
.node-label{width:220px;font-size:12px}
.gpus{display:grid;grid-auto-flow:column;grid-auto-columns:78px;gap:4px}
.judge-charts{display:flex;flex-wrap:wrap;gap:12px;margin:8px 0} svg.chart{background:#fafafa;border:1px solid #eee}
.gpu{height:46px;border-radius:4px;color:#fff;font-size:11px;display:flex;flex-direction:column;
     align-items:center;justify-content:center;text-align:center;overflow:hidden;
     border:1px solid rgba(0,0,0,.2)}
.gpu.gpu-unused{color:#444}
.gpu .dev{font-weight:700}
.legend span{display:inline-block;margin-right:12px} .swatch{display:inline-block;width:12px;height:12px;
     vertical-align:middle;margin-right:4px;border-radius:2px}
svg text{font-family:system-ui,sans-serif}
svg.timeline{width:100%;height:auto;max-width:100%;display:block}
body{max-width:100%;overflow-wrap:anywhere} .gpus{max-width:100%;overflow-x:auto}
#first-cause{border-left:6px solid #c62828;padding-left:10px;background:#fff5f5}
#stacks .frames{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
#stacks tr.odd td{background:#ffebee;font-weight:600}
#stacks tr.odd td.who::before{content:"odd one out: ";color:#c62828}
"""


def _e(s: object) -> str:
    return html.escape(clean_text(str(s)), quote=True)


def _cause_html(c: Cause) -> str:
    return f"<b>{_e(cause_headline(c))}</b>: {_e(c.cause)}"


def _clamp(v: float, lo: float, hi: float) -> float:
    return lo if not math.isfinite(v) else min(max(v, lo), max(lo, hi))


def _is_first(c: Cause | None, rank: int, phase: str) -> bool:
    return c is not None and c.rank == rank and (c.phase is None or c.phase == phase)


def run_span(ranks: tuple[RankSummary, ...]) -> tuple[float | None, float | None]:
    """(start, total seconds) of the run from the replicas' phase timelines."""
    starts = [p.started_at for r in ranks for p in r.phases if math.isfinite(p.started_at)]
    ends = [p.ended_at for r in ranks for p in r.phases if p.ended_at is not None and math.isfinite(p.ended_at)]
    if not starts:
        return None, None
    t0 = min(starts)
    return t0, (max(ends) - t0 if ends else None)


@dataclass(frozen=True)
class _Frame:
    """The timeline's geometry: where a wall time falls, and where each replica's row is."""

    t0: float
    t1: float
    span: float  # seconds the chart's width stands for (t1 - t0, or 1 for a degenerate timeline)
    label_w: int = 150
    chart_w: int = 900
    row_h: int = 30
    top: int = 24

    def x(self, t: float) -> float:
        """Where ``t`` falls, kept inside the chart."""
        return _clamp(
            self.label_w + self.chart_w * (t - self.t0) / self.span, self.label_w, self.label_w + self.chart_w
        )

    @property
    def right(self) -> int:
        return self.label_w + self.chart_w


def _timeline(ranks: tuple[RankSummary, ...], causes: list[Cause], first: Cause | None = None) -> str:
    spans = [(r.rank, p) for r in ranks for p in r.phases]
    if not spans:
        return '<p class="muted" id="timeline-empty">No phase timeline was recorded.</p>'
    times = [p.started_at for _, p in spans] + [p.ended_at for _, p in spans if p.ended_at is not None]
    times += [c.wall_time for c in causes if c.wall_time is not None]
    t0, t1 = min(times), max(times)
    span = t1 - t0
    if not math.isfinite(span) or span <= 0:  # hostile or single-instant timelines still draw
        span = 1.0
    frame = _Frame(t0, t1, span)
    rows = [r for r in ranks if r.phases] + [r for r in ranks if not r.phases]
    height = frame.top + frame.row_h * len(rows) + 10
    # A viewBox and CSS width 100%: the chart scales to the page instead of a fixed pixel width.
    out = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.right + 20} {height}" '
        f'preserveAspectRatio="xMinYMin meet" role="img" aria-label="per-replica phase timeline">'
    ]
    out += _time_axis(frame, height)
    for row, r in enumerate(rows):
        out += _replica_row(frame, frame.top + row * frame.row_h, r, causes, first)
    out.append("</svg>")
    legend = "".join(
        f'<span><i class="swatch" style="background:{color}"></i>{_e(name)}</span>'
        for name, color in PHASE_COLORS.items()
    )
    note = (
        '<p class="muted">Times are each host\'s wall clock relative to the earliest phase start; '
        "clocks of different hosts may differ. The first cause is outlined in red; phases that failed "
        "in reaction to it are dashed and faded.</p>"
    )
    return "\n".join(out) + f'<div class="legend">{legend}</div>{note}'


def _time_axis(frame: _Frame, height: int) -> list[str]:
    out = []
    for i in range(5):
        x = frame.label_w + frame.chart_w * i / 4
        out.append(f'<line x1="{x:.1f}" y1="{frame.top - 4}" x2="{x:.1f}" y2="{height - 6}" stroke="#eee"/>')
        out.append(
            f'<text x="{x:.1f}" y="{frame.top - 8}" font-size="10" fill="#666" text-anchor="middle">'
            f"+{timefmt.seconds(frame.span * i / 4)}s</text>"
        )
    return out


def _replica_row(frame: _Frame, y: int, r: RankSummary, causes: list[Cause], first: Cause | None) -> list[str]:
    """One replica's row: its label, its phases, and a marker where each of its failures was recorded."""
    state = r.state or "no record"
    out = [f'<g class="replica" data-rank="{r.rank}">']
    out.append(f'<text x="4" y="{y + 19}" font-size="12">rank {r.rank} · {_e(state)}</text>')
    if not r.phases:
        out.append(f'<text x="{frame.label_w}" y="{y + 19}" font-size="11" fill="#999">no phases recorded</text>')
    failed_spans = [p for p in r.phases if p.outcome == "failed"]
    for p in r.phases:
        root = p.outcome == "failed" and _is_first(first, r.rank, p.phase) and p is failed_spans[-1]
        out += _phase_bar(frame, y, r.rank, p, root)
    for c in causes:
        if c.rank == r.rank and c.wall_time is not None:
            x = frame.x(c.wall_time)
            is_first = c is first
            fill = FIRST_CAUSE if is_first else REACTION
            cls = "failure-marker first-cause-marker" if is_first else "failure-marker"
            out.append(
                f'<path class="{cls}" d="M{x:.1f},{y + 2} l5,-6 h-10 z" fill="{fill}">'
                f"<title>{_e(c.kind)}: {_e(c.cause)}</title></path>"
            )
    out.append("</g>")
    return out


def _phase_bar(frame: _Frame, y: int, rank: int, p: PhaseSpan, root: bool) -> list[str]:
    """One phase as a bar: the root cause outlined and labelled, reactions to it dashed and faded."""
    end = p.ended_at if p.ended_at is not None else frame.t1
    x = frame.x(p.started_at)
    # The root cause stays visible however short it was; reactions are drawn quietly.
    w = _clamp(frame.chart_w * (end - p.started_at) / frame.span, 8.0 if root else 2.0, frame.right - x + 2)
    color = PHASE_COLORS.get(p.phase, OTHER_PHASE)
    if root:
        stroke = f' stroke="{FIRST_CAUSE}" stroke-width="4"'
    elif p.outcome == "failed":
        stroke = f' stroke="{REACTION}" stroke-width="1" stroke-dasharray="2 2" fill-opacity="0.45"'
    else:
        stroke = ""
    dash = ' stroke-dasharray="4 2" stroke="#333"' if p.outcome == "running" else ""
    dur = f"{timefmt.seconds(end - p.started_at, 2)}s" + (" (still running)" if p.ended_at is None else "")
    cls = f"phase phase-{_e(p.outcome)}" + (" first-cause" if root else "")
    out = [
        f'<rect class="{cls}" data-phase="{_e(p.phase)}" '
        f'x="{x:.1f}" y="{y + 4}" '
        f'width="{w:.1f}" height="{frame.row_h - 8}" fill="{color}"{stroke}{dash}>'
        f"<title>rank {rank} {_e(p.phase)}: {_e(p.outcome)}, {dur} {_e(p.detail)}</title></rect>"
    ]
    if root:
        lx = min(x + w + 4, frame.right - 60)
        out.append(
            f'<text class="first-cause-label" x="{lx:.1f}" y="{y + 19}" font-size="11" '
            f'font-weight="700" fill="{FIRST_CAUSE}">first cause</text>'
        )
    if w > 9 * len(p.phase) * 0.62:
        out.append(f'<text x="{x + 3:.1f}" y="{y + 19}" font-size="10" fill="#fff">{_e(p.phase)}</text>')
    return out


def _gpu_map(maps: tuple[NodeMap, ...]) -> str:
    if not maps:
        return '<p class="muted" id="gpu-map-empty">No placement was recorded or planned.</p>'
    out = ['<div class="nodes">']
    for m in maps:
        tags = []
        if m.is_head:
            tags.append("Ray head")
        if m.is_driver_node:
            tags.append("driver")
        owner = f"rank {m.rank}" if m.rank is not None else "no rank"
        out.append(f'<div class="node" data-node="{m.node_index}">')
        out.append(
            f'<div class="node-label"><b>node {m.node_index}</b> · {_e(owner)}<br>'
            f'<span class="muted">{_e(m.address or "no address")} · from {_e(m.source)}'
            f"{' · ' + _e(', '.join(tags)) if tags else ''}</span></div>"
        )
        out.append('<div class="gpus">')
        for c in m.cells:
            out.append(
                f'<div class="gpu gpu-{_e(c.role)}" data-device="{c.device}" data-role="{_e(c.role)}" '
                f'style="background:{ROLE_COLORS.get(c.role, "#999")}" title="GPU {c.device}: {_e(c.label)}">'
                f'<span class="dev">GPU {c.device}</span><span class="role">{_e(c.label)}</span></div>'
            )
        out.append("</div></div>")
    out.append("</div>")
    legend = "".join(
        f'<span><i class="swatch" style="background:{ROLE_COLORS[r]}"></i>{r}</span>'
        for r in ("trainer", "rollout", "judge", "unused")
    )
    return "\n".join(out) + f'<div class="legend">{legend}</div>'


def _stacks_html(result: AuditResult) -> str:
    """The stacks every node kept, grouped across ranks (innermost frames first), the odd one out
    highlighted; each process's main-thread frames behind a disclosure (no script needed)."""
    s = result.stacks
    if s is None:
        return ""
    head, *_ = s.lines()
    rows = []
    for g in s.groups:
        frames = "<br>".join(
            f'{_e(fn)} <span class="muted">({_e(f)}:{line})</span>' for fn, f, line in g.members[0].frames[:8]
        )
        pids = ", ".join(f"rank {p.rank} pid {p.pid}" for p in g.members[:12])
        others = g.members[0].others
        threads = f"<br>threads: {_e(', '.join(t.where() for t in others))}" if others else ""
        rows.append(
            f'<tr class="{"odd" if g.odd else "group"}"><td class="who">{_e(g.who())}</td>'
            f"<td><b>{_e(g.shown())}</b>{threads}<details><summary>frames</summary>"
            f'<div class="frames">{frames}</div></details></td><td class="muted">{_e(pids)}</td></tr>'
        )
    without = "".join(f"<li>rank {p.rank} {_e(p.role)} pid {p.pid}: {_e(p.problem or '')}</li>" for p in s.without[:20])
    notes = "".join(f"<li>{_e(n)}</li>" for n in s.notes)
    waits = s.waiting()
    waiting = "".join(f"<li>{_e(w)}</li>" for w in [*waits, NO_LOCKS]) if waits else ""
    return (
        f"<p>{_e(head)}:</p>"
        '<table id="stacks"><tr><th>processes</th><th>where (innermost frames)</th><th>which</th></tr>'
        + "".join(rows)
        + "</table>"
        + (f'<ul id="stacks-waiting">{waiting}</ul>' if waiting else "")
        + (f'<ul id="stacks-without">{without}</ul>' if without else "")
        + (f'<ul id="stacks-notes">{notes}</ul>' if notes else "")
    )


def _when(result: AuditResult) -> str:
    start, total = run_span(result.ranks)
    began = f'<span id="run-start">{_e(timefmt.iso_ms(start))}</span>' if start is not None else "unknown"
    took = f'<span id="run-duration">{timefmt.seconds(total)} s</span>' if total is not None else "unknown"
    return f"Started {began}; total duration {took}."


def _ms(d: object) -> str:
    spread = d if isinstance(d, dict) else {}
    shown = [f"{k} {spread[k]:g}" for k in ("p50", "p90", "p99") if isinstance(spread.get(k), int | float)]
    return (", ".join(shown) + " ms") if shown else "none"


def _judges_html(result: AuditResult) -> list[str]:
    """Per judge, from its gateway's log: a table of what it served, requests per minute and the
    median latency over the run."""
    gateways = result.judge_gateways or {}
    if not gateways:
        return []
    parts = ['<h2>Judges</h2><section id="judges">']
    parts.append(
        '<table id="judge-stats"><tr><th>judge</th><th>requests</th><th>replies</th><th>canary</th>'
        "<th>errors</th><th>latency</th><th>queue wait</th></tr>"
    )
    for name, g in sorted(gateways.items()):
        errors = ", ".join(f"{k} {v}" for k, v in (g.get("errors") or {}).items()) or "none"
        parts.append(
            f'<tr data-judge="{_e(name)}"><td><code>{_e(name)}</code></td><td>{_e(g.get("requests"))}</td>'
            f"<td>{_e(g.get('replies'))}</td><td>{_e(g.get('canary'))}</td><td>{_e(errors)}</td>"
            f"<td>{_e(_ms(g.get('latency_ms')))}</td><td>{_e(_ms(g.get('queue_ms')))}</td></tr>"
        )
    parts.append("</table>")
    for name, g in sorted(gateways.items()):
        series = g.get("series") or {}
        bucket = series.get("bucket_s") or 60
        per = "minute" if bucket == 60 else f"{bucket:g} s"
        since = f" since {series.get('start')}" if series.get("start") else ""
        requests = [float(x) for x in series.get("requests") or []]
        latency = [(float(i), y) for i, y in enumerate(series.get("latency_p50_ms") or [])]
        parts.append(f'<div class="judge-charts" data-judge="{_e(name)}">')
        parts.append(
            bar_chart(
                requests,
                title=f"judge {name}: requests per {per}",
                chart_id=f"judge-{name}-requests",
                x_label=f"{per}s{since}",
                y_label="requests",
            )
        )
        parts.append(
            line_chart(
                latency,
                title=f"judge {name}: median latency per {per} (ms)",
                chart_id=f"judge-{name}-latency",
                x_label=f"{per}s{since}",
                y_label="ms",
            )
        )
        parts.append("</div>")
    parts.append("</section>")
    return parts


def _training_html(result: AuditResult) -> list[str]:
    """The evidence of training the audit read: steps, loss per step, policy refreshes."""
    t = result.training
    if not t:
        return []
    parts = ['<h2>Training</h2><section id="training">']
    steps, refreshes = t.get("optimizer_steps"), t.get("policy_refreshes")
    source = t.get("source")
    parts.append(
        f'<p id="training-summary">Evidence: <b>{_e(source)}</b> — {_e("unknown" if steps is None else steps)} '
        f"optimizer step(s), {_e('unknown' if refreshes is None else refreshes)} policy refresh(es).</p>"
    )
    series = t.get("series")
    if series:
        points = [(float(x), float(y)) for x, y in series.get("points") or []]
        marks = [float(x) for x in series.get("refresh_at") or []]
        parts.append(
            line_chart(
                points,
                title=f"loss per optimizer step ({series.get('source')})",
                chart_id="training-loss",
                x_label="step",
                y_label="loss",
                marks=marks,
                mark_label="policy refresh",
            )
        )
    else:
        parts.append('<p class="muted">No loss per step was recorded where the audit reads it.</p>')
    parts.append("</section>")
    return parts


def render(result: AuditResult) -> str:
    parts = _page_head(result) + _first_cause_html(result)
    if result.cascade:
        parts.append('<h2>Cascade</h2><ol id="cascade">')
        parts += [f"<li>{_cause_html(c)}</li>" for c in result.cascade]
        parts.append("</ol>")
    causes = ([result.first_cause] if result.first_cause else []) + list(result.cascade)
    parts.append('<h2>Timeline</h2><section id="timeline">')
    parts.append(_timeline(result.ranks, causes, result.first_cause))
    parts.append('</section><h2>GPU map</h2><section id="gpu-map">')
    parts.append(_gpu_map(result.gpu_maps))
    parts.append("</section>")
    parts += _judges_html(result) + _training_html(result)
    parts.append(ledger_html(result.ledger.to_json() if result.ledger is not None else None))
    parts += _findings_html(result) + _replicas_html(result) + _closing_html(result)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _page_head(result: AuditResult) -> list[str]:
    """The document's head and the verdict line: outcome, counts of findings, when, fingerprint."""
    counts = {s: sum(1 for f in result.findings if f.severity == s) for s in ("error", "warning", "info")}
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network: the policy forbids every fetch, so the page is provably self-contained.
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; "
        'img-src data:">',
        f"<title>gym-audit: {_e(result.verdict)} — {_e(result.run_dir)}</title>",
        f"<style>{CSS}</style></head><body>",
        f'<h1>gym-audit <span id="verdict" class="verdict {_e(result.verdict)}">'
        f"{_e(result.verdict.upper())}</span></h1>",
        f'<p>Run <code>{_e(result.run_dir)}</code> — outcome <b id="outcome">{_e(result.outcome)}</b> — '
        f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['info']} info."
        f"<br>{_when(result)}"
        f'<br><span class="muted">fingerprint {_e(result.fingerprint or "unknown")}</span></p>',
    ]


def _first_cause_html(result: AuditResult) -> list[str]:
    """The first cause and what explains it: who reported it, unfit nodes, the binding, the stacks, logs."""
    fc = result.first_cause
    if fc is None:
        return []
    parts = ['<h2>First cause</h2><div id="first-cause">']
    parts.append(f"<p>{_cause_html(fc)}</p>")
    if fc.reported_by is not None:
        parts.append(f"<p>No record from rank {fc.rank}; reported by rank {fc.reported_by}.</p>")
    if result.unfit:
        parts.append(f'<p id="unfit">Unfit node(s): <code>{_e(str(result.unfit.get("exclude")))}</code></p>')
    if fc.binding is not None:
        judge = f" (judge <code>{_e(fc.judge)}</code>)" if fc.judge else ""
        parts.append(f'<p id="binding">Binding <code>{_e(fc.binding)}</code>{judge}.</p>')
    parts.append(collectives_html(result.collectives))
    parts.append(_stacks_html(result))
    if fc.log:
        parts.append(f"<p>Log <code>{_e(fc.log)}</code>:</p>")
        parts.append(f'<pre class="excerpt">{_e(chr(10).join(fc.excerpt)) or "(empty or unreadable)"}</pre>')
    if fc.ray_logs:
        parts.append(
            f"<p>Ray's own logs of rank {fc.rank}: " + ", ".join(f"<code>{_e(x)}</code>" for x in fc.ray_logs) + "</p>"
        )
    parts.append("</div>")
    return parts


def _findings_html(result: AuditResult) -> list[str]:
    if not result.findings:
        return ["<h2>Findings</h2>", '<p id="no-findings">No findings.</p>']
    head = '<table id="findings"><tr><th>severity</th><th>code</th><th>file</th><th>rank</th><th>message</th></tr>'
    return ["<h2>Findings</h2>", head, *(_finding_tr(f) for f in result.findings), "</table>"]


def _finding_tr(f: Finding) -> str:
    path = f" {f.json_path}" if f.json_path else ""
    return (
        f'<tr class="{_e(f.severity)}"><td class="sev">{_e(f.severity)}</td>'
        f"<td><code>{_e(f.code)}</code></td>"
        f"<td><code>{_e((f.file or '') + path)}</code></td><td>{'' if f.rank is None else f.rank}</td>"
        f"<td>{_e(f.message)}</td></tr>"
    )


def _replicas_html(result: AuditResult) -> list[str]:
    head = (
        '<h2>Replicas</h2><table id="ranks"><tr><th>rank</th><th>node</th><th>address</th>'
        "<th>host</th><th>state</th><th>incarnation</th></tr>"
    )
    return [head, *(_rank_tr(r) for r in result.ranks), "</table>"]


def _rank_tr(r: RankSummary) -> str:
    return (
        f"<tr><td>{r.rank}</td><td>{'' if r.node_index is None else r.node_index}</td>"
        f"<td>{_e(r.address or '')}</td><td>{_e(r.hostname or '')}</td><td>{_e(r.state or '')}</td>"
        f"<td><code>{_e(r.incarnation or '')}</code></td></tr>"
    )


def _closing_html(result: AuditResult) -> list[str]:
    """How the replicas coordinated (shared filesystem, doorbell), then the audit's notes."""
    parts = []
    coordination = [describe_filesystem(m) for m in result.filesystem]
    if result.doorbell is not None:
        coordination.append(describe_doorbell(result.doorbell))
    if coordination:
        parts.append(
            '<h2>Coordination</h2><ul id="coordination">' + "".join(f"<li>{_e(c)}</li>" for c in coordination) + "</ul>"
        )
    if result.notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{_e(n)}</li>" for n in result.notes) + "</ul>")
    return parts
