"""Is the output still right? The evaluated device against the baseline on the same inputs:
logits error of one forward pass and greedy-token agreement per request."""
import math
import traceback

import torch

from . import stopping
from .loading import forward_logits, generate


def worst(values):
    """The largest value, NaN when any is NaN (Python's max() keeps a NaN only when it comes
    first, and a NaN output is the worst error there is); None when there are none."""
    values = list(values)
    if not values:
        return None
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def outputs(loaded, device, requests, max_new_tokens):
    """Per request: float32 logits and greedy tokens (on the CPU), or the error it raised."""
    results = []
    for request in requests:
        stopping.check()
        ids = request.input_ids.to(device)
        try:
            with torch.no_grad():
                logits = forward_logits(loaded, ids).float().cpu()
                tokens = generate(loaded, ids, max_new_tokens).cpu()
            results.append({"label": request.label, "logits": logits, "tokens": tokens})
        except Exception as error:
            results.append({"label": request.label, "error": f"{type(error).__name__}: {error}",
                            "traceback": traceback.format_exc()})
    return results


def compare(target, baseline):
    """Per request and overall: logits max/mean absolute error, fraction of greedy tokens
    equal at the same position, rows identical, first diverging position."""
    rows, errors = [], []
    for t, b in zip(target, baseline):
        if "error" in t or "error" in b:
            errors.append({"label": t["label"], "target_error": t.get("error"), "baseline_error": b.get("error"),
                           "traceback": t.get("traceback") or b.get("traceback")})
            continue
        difference = (t["logits"] - b["logits"]).abs()
        equal = t["tokens"] == b["tokens"]
        first = [int((~row).nonzero()[0]) if not bool(row.all()) else None for row in equal]
        rows.append({"label": t["label"], "logits_max_abs_error": float(difference.max()),
                     "logits_mean_abs_error": float(difference.mean()),
                     "greedy_agreement": float(equal.float().mean()), "tokens": int(equal.numel()),
                     "identical_rows": int(equal.all(dim=1).sum()), "rows": int(equal.shape[0]),
                     "first_divergence": first})
    total_tokens = sum(r["tokens"] for r in rows)
    return {"requests": rows, "errors": errors,
            "logits_max_abs_error": worst(r["logits_max_abs_error"] for r in rows),
            "greedy_agreement": (sum(r["greedy_agreement"] * r["tokens"] for r in rows) / total_tokens
                                 if total_tokens else None)}
