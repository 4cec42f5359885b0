"""Review 11 (the recurrent layers), finding 5. Output dtypes of the SyncBatchNorm kernels when one operand is float64 and the input is
float32. CUDA (Normalization.cu): batch_norm_elemt / batch_norm_backward_elemt return
empty_like(input) (float32); batch_norm_gather_stats_with_counts returns mean/invstd in
mean's dtype (float32). On neuron, run_kernel's 64-bit rule (kernels/KernelBody.cpp narrowed_body)
widens *every* float32 result to float64 as soon as any input was float64, overriding the
kernels' own .to(input dtype). nn.SyncBatchNorm's Python converts the counts to the running
statistics' dtype, so float64 running statistics with a float32 model give float64 mean/invstd
and then a float64 output. Exit 0 = fixed."""
import sys
import torch, torch_neuronx  # noqa: F401

D = "neuron"
f64 = dict(device=D, dtype=torch.float64)
x, dy = torch.randn(4, 3, 5, device=D), torch.randn(4, 3, 5, device=D)
mean, invstd = torch.batch_norm_stats(x, 1e-5)
checks = []
out = torch.batch_norm_elemt(x, torch.ones(3, **f64), torch.zeros(3, **f64), mean, invstd, 1e-5)
checks.append(("batch_norm_elemt(float32 input, float64 weight/bias) output", out.dtype, torch.float32))
rm, rv = torch.zeros(3, **f64), torch.ones(3, **f64)
m, i = torch.batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], rm, rv, 0.1, 1e-5,
                                                 torch.tensor([20.0], **f64))
checks.append(("batch_norm_gather_stats_with_counts(float32 mean, float64 running stats/counts) mean", m.dtype,
               torch.float32))
sum_dy, sum_dy_xmu, _, _ = torch.batch_norm_backward_reduce(dy, x, mean, invstd, None, True, False, False)
gi = torch.batch_norm_backward_elemt(dy, x, mean, invstd, torch.ones(3, **f64), sum_dy, sum_dy_xmu,
                                     torch.tensor([20], device=D, dtype=torch.int32))
checks.append(("batch_norm_backward_elemt(float32 input, float64 weight) grad_input", gi.dtype, torch.float32))
bad = 0
for what, got, want in checks:
    print(f"{'ok  ' if got == want else 'BAD '} {what}: {got} (CUDA: {want})")
    bad += got != want
sys.exit(1 if bad else 0)
