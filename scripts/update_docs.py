"""`make docs`: the README's neuron-migrate summary and docs/neuron-migrate-report.png, made again
from a run of the demo workload (the folder `neuron-migrate run` wrote), so that they show what the
current code prints; with a second folder (a run on a measured device), also
docs/neuron-migrate-compare.svg: `neuron-migrate compare MEASURED NEURON` as the terminal shows it
(the decision of docs/neuron-migrate.md). tests/migrate/test_migrate_readme.py fails when the
README's summary no longer has the shape a fresh run prints (numbers aside).

    python scripts/update_docs.py build/neuron-migrate-demo [build/neuron-migrate-measured]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
PICTURE = os.path.join(ROOT, "docs", "neuron-migrate-report.png")
COMPARE_PICTURE = os.path.join(ROOT, "docs", "neuron-migrate-compare.svg")
BEGIN = "<!-- neuron-migrate summary: made by `make docs` (scripts/update_docs.py); do not edit by hand -->"
END = "<!-- end of the neuron-migrate summary -->"


def readme_summary(text):
    """The summary lines between the markers of README.md's text."""
    start, end = text.index(BEGIN), text.index(END)
    block = text[start + len(BEGIN):end].strip("\n").splitlines()
    if not block or block[0] != "```" or block[-1] != "```":
        raise ValueError("README.md: the neuron-migrate summary is not one ``` block between its markers")
    return block[1:-1]


def shape(lines):
    """Lines with their numbers masked, and the verdict line reduced to whether a question went
    unmeasured (its go/no-go counts follow the machine's speed against the workload's gates)."""
    masked = []
    for line in lines:
        if line.startswith("verdict:"):
            masked.append("verdict: " + ("some not measured" if "not measured" in line else "all measured"))
        else:
            masked.append(re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", line))
    return masked


def write_readme(lines):
    with open(README) as handle:
        text = handle.read()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    text = text[:start] + "\n```\n" + "\n".join(lines) + "\n```\n" + text[end:]
    with open(README, "w") as handle:
        handle.write(text)


def render_picture(html_path):
    """The HTML page, as headless Chromium renders it, cropped to its content."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("update_docs.py: chromium is needed for the report picture (make docs installs it)")
    with tempfile.TemporaryDirectory() as scratch:
        shot = os.path.join(scratch, "page.png")
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={scratch}", "--window-size=1150,2600", f"--screenshot={shot}",
                        "file://" + os.path.abspath(html_path)], check=True, capture_output=True, timeout=120)
        shutil.copyfile(shot, PICTURE)


def render_compare(measured, simulated):
    """`neuron-migrate compare MEASURED SIMULATED`, recorded by rich as the terminal shows it."""
    from rich.console import Console
    from neuron_migrate.compare import compare_command
    console = Console(record=True, width=150, force_terminal=True)
    compare_command(os.path.relpath(measured, ROOT), os.path.relpath(simulated, ROOT), console)
    console.save_svg(COMPARE_PICTURE, title="neuron-migrate compare")


def main():
    folder = sys.argv[1]
    if len(sys.argv) > 2:
        render_compare(sys.argv[2], folder)
        print(os.path.relpath(COMPARE_PICTURE, ROOT), "made from", sys.argv[2], "and", folder)
    with open(os.path.join(folder, "report.json")) as handle:
        report = json.load(handle)
    from neuron_migrate.report.terminal import summary_lines
    lines = summary_lines(report)
    write_readme(lines)
    render_picture(os.path.join(folder, "report.html"))
    print("README.md summary and", os.path.relpath(PICTURE, ROOT), "made from", folder)


if __name__ == "__main__":
    main()
