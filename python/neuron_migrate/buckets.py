"""Padding buckets: with static shapes (TorchNeuron compiles one graph per input shape), how
many graphs a set of bucket lengths leaves and what it costs in padded tokens."""


def optimal(lengths, count):
    """The `count` bucket lengths (taken from the observed lengths) with the fewest padded
    tokens, by dynamic programming over the sorted distinct lengths."""
    distinct = sorted(set(lengths))
    weights = {length: lengths.count(length) for length in distinct}
    count = min(count, len(distinct))
    n = len(distinct)
    infinity = float("inf")

    def span(i, j):  # lengths distinct[i..j] padded to distinct[j]
        return sum((distinct[j] - distinct[k]) * weights[distinct[k]] for k in range(i, j + 1))

    best = [[infinity] * (n + 1) for _ in range(count + 1)]
    choice = [[None] * (n + 1) for _ in range(count + 1)]
    best[0][0] = 0
    for used in range(1, count + 1):
        for end in range(1, n + 1):
            for start in range(used - 1, end):
                cost = best[used - 1][start] + span(start, end - 1)
                if cost < best[used][end]:
                    best[used][end], choice[used][end] = cost, start
    buckets, end = [], n
    for used in range(count, 0, -1):
        buckets.append(distinct[end - 1])
        end = choice[used][end]
    return sorted(buckets)


def powers_of_two(lengths):
    """The power of two at or above each length."""
    return sorted({1 << (length - 1).bit_length() for length in lengths})


def plans(shapes, max_buckets=4):
    """For observed (batch, length) shapes: graphs without padding, and per plan the bucket
    lengths, graphs (buckets used x batch sizes) and padded-token overhead."""
    lengths = [length for _, length in shapes]
    batches = sorted({batch for batch, _ in shapes})
    tokens = sum(b * l for b, l in shapes)
    result = {"distinct_shapes": len(set(shapes)), "lengths": sorted(set(lengths)), "batch_sizes": batches,
              "plans": []}
    candidates = [(f"{k} bucket{'s' if k > 1 else ''} (fewest padded tokens)", optimal(lengths, k))
                  for k in range(1, min(max_buckets, len(set(lengths))) + 1)]
    candidates.append(("powers of two", powers_of_two(lengths)))
    for name, buckets in candidates:
        used = sorted({min(b for b in buckets if b >= l) for l in lengths})
        padded = sum(b * (min(x for x in buckets if x >= l) - l) for b, l in shapes)
        result["plans"].append({"plan": name, "buckets": used, "graphs": len(used) * len(batches),
                                "padded_tokens": padded, "padded_fraction": padded / tokens if tokens else 0.0})
    return result
