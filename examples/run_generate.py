"""run_generate.py, as in TorchNeuron's guide: a Hugging Face model on the neuron device,
generating with a static KV cache, which makes generate() compile the forward pass
(torch.compile(backend="neuron"), chosen by transformers for device type "neuron").

    python examples/run_generate.py [model folder] [prompt]
"""
import sys

import torch
import torch_neuronx  # noqa: F401  (registers the device "neuron")
from transformers import AutoModelForCausalLM, AutoTokenizer

path = sys.argv[1] if len(sys.argv) > 1 else "demo/model"
prompt = sys.argv[2] if len(sys.argv) > 2 else "The list data type has some more methods."

tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="neuron")
out = model.generate(**tok(prompt, return_tensors="pt").to("neuron"),
                     max_new_tokens=64, cache_implementation="static")   # compiles
print(tok.decode(out[0], skip_special_tokens=True))
