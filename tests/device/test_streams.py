import textwrap

import torch

from conftest import run_python


def test_streams_and_events():
    s = torch.neuron.Stream()
    assert s.device.type == "neuron" and s.stream_id != 0
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream().stream_id == s.stream_id
        start.record()
        x = torch.randn(256, 256, device="neuron")
        y = x @ x
        end.record()
    end.synchronize()
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    assert torch.neuron.current_stream().stream_id == 0
    s.synchronize()
    torch.neuron.synchronize()
    assert y.shape == (256, 256)


def test_asynchronous_mode_keeps_results_and_order():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        assert not torch_neuronx._sim._C.launch_blocking()
        a = torch.arange(100_000, dtype=torch.float32)
        total = torch.zeros(100_000, device="neuron")
        for i in range(20):
            total += a.to("neuron", non_blocking=True)
        print(total.cpu()[-1].item(), torch.equal(total.cpu(), a * 20))
    """)
    result = run_python(code, env={"NEURON_LAUNCH_BLOCKING": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1999980.0", "True"]


def test_record_stream_holds_memory_while_another_thread_keeps_the_stream_busy():
    # review 7, item 5: in launch-blocking mode a short task of one thread, finishing while
    # another thread's long task ran, released memory recorded on the stream
    code = textwrap.dedent("""
        import threading, time, torch, torch_neuronx
        s = torch.neuron.current_stream()
        busy = threading.Thread(target=lambda: torch.neuron._sleep(800_000_000))
        busy.start(); time.sleep(0.2)
        t = torch.ones(1 << 20, device="neuron")
        t.record_stream(s)
        ptr = t.data_ptr()
        del t
        x = torch.ones(4, device="neuron"); y = torch.empty(4, device="neuron")
        y.copy_(x)
        u = torch.empty(1 << 20, device="neuron")
        print("reused while busy:", busy.is_alive() and u.data_ptr() == ptr)
        busy.join()
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "reused while busy: False" in result.stdout
