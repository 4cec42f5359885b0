"""Rich renderables for the terminal: the fit table and the run summary."""
from rich.table import Table

from .format import count, gib, number


def fit_table(result):
    table = Table(title=f"{result['architecture']} ({count(result['parameters'])} parameters, {result['dtype']}): "
                        f"batch {result['batch_per_core']} x {result['max_seq_len']} tokens per core, "
                        f"{result['headroom_reserved']:.0%} of HBM kept free")
    for column in ("platform", "LNC", "TP", "HBM/core", "params/core", "KV cache/core", "total/core", "fits"):
        table.add_column(column, justify="right" if column not in ("platform", "fits") else "left")
    for row in result["rows"]:
        verdict = "[green]yes" if row["fits"] else "[red]no" + (f" ({'; '.join(row['problems'])})" if row["problems"] else "")
        table.add_row(row["platform"], str(row["lnc"]), str(row["tp"]), gib(row["hbm_per_core_bytes"]),
                      gib(row["parameter_bytes_per_core"]), gib(row["cache_bytes_per_core"]),
                      gib(row["total_bytes_per_core"]), verdict)
    smallest = "; ".join(f"{key}: TP={value['tp'] if value['tp'] else 'none'}"
                         + ("" if value["among"] == "the listed degrees" else f" ({value['among']})")
                         for key, value in result["smallest_fitting_tp"].items())
    table.caption = f"smallest fitting TP degree: {smallest}\nKV cache: {result['cache_method']}"
    return table


def verdict_table(verdicts):
    table = Table(title="Stop conditions")
    for column in ("condition", "verdict", "measured", "limit"):
        table.add_column(column)
    for item in verdicts:
        colour = {"go": "green", "no-go": "red"}.get(item["verdict"], "yellow")
        table.add_row(item["condition"], f"[{colour}]{item['verdict']}", number(item.get("measured")),
                      f"{item['comparison']} {number(item['limit'])}")
    return table
