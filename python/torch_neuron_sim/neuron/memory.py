"""torch.neuron.memory: device memory statistics and the cache (shaped like torch.cuda.memory).

memory_stats() holds both key styles: the flat CUDA ones ("allocated_bytes.all.current"),
which scripts ported from CUDA and torch.accelerator read, and the nested ones of AWS's
torch.neuron ("allocated_bytes" -> {"current", "peak", "allocated", "freed"})."""
from .. import _C
from ._device import _index

__all__ = [
    "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_max_memory_allocated",
    "reset_accumulated_memory_stats", "memory_summary", "empty_cache", "mem_get_info",
]


def memory_stats(device=None):
    flat = dict(_C.memory_stats(_index(device)))
    stats = dict(flat)
    for kind in ("allocated_bytes", "reserved_bytes", "active_bytes"):
        stats[kind] = {
            "current": flat[f"{kind}.all.current"],
            "peak": flat[f"{kind}.all.peak"],
            "allocated": flat[f"{kind}.all.allocated"],
            "freed": flat[f"{kind}.all.freed"],
        }
    stats["num_tensor_frees"] = flat["allocation.all.freed"]
    stats["allocation_requests"] = flat["allocation.all.allocated"]
    return stats


def memory_allocated(device=None):
    return _C.memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device=None):
    return _C.memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device=None):
    return _C.memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return _C.memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    _C.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device=None):
    _C.reset_accumulated_memory_stats(_index(device))


def empty_cache():
    _C.empty_cache()


def mem_get_info(device=None):
    return tuple(_C.mem_get_info(_index(device)))


def _format_bytes(count):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(count) < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.2f} {unit}"
        count /= 1024


def memory_summary(device=None, abbreviated=False):
    """A readable table of memory_stats() for one device (as torch.cuda.memory_summary)."""
    index = _index(device)
    stats = _C.memory_stats(index)
    rows = [
        ("Allocated memory", "allocated_bytes", _format_bytes),
        ("Reserved memory", "reserved_bytes", _format_bytes),
        ("Active memory", "active_bytes", _format_bytes),
        ("Allocations", "allocation", str),
        ("Segments", "segment", str),
    ]
    if abbreviated:
        rows = rows[:2]
    width = 75
    lines = ["=" * width,
             f" neuron:{index} memory summary (simulated HBM budget {_format_bytes(stats['budget_bytes'])})",
             "-" * width,
             f" {'':<22}{'current':>12}{'peak':>12}{'allocated':>14}{'freed':>14}",
             "-" * width]
    for label, key, fmt in rows:
        values = [stats.get(f"{key}.all.{field}", 0) for field in ("current", "peak", "allocated", "freed")]
        lines.append(f" {label:<22}" + "".join(f"{fmt(v):>{w}}" for v, w in zip(values, (12, 12, 14, 14))))
    lines += ["-" * width, f" Out-of-memory errors: {stats['num_ooms']}", "=" * width]
    return "\n".join(lines) + "\n"
