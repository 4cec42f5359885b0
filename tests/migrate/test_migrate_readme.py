"""The README's neuron-migrate summary is what the current code prints for the demo workload,
numbers aside: `make docs` (scripts/update_docs.py) writes it from a run, and this test runs the
same workload and compares the shape of every line (a question answered differently, a line
added or gone, an answer that became "not available" or "not measured" fails here)."""
import os
import sys

from migrate_helpers import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "scripts"))
import update_docs  # noqa: E402

WORKLOAD = os.path.join(ROOT, "demo", "migrate", "workload.toml")


def test_readme_summary_has_the_shape_of_a_fresh_run(tmp_path):
    status, report = run(WORKLOAD, str(tmp_path / "report"), "--on", "neuron", "--baseline", "cpu")
    assert status in (0, 3), status
    from neuron_migrate.report.terminal import summary_lines
    with open(update_docs.README, encoding="utf-8") as handle:
        documented = update_docs.readme_summary(handle.read())
    fresh = summary_lines(report)
    assert update_docs.shape(documented) == update_docs.shape(fresh), (
        "README.md's neuron-migrate summary no longer matches what the code prints: run `make docs`\n"
        + "\n".join(fresh))


def test_shape_masks_numbers_and_keeps_words():
    lines = ["compiles?      4 graphs, 3 recompiles (backend neuron)", "verdict:       6 go, 1 not measured"]
    assert update_docs.shape(lines) == ["compiles?      # graphs, # recompiles (backend neuron)",
                                        "verdict: some not measured"]
    assert update_docs.shape(["cost?          0.9911 USD per 1M tokens"]) == ["cost?          # USD per #M tokens"]
