"""Entry point of the torch_dynamo_backends group: neuron = ...backend:neuron_backend."""
from torch_neuron_sim.compile import neuron_backend  # noqa: F401
