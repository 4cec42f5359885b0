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
