"""What does it cost? Running cost from measured throughput and the team's prices (the
workload's cost.price_per_hour, by device kind; nothing is built in), and one-time costs
(compile warm-up, engineering hours) kept apart. On the simulated device, also the cost from the
predicted Trainium throughput (the device clock), priced as `predict` prices a TP group
(Note [Predicted cost] in predict.py; the run uses one logical core: TP 1)."""
from . import platforms as hw
from .predict import cost_assumption, per_million_tokens, price_for


def _predicted(prices, speed):
    """The target's cost per 1M tokens at its best predicted throughput, or None."""
    levels = [level for level in speed.get("levels") or [] if (level.get("predicted") or {}).get("tokens_per_s")]
    platform, lnc = speed.get("platform"), speed.get("lnc")
    if not levels or platform not in hw.platforms():
        return None
    best = max(levels, key=lambda level: level["predicted"]["tokens_per_s"])
    price, key = price_for(prices, platform)
    tokens_per_s = best["predicted"]["tokens_per_s"]
    return {"label": speed.get("predicted_label"), "platform": platform, "lnc": lnc, "tp": 1,
            "tokens_per_s": tokens_per_s, "at_concurrency": best["concurrency"], "price_per_hour": price,
            "price_key": key, "per_million_tokens": per_million_tokens(price, platform, lnc, 1, tokens_per_s),
            "assumption": cost_assumption(platform, lnc, key, "the run's best predicted tokens/s on its one logical "
                                          "core (TP 1)") if price is not None else
            f"no price: the workload gives no price_per_hour.{platform} (or .neuron)"}


def estimate(workload, device_kinds, speed, training, compiles, simulated):
    prices = workload.cost.price_per_hour
    running, missing = {}, []
    for role, kind in device_kinds.items():
        price = prices.get(kind)
        if price is None:
            missing.append(kind)
        if price is None and not ((speed or {}).get(role) or {}).get("predicted_label"):
            continue
        entry = {"device": kind, "price_per_hour": price}
        levels = (speed or {}).get(role, {}).get("levels") or []
        if levels and price is not None:
            best = max(levels, key=lambda level: level["tokens_per_s"])
            if best["tokens_per_s"] > 0:
                entry["tokens_per_s"] = best["tokens_per_s"]
                entry["at_concurrency"] = best["concurrency"]
                entry["per_million_tokens"] = price / 3600 / best["tokens_per_s"] * 1e6
        predicted = _predicted(prices, (speed or {}).get(role) or {})
        if predicted:
            entry["predicted"] = predicted
        step = (training or {}).get(role, {}).get("time_per_step_s")
        if step and workload.cost.training_run_steps and price is not None:
            hours = step * workload.cost.training_run_steps / 3600
            entry["training_run_hours"] = hours
            entry["per_training_run"] = hours * price
        running[role] = entry
    one_time = {"engineering": workload.cost.engineering_hours * workload.cost.engineering_rate_per_hour,
                "engineering_hours": workload.cost.engineering_hours}
    warmup = (compiles or {}).get("warmup_cold_s")
    target_price = prices.get(device_kinds.get("target"))
    if warmup is not None and target_price is not None:
        one_time["compile_warmup"] = warmup / 3600 * target_price
    note = ("from host throughput of the simulated Neuron device: not a Trainium cost prediction"
            if simulated else "from measured throughput")
    return {"currency": workload.cost.currency, "running": running, "one_time": one_time,
            "prices_missing_for": missing, "note": note}
