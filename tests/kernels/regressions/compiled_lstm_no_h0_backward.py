"""Review 11 (the recurrent layers), finding 2. torch.compile(backend="neuron") of the most common recurrent layer -- nn.LSTM with one
layer, one direction, no initial state -- with Dynamo tracing RNNs (allow_rnn, which
tests/kernels/test_rnn.py::test_compiled_recurrent_layer_matches_cpu uses): the backward graph fails
("input 0 is on cpu; the graph was compiled for neuron:0"). The forward saves the zero
initial state, a folded constant, as a *CPU* tensor for backward (see 03_...). The test only
compiles num_layers=2 bidirectional, which happens to avoid it. Exit 0 = fixed."""
import os, sys, tempfile
os.environ.setdefault("TORCH_NEURONX_NEFF_CACHE_DIR", tempfile.mkdtemp())
import torch, torch.nn as nn, torch_neuronx, torch._dynamo  # noqa: F401

torch.manual_seed(0)
cpu = nn.LSTM(5, 7)
dev = nn.LSTM(5, 7); dev.load_state_dict(cpu.state_dict()); dev.to("neuron")
x = torch.randn(6, 4, 5)
saved_devices = []
with torch._dynamo.config.patch(allow_rnn=True):
    compiled = torch.compile(dev, backend="neuron", fullgraph=True)
    xi = x.to("neuron").requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved_devices.append(t.device.type) or t, lambda t: t):
        out = compiled(xi)[0]
    print("devices of tensors saved for backward:", sorted(set(saved_devices)))
    try:
        grads = torch.autograd.grad(out.pow(2).sum(), [xi] + list(dev.parameters()))
    except Exception as e:
        print("backward FAILED:", str(e).strip().splitlines()[-1][:200])
        sys.exit(1)
xc = x.clone().requires_grad_()
want = torch.autograd.grad(cpu(xc)[0].pow(2).sum(), [xc] + list(cpu.parameters()))
for g, w in zip(grads, want):
    torch.testing.assert_close(g.cpu(), w, atol=1e-5, rtol=1.3e-6)
print("compiled 1-layer LSTM backward matches CPU")
