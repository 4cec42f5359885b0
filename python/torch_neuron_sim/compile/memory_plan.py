"""The arena plan of a program (Note [Programs] in runtime/program.h): every planned buffer
gets a fixed offset in one arena, and buffers whose lifetimes do not overlap share bytes.

A buffer lives from the step that makes it (`first`) to the last step that reads it
(`last`), both inclusive. Steps are visited in order; at each step the buffers made there
are placed first (in the order given, each in the smallest free extent that holds it: best
fit; else at the arena's end), then the bytes of the buffers last read there are freed
(adjacent free extents merge). So a buffer made at the step where another is last read
never shares bytes with it: a kernel may read its inputs while it writes its output.

Sizes are rounded up to ALIGNMENT bytes (an empty buffer takes ALIGNMENT), so every offset
is a multiple of ALIGNMENT: the loader requires 16-byte aligned slots (Note [Program loader
checks]); 64 is a cache line.

Pure: no torch, no device; the lowering (lowering.py) says which values are planned."""
import dataclasses

ALIGNMENT = 64


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """A buffer to place: its bytes, and the steps that make it and last read it."""
    bytes: int
    first: int
    last: int


@dataclasses.dataclass(frozen=True)
class ArenaPlan:
    offsets: list  # per buffer, in the order given: its offset in the arena
    sizes: list    # per buffer: the bytes it holds there (its bytes, rounded up to ALIGNMENT)
    arena_bytes: int


def aligned(nbytes):
    """The bytes a buffer of `nbytes` holds in the arena."""
    return (max(nbytes, 1) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def plan(lifetimes):
    """The arena plan of `lifetimes` (a list of Lifetime): offsets, sizes and the arena's size."""
    count = len(lifetimes)
    offsets, sizes = [0] * count, [0] * count
    made_at, freed_at = {}, {}
    for index in sorted(range(count), key=lambda i: lifetimes[i].first):  # stable: ties in the order given
        made_at.setdefault(lifetimes[index].first, []).append(index)
    for index, lifetime in enumerate(lifetimes):
        freed_at.setdefault(lifetime.last, []).append(index)
    free = []  # (offset, size) of free extents
    arena_end = 0
    for step in sorted(set(made_at) | set(freed_at)):
        for index in made_at.get(step, ()):
            size = aligned(lifetimes[index].bytes)
            best = None
            for i, (_, extent) in enumerate(free):
                if extent >= size and (best is None or extent < free[best][1]):
                    best = i
            if best is None:
                offsets[index] = arena_end
                arena_end += size
            else:
                offset, extent = free.pop(best)
                offsets[index] = offset
                if extent > size:
                    free.append((offset + size, extent - size))
            sizes[index] = size
        for index in freed_at.get(step, ()):
            free.append((offsets[index], sizes[index]))
            free = _coalesce(free)
    return ArenaPlan(offsets, sizes, arena_end)


def _coalesce(extents):
    extents.sort()
    merged = []
    for offset, size in extents:
        if merged and merged[-1][0] + merged[-1][1] == offset:
            merged[-1] = (merged[-1][0], merged[-1][1] + size)
        else:
            merged.append((offset, size))
    return merged
