"""The arena plan of compiled programs (compile/memory_plan.py): buffers whose lifetimes
overlap never share bytes, buffers whose lifetimes do not may, every slot is aligned, and the
free extent chosen is the smallest that holds the buffer (best fit)."""
import random

import pytest

from torch_neuron_sim.compile.memory_plan import ALIGNMENT, ArenaPlan, Lifetime, aligned, plan


def overlaps(a, b):
    return a.first <= b.last and b.first <= a.last


def check(lifetimes, arena):
    assert len(arena.offsets) == len(arena.sizes) == len(lifetimes)
    for i, lifetime in enumerate(lifetimes):
        assert arena.offsets[i] % ALIGNMENT == 0 and arena.sizes[i] == aligned(lifetime.bytes)
        assert arena.offsets[i] + arena.sizes[i] <= arena.arena_bytes
        for j in range(i):
            if overlaps(lifetime, lifetimes[j]):
                apart = (arena.offsets[i] + arena.sizes[i] <= arena.offsets[j] or
                         arena.offsets[j] + arena.sizes[j] <= arena.offsets[i])
                assert apart, (i, j, lifetime, lifetimes[j], arena)


def test_sizes_are_rounded_up_to_the_alignment_and_an_empty_buffer_takes_one_unit():
    assert [aligned(n) for n in (0, 1, 64, 65, 200)] == [64, 64, 64, 128, 256]
    assert plan([]) == ArenaPlan([], [], 0)


def test_a_chain_reuses_the_bytes_of_what_no_step_reads_any_more():
    # a -> b -> c -> d: each step reads the previous result only
    lifetimes = [Lifetime(256, 0, 1), Lifetime(256, 1, 2), Lifetime(256, 2, 3), Lifetime(256, 3, 3)]
    arena = plan(lifetimes)
    check(lifetimes, arena)
    assert arena.arena_bytes == 512  # two buffers at a time
    assert arena.offsets == [0, 256, 0, 256]


def test_a_buffer_made_where_another_is_last_read_does_not_share_its_bytes():
    lifetimes = [Lifetime(128, 0, 1), Lifetime(128, 1, 1)]
    arena = plan(lifetimes)
    assert arena.offsets == [0, 128] and arena.arena_bytes == 256


def test_the_smallest_free_extent_that_holds_the_buffer_is_chosen():
    # two extents freed at step 2 (256 and 128 bytes, kept apart by a live buffer): a
    # 100-byte buffer made at step 3 takes the 128-byte one
    lifetimes = [Lifetime(256, 0, 2), Lifetime(64, 0, 4), Lifetime(128, 1, 2), Lifetime(100, 3, 4)]
    arena = plan(lifetimes)
    check(lifetimes, arena)
    assert arena.offsets[:3] == [0, 256, 320]
    assert arena.offsets[3] == 320 and arena.arena_bytes == 448


def test_adjacent_free_extents_merge():
    lifetimes = [Lifetime(64, 0, 1), Lifetime(64, 0, 1), Lifetime(128, 2, 2)]
    arena = plan(lifetimes)
    assert arena.offsets == [0, 64, 0] and arena.arena_bytes == 128


@pytest.mark.parametrize("seed", range(20))
def test_random_lifetimes_never_share_bytes_while_both_live(seed):
    r = random.Random(seed)
    lifetimes = []
    for _ in range(r.randrange(1, 60)):
        first = r.randrange(30)
        lifetimes.append(Lifetime(r.choice([0, 1, 63, 64, 100, 4096, r.randrange(10000)]), first,
                                  first + r.randrange(8)))
    arena = plan(lifetimes)
    check(lifetimes, arena)
    assert arena.arena_bytes <= sum(aligned(lifetime.bytes) for lifetime in lifetimes)
    assert plan(lifetimes) == arena  # deterministic
