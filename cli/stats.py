"""`statekit stats`: where a savepoint's bytes are (operators, states, subtasks, key groups, largest keys, skew)."""

# No `from __future__ import annotations`: see statekit_cli.app (typer's start-up cost).
from pathlib import Path
from typing import Optional

import typer

from statekit_cli.common import JSON, PATH, open_savepoint, out, progress
from statekit_cli.spark_state import BATCH, is_checkpoint


def stats(
    path: Path = PATH,
    top: int = typer.Option(0, "--top", min=0, help="List the N largest keys by serialized size (decodes the keys, "
                            "about 2 s per million Flink entries; default 0: none)."),
    parallelism: Optional[int] = typer.Option(None, "--parallelism", "-p", min=1,
                                              help="Also show the bytes each subtask would hold at this parallelism."),
    html: Optional[Path] = typer.Option(None, "--html", help="Write a self-contained HTML report (charts) here."),
    json: bool = JSON,
    batch: Optional[int] = BATCH,
) -> None:
    """Entries and bytes per operator, state, subtask and key group, the largest keys, and the skew at the
    current and a proposed --parallelism (from the files and key-group offsets; values are not decoded)."""
    from statekit.savepoint.stats import savepoint_stats
    from statekit_cli.render import dumps, emit_table, human_bytes

    if is_checkpoint(path):  # a Spark streaming checkpoint: entries and bytes per table and state partition
        from statekit_cli import spark_state

        return spark_state.stats(path, batch, json)

    sp = open_savepoint(path)
    with progress("measuring"):
        figures = savepoint_stats(sp, top=top)
    for o in figures.operators:  # a proposed parallelism outside an operator's range is refused up front
        if parallelism is not None and o.key_group_bytes is not None:
            o.subtask_bytes(parallelism)
    if html is not None:
        from statekit.savepoint.stats_html import render_html, write_report

        write_report(html, render_html(figures, parallelism=parallelism), savepoint=path)
    console = out()
    if json:
        console.print(dumps(figures.to_json(parallelism)), markup=False)
        return
    console.print(f"{figures.path}  {figures.format} savepoint  {human_bytes(figures.bytes)}", markup=False)
    ops = sorted(figures.operators, key=lambda o: -o.bytes)
    rows = []
    for o in ops:
        from statekit.savepoint.stats import skew

        per = o.subtask_bytes() if o.key_group_bytes is not None else [s.bytes for s in o.subtasks]
        at = (f"{skew(o.subtask_bytes(parallelism))}" if parallelism and o.key_group_bytes is not None else "-")
        rows.append([o.display_name, human_bytes(o.bytes), str(o.entries), str(len(o.subtasks)),
                     " / ".join(human_bytes(b) for b in per) or "-", str(skew(per)) if per else "-", at])
    emit_table(console, rows, ["operator", "bytes", "entries", "subtasks", "per subtask", "skew",
                               f"skew at p={parallelism}" if parallelism else "skew at -p"], title="operators",
               identity=("operator",))
    rows = [[o.display_name, s.name, s.kind, str(s.entries), human_bytes(s.bytes)] for o in ops for s in o.states]
    emit_table(console, rows, ["operator", "state", "kind", "entries", "bytes"], title="states",
               identity=("operator", "state"))
    rows = [[o.display_name, str(k), human_bytes(b), str(e)] for o in ops for k, b, e in o.hottest_key_groups(5)]
    if rows:
        emit_table(console, rows, ["operator", "key group", "bytes", "entries"], title="hottest key groups",
                   identity=("operator",))
    rows = [[o.display_name, dumps(k.key).replace("\n", "").replace("  ", ""), str(k.key_group), human_bytes(k.bytes),
             str(k.entries)] for o in ops for k in o.top_keys]
    if rows:
        emit_table(console, rows, ["operator", "key", "key group", "bytes", "entries"], title=f"largest keys (top {top})",
                   identity=("operator", "key"))


def register(app: typer.Typer) -> None:
    """Add the stats command to the app."""
    app.command("stats")(stats)
