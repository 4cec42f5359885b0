"""Blocks -> one self-contained HTML page (inline CSS, plots embedded as base64 PNG)."""
import base64
import html
import re

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0;color:#212529;background:#f1f3f5}
main{max-width:1100px;margin:0 auto;padding:18px 28px;background:#fff}
h1{font-size:22px;border-bottom:3px solid #d9480f;padding-bottom:6px}
h2{font-size:17px;margin-top:26px;border-bottom:1px solid #dee2e6;padding-bottom:3px}
table{border-collapse:collapse;margin:8px 0;font-size:12.5px}
th,td{border:1px solid #dee2e6;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f8f9fa}
td.go{background:#d3f9d8;font-weight:600}td.no-go{background:#ffe3e3;font-weight:600}
td.not{background:#fff3bf}
pre{background:#f8f9fa;border:1px solid #dee2e6;padding:8px;overflow-x:auto;font-size:11.5px}
code{background:#f1f3f5;padding:0 3px}
.plots{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:6px 0}figcaption{font-size:12px;color:#495057}
pre.glance{background:#f8f9fa;font-size:12.5px;line-height:1.5;white-space:pre-wrap}
.banner{background:#fff4e6;border-left:4px solid #d9480f;padding:6px 10px}
"""


def _inline(text):
    escaped = html.escape(text)
    escaped = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", escaped)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", escaped)


def _cell_class(text):
    return {"GO": "go", "NO-GO": "no-go", "NOT MEASURED": "not"}.get(str(text), "")


def render(blocks, images, report):
    body, pending_plots = [], []

    def flush():
        if pending_plots:
            body.append('<div class="plots">' + "".join(pending_plots) + "</div>")
            pending_plots.clear()

    for block in blocks:
        kind = block[0]
        if kind != "plot":
            flush()
        if kind in ("h1", "h2", "h3"):
            body.append(f"<{kind}>{_inline(block[1])}</{kind}>")
        elif kind == "p":
            css = ' class="banner"' if block[1].startswith("**Timings are host timings") else ""
            body.append(f"<p{css}>{_inline(block[1])}</p>")
        elif kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in block[1])
            rows = "".join("<tr>" + "".join(f'<td class="{_cell_class(c)}">{_inline(str(c))}</td>' for c in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><tr>{head}</tr>{rows}</table>")
        elif kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in block[1]) + "</ul>")
        elif kind == "code-plain":
            body.append(f'<pre class="glance">{html.escape(block[1])}</pre>')
        elif kind == "code":
            body.append(f"<details><summary>traceback</summary><pre>{html.escape(block[1])}</pre></details>")
        elif kind == "plot" and block[1] in images:
            data = base64.b64encode(images[block[1]]).decode()
            pending_plots.append(f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{data}">'
                                 f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    flush()
    title = html.escape(f"neuron-migrate: {report.get('workload')}")
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
            f"<style>{STYLE}</style></head><body><main>{''.join(body)}</main></body></html>\n")
