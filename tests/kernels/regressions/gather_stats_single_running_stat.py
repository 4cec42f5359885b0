"""Review 11 (the recurrent layers), finding 6. batch_norm_gather_stats(_with_counts) with running_mean given and running_var None (or the
reverse). CUDA's batch_norm_reduce_statistics_kernel updates each running statistic that is
given (`if (running_mean.data() != NULL)`, `if (running_var.data() != NULL)`, separately);
AcceleratorOnly.cpp:133 refuses the call ("must be both given or both absent").
Exit 0 = fixed (running_mean updated, no error)."""
import sys
import torch, torch_neuronx  # noqa: F401

D = "neuron"
x = torch.randn(6, 3, 4, device=D)
mean, invstd = torch.batch_norm_stats(x, 1e-5)
rm = torch.zeros(3, device=D)
try:
    torch.batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], rm, None, 0.5, 1e-5,
                                              torch.tensor([24.0], device=D))
except RuntimeError as e:
    print("refused:", str(e).splitlines()[0])
    sys.exit(1)
torch.testing.assert_close(rm.cpu(), 0.5 * x.cpu().mean((0, 2)), atol=1e-5, rtol=1e-5)
print("running_mean alone updated as on CUDA")
