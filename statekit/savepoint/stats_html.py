"""`stats --html`: one self-contained HTML page of a savepoint's figures, charts as inline SVG (no script, no network)."""

from __future__ import annotations

import html
from typing import Sequence

from statekit.savepoint.stats_figures import OperatorStats, SavepointStats, skew

__all__ = ["render_html"]

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}h2{font-size:17px;margin-top:32px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}svg{display:block;margin:6px 0}
.bar{fill:#4a7fb5}.bar2{fill:#d9822b}.axis{stroke:#888;stroke-width:1}text{font-size:11px;fill:#333}
"""


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _e(x: object) -> str:
    return html.escape(str(x))


def bars(labels: Sequence[str], values: Sequence[float], *, title: str, width: int = 720, css: str = "bar",
         fmt=_bytes) -> str:
    """A horizontal bar chart (one bar per label) as an SVG element."""
    if not values:
        return ""
    row, left = 18, 190
    top = max(values) or 1
    h = row * len(values) + 24
    parts = [f'<svg class="chart" role="img" aria-label="{_e(title)}" width="{width}" height="{h}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>']
    for i, (label, v) in enumerate(zip(labels, values)):
        y = 4 + i * row
        w = (width - left - 90) * (v / top)
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{_e(label)[:28]}</text>'
                     f'<rect class="{css}" x="{left}" y="{y}" width="{w:.1f}" height="{row - 4}"/>'
                     f'<text x="{left + w + 4:.1f}" y="{y + 12}">{_e(fmt(v))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def histogram(values: Sequence[float], *, title: str, width: int = 720, height: int = 160) -> str:
    """Key groups left to right, each a column as tall as its bytes, as an SVG element."""
    n = len(values)
    if not n:
        return ""
    top = max(values) or 1
    w = (width - 60) / n
    parts = [f'<svg class="chart" role="img" aria-label="{_e(title)}" width="{width}" height="{height + 30}" '
             f'xmlns="http://www.w3.org/2000/svg"><title>{_e(title)}</title>'
             f'<line class="axis" x1="50" y1="{height}" x2="{width - 10}" y2="{height}"/>'
             f'<text x="46" y="12" text-anchor="end">{_e(_bytes(top))}</text>'
             f'<text x="46" y="{height}" text-anchor="end">0</text>'
             f'<text x="50" y="{height + 16}">key group 0</text>'
             f'<text x="{width - 10}" y="{height + 16}" text-anchor="end">{n - 1}</text>']
    for i, v in enumerate(values):
        if v:
            bh = max((height - 14) * v / top, 1)
            parts.append(f'<rect class="bar" x="{50 + i * w:.2f}" y="{height - bh:.1f}" width="{max(w - 0.3, 0.4):.2f}" '
                         f'height="{bh:.1f}"><title>key group {i}: {_e(_bytes(v))}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], left: int = 1) -> str:
    th = "".join(f'<th class="{"l" if i < left else ""}">{_e(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i < left else ""}">{_e(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _operator(o: OperatorStats, parallelism: int | None) -> str:
    out = [f"<h2>{_e(o.display_name)} <small>({_e(o.uid_hash)})</small></h2>",
           f"<p>{_e(_bytes(o.bytes))}, {o.entries} entries, parallelism {o.parallelism} / max {o.max_parallelism}</p>"]
    if o.states:
        out.append(bars([s.name for s in o.states], [s.bytes for s in o.states], title=f"bytes per state of {o.display_name}"))
        out.append(_table(["state", "kind", "entries", "bytes"], [[s.name, s.kind, s.entries, s.bytes] for s in o.states],
                          left=2))
    if o.subtasks:
        out.append(bars([f"subtask {s.index}" for s in o.subtasks], [s.bytes for s in o.subtasks],
                        title=f"bytes per subtask of {o.display_name}"))
    if o.key_group_bytes is not None:
        out.append("<h3>Key groups</h3>")
        out.append(histogram(o.key_group_bytes.tolist(), title=f"bytes per key group of {o.display_name}"))
        for p in [o.parallelism] + ([parallelism] if parallelism and parallelism != o.parallelism else []):
            per = o.subtask_bytes(p)
            out.append(f"<h3>At parallelism {p} (skew {skew(per)})</h3>")
            out.append(bars([f"subtask {i}" for i in range(len(per))], per, css="bar2",
                            title=f"keyed bytes per subtask of {o.display_name} at parallelism {p}"))
        out.append("<h3>Hottest key groups</h3>")
        out.append(_table(["key group", "bytes", "entries"], o.hottest_key_groups(10)))
        if o.top_keys:
            out.append("<h3>Largest keys</h3>")
            out.append(_table(["key", "key group", "bytes", "entries"],
                              [[k.key, k.key_group, k.bytes, k.entries] for k in o.top_keys]))
    return "".join(out)


def render_html(stats: SavepointStats, *, parallelism: int | None = None) -> str:
    """The report page: every operator's bytes, states, subtasks, key-group histogram, skew and largest keys."""
    ops = sorted(stats.operators, key=lambda o: -o.bytes)
    body = [f"<h1>statekit stats: {_e(stats.path)}</h1>",
            f"<p>{_e(stats.format)} savepoint, {_e(_bytes(stats.bytes))} in {len(ops)} operator(s)</p>",
            bars([o.display_name for o in ops], [o.bytes for o in ops], title="bytes per operator")]
    body += [_operator(o, parallelism) for o in ops if o.bytes or o.entries]
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>statekit stats</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>")


def write_report(path, text: str, *, savepoint=None) -> None:
    """Write the report to `path` atomically (a temporary file beside it, then a rename); never inside `savepoint`."""
    import os
    import tempfile
    from pathlib import Path

    from statekit.errors import InvalidTargetError
    from statekit.format.storage import is_remote

    if is_remote(path):
        raise InvalidTargetError(f"--html {path}: the report is written to a local file; give a local file name.")
    target = Path(path)
    if target.is_dir():
        raise InvalidTargetError(f"--html {target} is a directory; give a file name such as report.html.")
    if savepoint is not None and not is_remote(savepoint) and Path(savepoint).resolve() in target.resolve().parents:
        raise InvalidTargetError(f"--html {target} lies inside the savepoint {savepoint}, which is never modified; "
                                 "write the report elsewhere.")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a report like any file the user writes, not mkstemp's 0600
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
