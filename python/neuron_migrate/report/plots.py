"""The report's plots as PNG bytes (matplotlib, Agg), each from report.json data only.
Each function returns None when the report has no data for it."""
import io

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"target": "#d9480f", "baseline": "#1c7ed6"}


def _png(figure):
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=90)
    plt.close(figure)
    return buffer.getvalue()


def _roles(report):
    return {"target": report.get("target"), "baseline": report.get("baseline")}


def _levels(report, role):
    """The role's deciding levels (Note [Deciding figures]): predicted for a simulated target."""
    from ..figures import speed_levels
    return speed_levels(report, role)


def _series_label(report, role, levels):
    source = levels[0]["source"] if levels else "measured"
    return f"{_roles(report)[role]} ({role}, {source})"


def _title(report, what):
    from ..figures import PREDICTED, source
    if source(report) == PREDICTED:
        return f"{what}: target predicted, baseline measured"
    return f"{what} (measured)"


def latency_distribution(report):
    series = [(role, level, _levels(report, role)) for role in ("target", "baseline")
              for level in _levels(report, role) if level["latencies_ms"]]
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    for role, level, levels in series:
        axes.hist(level["latencies_ms"], bins=20, alpha=0.55, color=COLOURS[role],
                  label=f"{_series_label(report, role, levels)}, concurrency {level['concurrency']}",
                  histtype="stepfilled" if level["concurrency"] == 1 else "step", linewidth=1.5)
    axes.set_xlabel("latency per request (ms)")
    axes.set_ylabel("requests")
    axes.set_title(_title(report, "Latency distribution"), fontsize=10)
    axes.legend(fontsize=7)
    return _png(figure)


def throughput_vs_concurrency(report):
    by_role = {role: [l for l in _levels(report, role) if l["tokens_per_s"] is not None]
               for role in ("target", "baseline")}
    if not any(by_role.values()):
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    for role, levels in by_role.items():
        if levels:
            axes.plot([l["concurrency"] for l in levels], [l["tokens_per_s"] for l in levels], marker="o",
                      color=COLOURS[role], label=_series_label(report, role, levels))
    axes.set_xticks(sorted({l["concurrency"] for levels in by_role.values() for l in levels}))
    axes.set_xlabel("concurrent requests")
    axes.set_ylabel("generated tokens / s")
    axes.set_title(_title(report, "Throughput against concurrency"), fontsize=10)
    axes.legend(fontsize=8)
    return _png(figure)


def predicted_vs_host(report):
    """Each request's predicted Trainium latency (device clock) against its host latency."""
    target = (report["sections"].get("speed") or {}).get("target") or {}
    levels = [level for level in target.get("levels") or [] if (level.get("predicted") or {}).get("latencies_ms")]
    if not levels:
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    markers = "os^Dv"
    for index, level in enumerate(levels):  # both lists follow the level's answered requests
        axes.scatter(level["latencies_ms"], level["predicted"]["latencies_ms"], s=18, color=COLOURS["target"],
                     marker=markers[index % len(markers)], label=f"concurrency {level['concurrency']}")
    values = [v for level in levels for v in level["latencies_ms"] + level["predicted"]["latencies_ms"]]
    low, high = min(values) * 0.8, max(values) * 1.25
    axes.plot([low, high], [low, high], color="#adb5bd", linewidth=0.8, label="predicted = host")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel(f"host latency on the simulated {report.get('target')} (ms)")
    axes.set_ylabel(f"predicted {target.get('platform')} latency (ms)")
    axes.set_title(target.get("predicted_label") or "predicted", fontsize=9)
    axes.legend(fontsize=7)
    return _png(figure)


def memory_timeline(report):
    samples = (report["sections"].get("memory") or {}).get("timeline") or []
    if len(samples) < 2:
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    times = [s["t"] for s in samples]
    axes.plot(times, [s["rss_bytes"] / 2**20 for s in samples], color="#495057", label="host RSS")
    device = [s["device_bytes"] for s in samples]
    if any(d for d in device if d):  # its own axis: device memory can be far below the host's
        device_axes = axes.twinx()
        device_axes.plot(times, [(d or 0) / 2**20 for d in device], color=COLOURS["target"])
        device_axes.set_ylabel(f"{report.get('target')} allocated (MiB)", color=COLOURS["target"])
        axes.plot([], [], color=COLOURS["target"], label=f"{report.get('target')} allocated (right axis)")
    previous = None
    for sample in samples:
        if sample["phase"] != previous:
            axes.axvline(sample["t"], color="#adb5bd", linewidth=0.6)
            axes.text(sample["t"], axes.get_ylim()[1] * 0.98, sample["phase"], rotation=90, fontsize=6,
                      va="top", color="#868e96", clip_on=True, in_layout=False)
            previous = sample["phase"]
    axes.set_xlabel("seconds since start")
    axes.set_ylabel("host RSS (MiB)")
    axes.set_title("Memory over time")
    axes.legend(fontsize=8, loc="lower right")
    return _png(figure)


def compiles_over_run(report):
    compiles = report["sections"].get("compiles") or {}
    graphs = compiles.get("graphs") or []
    if not graphs:
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    for name, colour in (("cold", COLOURS["target"]), ("warm", COLOURS["baseline"])):
        points = [g for g in graphs if g["pass"] == name]
        if points:
            axes.step([g["at_s"] for g in points], range(1, len(points) + 1), where="post", marker="o",
                      color=colour, label=f"{name} pass")
    axes.set_xlabel("seconds since the compile section started")
    axes.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    axes.set_ylabel("graphs compiled (cumulative)")
    axes.set_title(f"Compiles over the run (backend {compiles.get('backend')})")
    axes.legend(fontsize=8)
    return _png(figure)


def loss_curves(report):
    training = report["sections"].get("training") or {}
    if not (training.get("target") or {}).get("loss"):
        return None
    figure, axes = plt.subplots(figsize=(6, 3.2))
    for role in ("target", "baseline"):
        losses = (training.get(role) or {}).get("loss") or []
        axes.plot(range(1, len(losses) + 1), losses, marker=".", color=COLOURS[role],
                  label=f"{_roles(report)[role]} ({role})")
    restart = training.get("restart") or {}
    if restart.get("losses_after_restart"):
        start = restart["checkpoint_at"] + 1
        axes.plot(range(start, start + len(restart["losses_after_restart"])), restart["losses_after_restart"],
                  linestyle="none", marker="x", color="black", label="after restart from checkpoint")
    axes.set_xlabel("step")
    axes.set_ylabel("loss")
    axes.set_title("Training loss")
    axes.legend(fontsize=8)
    return _png(figure)


ALL = {"latency_distribution": latency_distribution, "throughput_vs_concurrency": throughput_vs_concurrency,
       "predicted_vs_host": predicted_vs_host,
       "memory_over_time": memory_timeline, "compiles_over_run": compiles_over_run, "loss_curves": loss_curves}
