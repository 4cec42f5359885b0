"""predict(loop="generate", mode="eager") promises "a dynamic cache, every forward and the loop's
ops eager" (generate_loop.LOOPS), but run_loop passes cache_implementation only when compiled: a
folder whose generation_config.json sets cache_implementation "static" makes the "eager" run a
static-cache generate() with compiled decode steps. The eager prediction then equals the compiled
one (tiny Llama, 4 in / 3 out: both 42.66 ms TTFT, 6.94 ms per token; a dynamic-cache eager run is
37.53 and 32.67), still labelled eager: the user cannot get the eager figure and is told it is one."""
import os  # noqa: E402
import sys
import tempfile
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

folder = tempfile.mkdtemp(prefix="static_folder_")
transformers.AutoConfig.for_model("llama", **CONFIGS["llama"]).save_pretrained(folder)
transformers.GenerationConfig(bos_token_id=1, eos_token_id=2, cache_implementation="static").save_pretrained(folder)
eager = dry_run.predict(folder, "trn2", input_tokens=4, output_tokens=3, mode="eager", loop="generate")
compiled = dry_run.predict(folder, "trn2", input_tokens=4, output_tokens=3, mode="compiled", loop="generate")
print(f"eager: {eager.ttft_ms:.3f} / {eager.per_token_ms:.3f} ms ({eager.loop[:60]}...)")
print(f"compiled: {compiled.ttft_ms:.3f} / {compiled.per_token_ms:.3f} ms")
if "dynamic cache" in eager.loop:
    assert (eager.ttft_ms, eager.per_token_ms) != (compiled.ttft_ms, compiled.per_token_ms), \
        "mode='eager' predicted the folder's static-cache compiled generate() and labelled it 'a dynamic cache'"
