"""Finding 3. Device clock (csrc/DeviceClock.cpp describe(), kDataMovement): an in-place
scatter is costed as moving min(values + indexes, destination). The commit and
docs/device-clock.md say it "moves its values and indexes"; a scatter must read every value
and index it is given, so when those are larger than the destination (a histogram, an
embedding-gradient accumulation, index_add_ with repeated rows) the cap makes the clock
count only the destination: here 12 MiB read is costed as 128 KiB (about 48x too little).

Run: python tests/kernels/regressions/THIS_FILE"""
import sys
import warnings

import torch
import torch_neuronx

warnings.filterwarnings("ignore")

N, BINS = 1 << 20, 32768
table = torch.zeros(BINS, device="neuron")                      # 128 KiB destination
tokens = torch.randint(0, BINS, (N,), device="neuron")          # 8 MiB of indexes
ones = torch.ones(N, device="neuron")                           # 4 MiB of values
given = tokens.nbytes + ones.nbytes
cases = {
    "scatter_add_": lambda: table.scatter_add_(0, tokens, ones),
    "index_add_": lambda: table.index_add_(0, tokens, ones),
    "index_put_(accumulate=True)": lambda: table.index_put_((tokens,), ones, accumulate=True),
    "scatter_reduce_(sum)": lambda: table.scatter_reduce_(0, tokens, ones, "sum"),
}
bad = []
for name, fn in cases.items():
    torch.neuron.synchronize()
    before = torch_neuronx.device_counters()
    fn()
    torch.neuron.synchronize()
    d = torch_neuronx.device_counters() - before
    print(f"{name:28s} HBM bytes costed {d.hbm_bytes:>10,d}  (values + indexes read: {given:,d}; destination "
          f"{table.nbytes:,d})  predicted {d.time_ms * 1e3:.1f} us")
    if d.hbm_bytes < given:
        bad.append(name)
# Also: index_fill_ (a scalar into given rows, the class of scatter_.value) is not in the scatter
# family and is costed as a VectorE pass over its whole destination.
rows = torch.zeros(4096, 128, device="neuron")
row = torch.tensor([7], device="neuron")
for name, fn in {"scatter_(value) one row": lambda: rows.scatter_(0, row.view(1, 1).expand(1, 128), 1.0),
                 "index_fill_ one row": lambda: rows.index_fill_(0, row, 1.0)}.items():
    torch.neuron.synchronize()
    before = torch_neuronx.device_counters()
    fn()
    torch.neuron.synchronize()
    print(f"also: {name:24s} HBM bytes costed {(torch_neuronx.device_counters() - before).hbm_bytes:>10,d} "
          f"(destination {rows.nbytes:,d})")
if bad:
    print(f"BUG: {', '.join(bad)} costed below the {given:,d} bytes of values and indexes they read "
          "(min(values, destination) in describe())")
    sys.exit(1)
print("ok")
