"""What does it cost? Running cost from each device's deciding throughput and the team's prices
(the workload's cost.price_per_hour, by device kind or Trainium platform; nothing is built in), and
one-time costs (compile warm-up, engineering hours) kept apart. On the simulated device the cost is
from the predicted Trainium throughput (the device clock), priced as `predict` prices a TP group
(Note [Predicted cost] in predict.py; the run uses one logical core: TP 1); its host throughput
is never priced (Note [Deciding figures], figures.py)."""
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


def _device_price(workload, kind):
    """(price of one device-hour, how it was taken) for a measured device kind, or (None, why)."""
    prices, instances = workload.cost.price_per_hour, workload.cost.instances
    if prices.get(kind) is None:
        return None, (f"no price for {kind}: add price_per_hour.{kind} = <price of one instance-hour> (or "
                      f"{{ per_hour = ..., instance = \"...\", devices = N }}) to [cost]")
    table = instances.get(kind)
    if table:
        return table["per_hour"] / table["devices"], (f"price_per_hour.{kind}: one {table['instance']} instance-hour "
                                                      f"({table['per_hour']:g}) / its {table['devices']} device(s): "
                                                      "the run measured one")
    return prices[kind], f"price_per_hour.{kind} as the price of one device-hour (an instance with one device)"


def estimate(workload, device_kinds, speed, training, compiles, simulated):
    """Running cost per role from its deciding throughput (Note [Deciding figures]): measured on a
    real device; predicted on the simulated one, whose host throughput is never priced."""
    running, missing, assumptions = {}, [], {}
    for role, kind in device_kinds.items():
        host_only = simulated and role == "target"
        price, how = (None, None) if host_only else _device_price(workload, kind)
        if price is None and not host_only:
            missing.append(kind)
            assumptions[role] = how
        role_speed = (speed or {}).get(role) or {}
        if price is None and not role_speed.get("predicted_label"):
            continue
        entry = {"device": kind, "price_per_hour": price, "figures": "predicted" if host_only else "measured"}
        levels = role_speed.get("levels") or []
        if host_only and levels:
            best = max(levels, key=lambda level: level["tokens_per_s"])
            entry["host"] = {"tokens_per_s": best["tokens_per_s"], "at_concurrency": best["concurrency"],
                             "label": "simulator host time: not priced"}
        elif levels and price is not None:
            best = max(levels, key=lambda level: level["tokens_per_s"])
            if best["tokens_per_s"] > 0:
                entry["tokens_per_s"] = best["tokens_per_s"]
                entry["at_concurrency"] = best["concurrency"]
                entry["per_million_tokens"] = price / 3600 / best["tokens_per_s"] * 1e6
                entry["assumption"] = how
        predicted = _predicted(workload.cost.price_per_hour, role_speed)
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
    target_price = None if simulated else _device_price(workload, device_kinds.get("target"))[0]
    if warmup is not None and target_price is not None:  # host compile time on the simulator: not priced
        one_time["compile_warmup"] = warmup / 3600 * target_price
    note = ("the target's cost is from its predicted Trainium throughput (the device clock); the simulator's "
            "host throughput is not priced" if simulated else "from measured throughput")
    return {"currency": workload.cost.currency, "running": running, "one_time": one_time,
            "prices_missing_for": missing, "missing_price_notes": assumptions, "note": note,
            "tokens_per_month": workload.cost.tokens_per_month}
