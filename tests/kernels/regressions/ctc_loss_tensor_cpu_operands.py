"""Review 11 (the recurrent layers), finding 8. The generic path (then ZeroCopy.cpp) accepted CPU tensors for *every* argument of _ctc_loss.Tensor /
_ctc_loss_backward.Tensor, not only the lengths. CUDA's ctc_loss_tensor reads the lengths on
the host but redispatches _ctc_loss(log_probs, targets, ...), whose kernel checks
checkAllSameGPU(log_probs, targets). On neuron, CPU log_probs (or targets) mixed with neuron
operands are accepted and the result is put on neuron. Exit 0 = fixed (a device error)."""
import sys
import torch, torch_neuronx  # noqa: F401

D = "neuron"
torch.manual_seed(0)
lp = torch.randn(12, 2, 5).log_softmax(2)
tg = torch.randint(1, 5, (2, 4))
il, tl = torch.tensor([12, 12]), torch.tensor([4, 3])
ok = torch.ops.aten._ctc_loss.Tensor(lp.to(D), tg.to(D), il, tl)  # CPU lengths: accepted, as on CUDA
print("neuron operands, CPU lengths: accepted (correct)")
accepted = 0
for name, args in (("log_probs on CPU, targets on neuron", (lp, tg.to(D), il, tl)),
                   ("log_probs on neuron, targets on CPU", (lp.to(D), tg, il, tl))):
    try:
        r = torch.ops.aten._ctc_loss.Tensor(*args)
        print(f"{name}: accepted, result on {r[0].device}")
        accepted += 1
    except RuntimeError as e:
        print(f"{name}: {str(e).splitlines()[0][:100]}")
sys.exit(1 if accepted else 0)
