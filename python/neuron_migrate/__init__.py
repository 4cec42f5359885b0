"""neuron-migrate: the evaluation a team runs before it moves a PyTorch / Hugging Face
workload to Trainium. Public APIs only (torch, transformers, torch_neuronx's public
functions), so the same tool runs on a real Trainium, a GPU or the CPU; it never imports
the simulator's internals (torch_neuron_sim)."""
__version__ = "0.1.0"
REPORT_SCHEMA = "neuron-migrate/report"
REPORT_SCHEMA_VERSION = 1
