"""Per-graph compile records of torch.compile(backend="neuron"), as TorchNeuron keeps them:
torch_neuronx.get_dynamo_metrics() / reset_dynamo_metrics() and torch.neuron's aliases."""
import dataclasses

import torch


@dataclasses.dataclass
class NeuronCompilationMetrics:
    """One compiled graph (the fields of AWS's torch_neuronx NeuronCompilationMetrics)."""
    graph_id: str  # the cache key of the compiled program
    graph_name: str  # {model_name}_{aot_id}_{graph_type}_{nth}
    model_name: str
    has_collectives: bool
    graph_node_count: int
    timestamp: str  # the graph segment's id
    torch_neuronx_fx_passes_us: int
    torch_neuronx_lower_us: int
    torch_neuronx_compile_us: int
    # Ours, beyond AWS's record:
    recompile_reason: str | None = None  # why Dynamo compiled this graph again (its guard failure)
    cache_hit: bool = False  # the program came from the cache (memory or disk)


_records = []


def record(metrics):
    """Appends one compiled graph's record (called by the compile backend)."""
    _records.append(metrics)


def get_dynamo_metrics():
    """One NeuronCompilationMetrics per graph compiled since start-up or the last reset
    (after waiting for the device, as the real function does)."""
    torch.neuron.synchronize()
    return list(_records)


def reset_dynamo_metrics():
    """Clears the records and torch._dynamo.utils.counters["neuron"]."""
    _records.clear()
    from torch._dynamo.utils import counters
    counters["neuron"].clear()
