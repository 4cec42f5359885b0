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
