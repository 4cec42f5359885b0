"""Review 11 (the recurrent layers), finding 9. CUDA's fused cells allocate their outputs with empty_like(..., LEGACY_CONTIGUOUS_MEMORY_FORMAT)
(RNN.cu): hy, cy, workspace and the backward's grad_gates / grad_cx are always contiguous.
Recurrent.cpp returns whatever layout TensorIterator picks from the operands, so transposed
gates (e.g. from a user's x @ W computed as (W^T x^T)^T) give transposed hy/cy, and a
transposed grad_hy gives a transposed grad_cx. test_rnn.py checks contiguity only for
contiguous inputs. Exit 0 = fixed."""
import sys
import torch, torch_neuronx  # noqa: F401

D = "neuron"; A = torch.ops.aten
B, H = 3, 5
ig = torch.randn(4 * H, B, device=D).t()
hg = torch.randn(4 * H, B, device=D).t()
cx = torch.randn(H, B, device=D).t()
hy, cy, ws = A._thnn_fused_lstm_cell(ig, hg, cx)
gy, gws = A._thnn_fused_gru_cell(ig[:, :3 * H], hg[:, :3 * H], cx)
grad_gates, grad_cx, _ = A._thnn_fused_lstm_cell_backward_impl(torch.randn(H, B, device=D).t(), None,
                                                              cx.contiguous(), cy.contiguous(), ws, False)
bad = 0
for name, t in (("lstm hy", hy), ("lstm cy", cy), ("lstm workspace", ws), ("gru hy", gy), ("gru workspace", gws),
                ("lstm grad_gates", grad_gates), ("lstm grad_cx", grad_cx)):
    print(f"{name}: strides {t.stride()} contiguous={t.is_contiguous()}")
    bad += not t.is_contiguous()
sys.exit(1 if bad else 0)
