"""review 43 #1: a decode loop of torch.compile(model) (no backend) over a static cache whose
sliding-window layer's length is read inside the graph (no position_ids: Mistral's forward calls
past_key_values.get_seq_length()). After a compiled one-token update only the device knows the
length (Note [Sliding-window static caches compile once]), so the read breaks the graph, and the
graph resumed after the break takes no tensor but makes one on neuron (torch.arange(1,
device=neuron) + length): patch 2 sent it to Inductor, which raised "KeyError: 'neuron'". Such a
graph now compiles with the neuron backend; the logits equal the CPU's."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import torch_neuronx  # noqa: E402,F401
import warnings  # noqa: E402

import tiny_models  # noqa: E402
from transformers import StaticCache  # noqa: E402

warnings.filterwarnings("ignore")
model = tiny_models.build("mistral", sliding_window=8)
ids = torch.randint(1, 128, (1, 5), generator=torch.Generator().manual_seed(0))


def run(device, compiled):
    torch._dynamo.reset()
    moved = model.to(device)
    cache = StaticCache(config=model.config, max_cache_len=64)
    forward = torch.compile(moved, dynamic=False) if compiled else moved
    logits = []
    with torch.no_grad():
        out = moved(input_ids=ids.to(device), past_key_values=cache)
        token = out.logits[:, -1:].argmax(-1)
        for _ in range(12):  # the window (8) fills at the fourth step
            out = forward(input_ids=token, past_key_values=cache)
            token = out.logits[:, -1:].argmax(-1)
            logits.append(out.logits.cpu())
    return torch.cat(logits, 1), cache.get_seq_length()


want, want_length = run("cpu", False)
got, got_length = run("neuron", True)
assert got_length == want_length == 17, (got_length, want_length)
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
