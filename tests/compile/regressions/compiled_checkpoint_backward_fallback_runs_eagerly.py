"""Review of issue 39, finding 1: with fallback execution on, a compiled checkpointed dropout whose backward graph the
lowering refuses falls back to running the *rewritten* backward graph eagerly; replay_random_ops /
generators_from_saved_states left the saved 16-byte state tensor in the op's `generator=` kwarg,
so eager ATen rejects it (the same graph without checkpoint falls back fine).
Expected: gradients equal to the eager run (PASS). Observed: RuntimeError ... 'Optional[Generator]' ... found type 'Tensor'."""
import os, sys
os.environ["TORCH_NEURONX_DISABLE_NEFF_CACHE"] = "1"
import warnings
import torch, torch_neuronx  # noqa: F401
import torch.nn.functional as F
import torch.utils.checkpoint as cp
warnings.simplefilter("ignore")


class Scale(torch.autograd.Function):  # its backward is a graph the lowering refuses (as in
    @staticmethod                        # tests/compile/regressions/backward_compile_failure_ignores_fallback.py)
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, grad):
        (g,) = torch._foreach_mul([grad], [2.0])
        return g


def block(z):
    return F.dropout(z.sin(), 0.5)


def f(z, ckpt):
    return Scale.apply(cp.checkpoint(block, z, use_reentrant=False) if ckpt else block(z))


def run(compiled, ckpt):
    torch._dynamo.reset()
    g = torch.compile(f, backend="neuron", options={"fallback_execution": True}) if compiled else f
    torch.manual_seed(3)
    x = torch.randn(8, 16, device="neuron").requires_grad_()
    out = g(x, ckpt)
    out.sum().backward()
    return out.detach().cpu(), x.grad.cpu()


ref = run(False, False)
failed = False
for ckpt in (False, True):
    try:
        got = run(True, ckpt)
        ok = all(torch.equal(a, b) for a, b in zip(ref, got))
        print(f"compiled, checkpoint={ckpt}: {'same as eager' if ok else 'DIFFERENT from eager'}")
        failed |= not ok
    except Exception as error:  # noqa: BLE001
        print(f"compiled, checkpoint={ckpt}: raised {type(error).__name__}: {str(error).splitlines()[0][:160]}")
        failed = True
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
