"""neuron-migrate: an interrupted run leaves what it measured so far readable."""
import json
import os
import signal
import subprocess
import sys
import time

from migrate_helpers import DATA, ROOT, write


def test_sigint_leaves_a_readable_partial_report(tmp_path):
    # a long speed section (many requests), interrupted once the quality section is written
    path = write(tmp_path, "w.toml", f"""
[workload]
name = "long"
[model]
factory = "{os.path.join(DATA, 'custom_models.py')}:filtered"
[inputs]
prompt_lengths = [6]
max_new_tokens = 4
vocab_limit = 64
[serve]
requests = 100000
[compile]
enabled = false
""")
    out = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), HF_HUB_OFFLINE="1")
    process = subprocess.Popen([sys.executable, "-m", "neuron_migrate", "run", path, "--out", str(out),
                                "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    report_path = out / "report.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        if report_path.exists() and '"quality"' in report_path.read_text():
            break
        time.sleep(0.2)
    assert process.poll() is None, process.stdout.read()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    report = json.loads(report_path.read_text())
    assert report["status"] == "interrupted" and report["finished"]
    assert "quality" in report["sections"] and "census" in report["sections"]
    assert "speed" not in report["sections"]  # interrupted inside it
    assert "memory" in report["sections"] and "verdict" in report["sections"]
    assert any("interrupted" in f["message"] for f in report["findings"])
    assert "status: **interrupted**" in (out / "report.md").read_text()


def test_first_signal_asks_to_stop_second_interrupts():
    import pytest
    from neuron_migrate import stopping
    stopping.reset()
    try:
        stopping.handle_signal(signal.SIGINT, None)
        assert stopping.requested()
        with pytest.raises(stopping.StopRequested):
            stopping.check()
        with pytest.raises(KeyboardInterrupt):
            stopping.handle_signal(signal.SIGINT, None)
    finally:
        stopping.reset()
