import textwrap

import pytest
import torch

from conftest import run_python


def test_memory_stats_track_allocations():
    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    before = torch.neuron.memory_allocated()
    t = torch.empty(1024, 1024, device="neuron")  # 4 MiB
    assert torch.neuron.memory_allocated() - before == 4 * 2**20
    assert torch.neuron.max_memory_allocated() >= before + 4 * 2**20
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated()
    stats = torch.neuron.memory_stats()
    assert stats["allocation.all.allocated"] >= 1
    del t
    torch.neuron.synchronize()
    assert torch.neuron.memory_allocated() == before
    torch.neuron.empty_cache()
    free, total = torch.neuron.mem_get_info()
    assert total == 24 * 2**30 and free <= total
    assert torch.accelerator.memory_allocated(0) == torch.neuron.memory_allocated(0)


def test_cached_blocks_are_reused():
    torch.neuron.empty_cache()
    a = torch.empty(1000, device="neuron")
    ptr = a.data_ptr()
    del a
    b = torch.empty(1000, device="neuron")
    assert b.data_ptr() == ptr


def test_allocation_beyond_budget_is_a_clear_error_and_keeps_earlier_tensors():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        a = torch.arange(1_000_000, dtype=torch.float32, device="neuron")   # ~3.8 MiB of 8 MiB
        try:
            b = torch.empty(2_000_000, dtype=torch.float32, device="neuron")  # ~7.6 MiB more
            print("no error")
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        print("intact:", a[-1].item() == 999_999.0, (a * 2)[10].item())
        print("ooms:", torch.neuron.memory_stats()["num_ooms"])
        del a
        b = torch.ones(2_000_000, device="neuron")
        print("after free:", b.sum().item())
    """)
    result = run_python(code, env={"NEURON_SIM_HBM_BYTES_PER_CORE": str(8 * 2**20)})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "OOM: neuron:0 is out of memory: tried to allocate 7.63 MiB" in out
    assert "8.00 MiB of HBM in total" in out and "free" in out
    assert "intact: True 20.0" in out
    assert "ooms: 1" in out
    assert "after free: 2000000.0" in out


def test_oom_error_in_process_is_torch_oom():
    with pytest.raises(torch.OutOfMemoryError, match="out of memory: tried to allocate"):
        torch.empty(25 * 2**30, dtype=torch.uint8, device="neuron")
    assert torch.ones(3, device="neuron").sum().item() == 3


def test_scratch_memory_of_cpu_kernels_is_returned():
    # bf16 matmul allocates scratch with raw_allocate inside the CPU kernel; it must
    # go back to the device pool, not leak (regression test).
    x = torch.randn(4, 256, device="neuron", dtype=torch.bfloat16)
    w = torch.randn(688, 256, device="neuron", dtype=torch.bfloat16)
    before = torch.neuron.memory_allocated()
    for _ in range(5):
        y = x @ w.t()
        del y
    torch.neuron.synchronize()  # frees are stream-ordered in asynchronous mode
    assert torch.neuron.memory_allocated() == before


def test_a_custom_ops_own_allocations_stay_host_memory():
    # review item 4: the redirect served a custom op's cached CPU table from the device's HBM
    cache = {}

    @torch.library.custom_op("neuron_test::scale", mutates_args=(), device_types="cpu")
    def scale(x: torch.Tensor) -> torch.Tensor:
        if "table" not in cache:
            cache["table"] = torch.ones(4 << 20)  # 16 MiB the library keeps
        return x * 2

    x = torch.ones(4, device="neuron")
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    y = scale(x)
    assert y.device.type == "neuron" and y.cpu().tolist() == [2.0] * 4
    assert torch.neuron.memory_allocated() - before < 1 << 20  # y only, not the 16 MiB table
    assert cache["table"].device.type == "cpu"



def test_memory_guard_faults_a_host_access_that_bypasses_the_runtime():
    # NEURON_SIM_MEMORY_GUARD=1: device memory is mapped inaccessible outside kernels and
    # copies, so a stray host read faults at the access instead of reading stale data
    code = textwrap.dedent("""
        import ctypes, torch, torch_neuronx
        x = torch.full((4,), 3.0, device="neuron")
        print("through the runtime:", x.sum().item(), repr(x.cpu().tolist()), flush=True)
        ctypes.c_float.from_address(x.data_ptr()).value
        print("not reached", flush=True)
    """)
    result = run_python(code, env={"NEURON_SIM_MEMORY_GUARD": "1"})
    assert "through the runtime: 12.0 [3.0, 3.0, 3.0, 3.0]" in result.stdout, result.stderr
    assert "not reached" not in result.stdout and result.returncode == -11  # SIGSEGV
    unguarded = run_python(code, env={"NEURON_SIM_MEMORY_GUARD": "0"})
    assert "not reached" in unguarded.stdout


@pytest.mark.parametrize("mode", ["default", "asynchronous", "guarded"])
def test_tensors_made_by_dlpack_over_device_memory_hold_it(mode):
    # review 7, item 1: a neuron storage without a runtime Buffer crashed copies, was read
    # after it was freed (asynchronous) and faulted (guarded)
    code = textwrap.dedent("""
        import torch, torch_neuronx
        from torch.utils import dlpack
        N = 1 << 20
        x = torch.full((N,), 7.0, device="neuron")
        (x * 2).sum(); torch.neuron.synchronize()
        y = dlpack.from_dlpack(dlpack.to_dlpack(x))
        print("copy:", y[:3].cpu().tolist())
        del x
        torch.neuron._sleep(200_000_000)
        z = y * 2
        del y
        with torch.neuron.stream(torch.neuron.Stream()):
            junk = torch.full((N,), -1.0, device="neuron")
        print("z == 14:", bool((z == 14).all()))
    """)
    env = {"default": {}, "asynchronous": {"NEURON_LAUNCH_BLOCKING": "0"},
           "guarded": {"NEURON_SIM_MEMORY_GUARD": "1"}}[mode]
    result = run_python(code, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["copy: [7.0, 7.0, 7.0]", "z == 14: True"]


def test_storage_resize_keeps_the_storage_on_its_core():
    # review 7, item 9: UntypedStorage.resize_ moved the memory to the current core
    t = torch.ones(4, device="neuron:1")
    storage = t.untyped_storage()
    storage.resize_(1024)
    assert storage.device == torch.device("neuron:1")
    assert torch.neuron.memory_allocated(1) > 0


def test_freed_segments_leave_no_hole_that_blocks_a_request_the_budget_holds():
    # review 7, item 11
    code = textwrap.dedent("""
        import torch, torch_neuronx
        ts = [torch.empty(2 << 20, device="neuron") for _ in range(8)]   # 8 x 8 MiB
        for i in range(0, 8, 2):
            ts[i] = None
        torch.neuron.empty_cache()
        big = torch.empty(4 << 20, device="neuron")                       # 16 MiB
        print("ok", torch.neuron.mem_get_info()[0] >> 20)
    """)
    result = run_python(code, env={"NEURON_SIM_HBM_BYTES_PER_CORE": str(64 << 20)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "16"]


def test_peaks_of_counts_outlive_the_allocations():
    # review 7, item 12
    torch.neuron.synchronize()
    torch.neuron.reset_peak_memory_stats()
    live = [torch.empty(1000, device="neuron") for _ in range(10)]
    current = torch.neuron.memory_stats()["allocation.all.current"]
    del live
    stats = torch.neuron.memory_stats()
    assert stats["allocation.all.peak"] >= current >= 10
    assert torch.accelerator.memory_stats()["allocation.all.peak"] == stats["allocation.all.peak"]
