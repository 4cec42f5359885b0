"""Report rendering: report.json -> report.md (+ plots/*.png) and a self-contained report.html."""
import os

from . import document, html, markdown, plots
from .store import load


def render_folder(folder):
    """Writes report.md, plots/*.png and report.html from the folder's report.json; returns the paths."""
    report = load(folder)
    images = {}
    for name, function in plots.ALL.items():
        try:
            png = function(report)
        except Exception as error:  # a plot must not hide the report
            png = None
            report.setdefault("findings", []).append({"section": "report", "severity": "warning",
                                                      "message": f"plot {name} failed: {error}", "traceback": None})
        if png:
            images[name] = png
    os.makedirs(os.path.join(folder, "plots"), exist_ok=True)
    for name, png in images.items():
        with open(os.path.join(folder, "plots", name + ".png"), "wb") as handle:
            handle.write(png)
    blocks = document.build(report)
    paths = [os.path.join(folder, "report.json")]
    for filename, text in (("report.md", markdown.render(blocks, images)),
                           ("report.html", html.render(blocks, images, report))):
        path = os.path.join(folder, filename)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        paths.append(path)
    return paths
