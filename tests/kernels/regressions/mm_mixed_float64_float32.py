"""Review 11 (the recurrent layers), finding 10. Found while checking "hx of another dtype" (not introduced by the rnn merge): torch.mm /
F.linear (no bias) of a float64 and a float32 neuron tensor succeed (float64 result), where
CPU and CUDA raise "expected m1 and m2 to have the same dtype". The 32-bit narrowing of
float64 operands hides the check. Visible through the RNN change: nn.GRU(float32) given a
float64 h0 fails inside _thnn_fused_gru_cell ("expected every tensor to be of dtype Float,
got Double") instead of at the matmul, as on CPU. Exit 0 = fixed."""
import sys
import torch, torch.nn.functional as F, torch_neuronx  # noqa: F401

a, w = torch.randn(4, 7, dtype=torch.float64), torch.randn(21, 7)
accepted = []
for name, f in (("mm", lambda d: torch.mm(a.to(d), w.t().to(d))), ("linear", lambda d: F.linear(a.to(d), w.to(d)))):
    for d in ("cpu", "neuron"):
        try:
            r = f(d)
            print(f"{name} on {d}: accepted -> {r.dtype}")
            if d == "neuron":
                accepted.append(name)
        except RuntimeError as e:
            print(f"{name} on {d}: {str(e).splitlines()[0][:80]}")
sys.exit(1 if accepted else 0)
