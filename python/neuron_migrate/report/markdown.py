"""Blocks -> Markdown (plots as links to plots/<name>.png beside it)."""


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(blocks, images):
    lines = []
    for block in blocks:
        kind = block[0]
        if kind in ("h1", "h2", "h3"):
            lines += ["#" * int(kind[1]) + " " + block[1], ""]
        elif kind == "p":
            lines += [block[1], ""]
        elif kind == "table":
            headers, rows = block[1], block[2]
            lines.append("| " + " | ".join(map(_cell, headers)) + " |")
            lines.append("|" + "---|" * len(headers))
            lines += ["| " + " | ".join(map(_cell, row)) + " |" for row in rows]
            lines.append("")
        elif kind == "list":
            lines += [f"- {item}" for item in block[1]] + [""]
        elif kind in ("code", "code-plain"):
            lines += ["```", block[1].rstrip(), "```", ""]
        elif kind == "plot" and block[1] in images:
            lines += [f"![{block[2]}](plots/{block[1]}.png)", ""]
    return "\n".join(lines)
