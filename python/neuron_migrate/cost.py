"""What does it cost? Running cost from measured throughput and the team's prices (the
workload's cost.price_per_hour, by device kind; nothing is built in), and one-time costs
(compile warm-up, engineering hours) kept apart."""


def estimate(workload, device_kinds, speed, training, compiles, simulated):
    prices = workload.cost.price_per_hour
    running, missing = {}, []
    for role, kind in device_kinds.items():
        price = prices.get(kind)
        if price is None:
            missing.append(kind)
            continue
        entry = {"device": kind, "price_per_hour": price}
        levels = (speed or {}).get(role, {}).get("levels") or []
        if levels:
            best = max(levels, key=lambda level: level["tokens_per_s"])
            if best["tokens_per_s"] > 0:
                entry["tokens_per_s"] = best["tokens_per_s"]
                entry["at_concurrency"] = best["concurrency"]
                entry["per_million_tokens"] = price / 3600 / best["tokens_per_s"] * 1e6
        step = (training or {}).get(role, {}).get("time_per_step_s")
        if step and workload.cost.training_run_steps:
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
