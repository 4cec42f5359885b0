"""Runs `python -m torchtitan.train` (torchtitan's own entry point, its code unchanged) under torchrun,
as tests/distributed/test_torchtitan.py launches it:

    torchrun ... torchtitan_launch.py [--cpu] --module llama3 --config llama3_debugmodel ...

Two things are done before torchtitan is imported, neither of them to torchtitan's code nor to the
neuron backend:

- torch 2.14's `torch.distributed.set_timeout(timeout, group)` is given to torch 2.13 as the same
  function under its 2.13 name, `torch.distributed.distributed_c10d._set_pg_timeout` (torch 2.14
  made it public under the new name). torchtitan 0.3.0, written against torch nightly, calls it
  after the first step of every run (trainer.py, `set_pg_timeouts`), on every device: without it
  every run on torch 2.13, the CPU's included, dies after step 1 with "module 'torch.distributed'
  has no attribute 'set_timeout'".
- `--cpu` (the reference run): torchtitan has no CPU mode. It takes its device from
  `torch._utils._get_available_device_type()` (torchtitan/tools/utils.py `get_device_info`:
  cuda, mps, xpu, mtia, then the PrivateUse1 backend, else "cuda"), and its process-group backend
  from `torch.distributed.Backend.default_device_backend_map[device]` (distributed/utils.py). The
  reference runs with the neuron backend not loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0, set by the
  test) and with that function answering "cpu": torchtitan then puts the model on the CPU and
  initialises Gloo (the map's backend for "cpu"). Its device module (`torch._utils._get_device_module`)
  is torch.cpu with the five functions torchtitan's memory monitor (components/metrics.py) calls
  and torch.cpu lacks, answered as a device without memory statistics, and current_device() an index
  (torch.cpu's answers "cpu", which torchtitan passes to barrier(device_ids=...)). The neuron run takes none of
  this: torchtitan finds the neuron device itself (the backend is autoloaded by `import torch`),
  torch.neuron as its device module and the c10d backend "neuron".
  torchtitan's llama3 and qwen3 attend with FlexAttention only (or varlen attention, CUDA-only),
  which PyTorch 2.13 cannot train on the CPU as torchtitan calls it: flex_attention's entry point
  refuses CPU inputs that require grad (nn/attention/flex_attention.py `_validate_device`,
  "FlexAttention does not support backward on CPU"), and torchtitan compiles flex_attention with
  Inductor (`torch.compile(flex_attention, options=...)`, models/common/attention.py), whose CPU
  lowering has no backward (InductorError: IndexError in the backward's lowering). The reference
  therefore runs PyTorch's own dense implementation of the flex_attention operator, forward and
  backward: the check is skipped for the CPU (its other devices' checks are kept), and a
  torch.compile that asks for Inductor (torchtitan's flex_attention and create_block_mask) gets
  "aot_eager", which runs the traced operator's dense implementation. That is what runs on neuron
  too (README, FlexAttention): the reference differs from the neuron run in the device only. The
  reference is never compiled (`--compile.enable` runs on neuron only and are compared with it).
  FSDP2 reduce-scatters gradients with ReduceOp.PREMUL_SUM(1 / factor) when given a divide factor
  (fsdp/_fully_shard/_fsdp_collectives.py `_get_gradient_divide_factors`), and torchtitan gives it
  1.0 (distributed/fsdp.py `disable_fsdp_gradient_division`: it scales by the global token count
  itself); Gloo has no PREMUL_SUM ("Cannot use ReduceOp.PREMUL_SUM with Gloo"). The reference takes
  FSDP2's own alternative for backends that only sum (its force_sum_reduction_for_comms: SUM, then
  a division by the factor, here 1), the same arithmetic. The neuron backend has PREMUL_SUM.
"""
import os
import runpy
import sys
import types

import torch
import torch.distributed

if not hasattr(torch.distributed, "set_timeout"):
    torch.distributed.set_timeout = torch.distributed.distributed_c10d._set_pg_timeout

if len(sys.argv) > 1 and sys.argv[1] == "--cpu":
    del sys.argv[1]
    assert not hasattr(torch, "neuron") or not torch.neuron.is_available(), \
        "the CPU reference must run with the neuron backend not loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0)"
    torch._utils._get_available_device_type = lambda: "cpu"

    cpu_module = types.ModuleType("torch_cpu_for_torchtitan")
    cpu_module.__dict__.update({name: getattr(torch.cpu, name) for name in dir(torch.cpu) if not name.startswith("__")})
    cpu_module.current_device = lambda: 0  # torch.cpu's is "cpu", which barrier(device_ids=[...]) refuses
    cpu_module.get_device_name = lambda device=None: "CPU"
    cpu_module.get_device_properties = lambda device=None: types.SimpleNamespace(
        name="CPU", total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    cpu_module.memory_stats = lambda device=None: {}
    cpu_module.reset_peak_memory_stats = lambda device=None: None
    cpu_module.empty_cache = lambda: None
    import functools

    import torch.nn.attention.flex_attention as flex_attention

    validate_device = flex_attention._validate_device
    flex_attention._validate_device = lambda query, key, value: \
        None if query.device.type == "cpu" else validate_device(query, key, value)

    from torch.distributed.fsdp._fully_shard import _fsdp_collectives

    divide_factors = _fsdp_collectives._get_gradient_divide_factors

    def sum_only_divide_factors(group, all_reduce_group, reduce_dtype, device_type="", factor=None,
                                force_sum_reduction_for_comms=False):
        return divide_factors(group, all_reduce_group, reduce_dtype, device_type, factor, True)

    _fsdp_collectives._get_gradient_divide_factors = sum_only_divide_factors

    compile_ = torch.compile

    @functools.wraps(compile_)
    def compile_without_inductor(model=None, **kwargs):
        if kwargs.get("backend", "inductor") == "inductor":
            kwargs.update(backend="aot_eager", options=None)
        return compile_(model, **kwargs)

    torch.compile = compile_without_inductor

    device_module = torch._utils._get_device_module
    torch._utils._get_device_module = lambda device_type="cuda": \
        cpu_module if device_type == "cpu" else device_module(device_type)

sys.argv[0] = "torchtitan.train"
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
