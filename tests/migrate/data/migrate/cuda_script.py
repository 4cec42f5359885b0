"""A training script written for CUDA (scanned, never run)."""
import torch
import torch.distributed as dist
from torch.cuda.amp import GradScaler

torch.backends.cuda.matmul.allow_tf32 = True
dist.init_process_group(backend="nccl")
torch.cuda.set_device(dist.get_rank())
model = torch.nn.Linear(8, 8).cuda()
compiled = torch.compile(model, mode="max-autotune")
x = torch.randn(4, 8, device="cuda:0")
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    y = compiled(x)
scaler = GradScaler()
