"""Note [Composites on the device]: CostingMode now runs an op without a device kernel as ATen's
CompositeExplicitAutograd composite and costs its parts when there are two or more. new_zeros,
new_ones and new_full are new_empty + zero_/fill_: the live device launches one kernel (new_empty
allocates), the dry run costs two (new_empty is not a launch, it is not in NO_LAUNCH). This moved
existing eager figures: gpt-oss-20b at TP 8, eager, 16 in / 3 out went from 327.38 ms TTFT and
1185 launches (HEAD~1) to 333.90 ms and 1209 (one new_zeros per layer)."""
import torch  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402

platform, lnc = torch.neuron.get_device_properties(0).platform, torch.neuron.get_device_properties(0).logical_nc_config
x = torch.randn(4, 256, device="neuron")
on_meta = x.to("meta")
failures = []
for name, fn in [("new_zeros", lambda t: t.new_zeros((8, 64))), ("new_ones", lambda t: t.new_ones((8, 64))),
                 ("new_full", lambda t: t.new_full((8, 64), 2.0)), ("new_empty", lambda t: t.new_empty((8, 64)))]:
    fn(x)
    torch.neuron.synchronize()
    start = torch_neuronx.device_time()
    fn(x)
    torch.neuron.synchronize()
    live_ns = (torch_neuronx.device_time() - start) * 1e6
    mode = dry_run.CostingMode(platform, lnc)
    with mode:
        fn(on_meta)
    print(f"{name}: live {live_ns:.0f} ns, dry run {mode.ns:.0f} ns, {mode.launches} launches {mode.by_op}")
    if abs(mode.ns - live_ns) > 50:
        failures.append(f"{name}: dry run {mode.ns:.0f} ns ({mode.launches} launches), live {live_ns:.0f} ns")
for f in failures:
    print("FAIL", f)
assert not failures
