"""predict(loop="generate") picks the held token with next(t for t in range(1, vocab_size) if t not
special): a vocabulary of one token, or one whose tokens from 1 up are all special, raises a bare
StopIteration with no message (dry_run's CLI catches ValueError/RuntimeError only: a traceback).
Token 0 is never considered even when it is ordinary (vocab 2, eos 1, no bos/pad). Expected: a
prediction where an ordinary token exists, else a ValueError naming the vocabulary and the
special tokens."""
import os  # noqa: E402
import sys
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests"))
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import dry_run  # noqa: E402
from tiny_models import CONFIGS  # noqa: E402

failures = []
for vocab, eos, bos, ordinary_exists in [(1, None, None, True), (2, 1, None, True), (2, 1, 0, False)]:
    config = transformers.AutoConfig.for_model("llama", **dict(CONFIGS["llama"], vocab_size=vocab, eos_token_id=eos,
                                                                bos_token_id=bos, pad_token_id=None))
    note = f"vocab {vocab}, eos {eos}, bos {bos}"
    try:
        p = dry_run.predict(config, "trn2", input_tokens=2, output_tokens=2, mode="eager", loop="generate")
        print(note, "predicted", p.ttft_ms)
    except ValueError as e:
        print(note, "ValueError:", e)
        if ordinary_exists:
            failures.append(f"{note}: token 0 is ordinary, yet refused: {e}")
        elif "vocab" not in str(e).lower():
            failures.append(f"{note}: the ValueError does not name the vocabulary: {e}")
    except BaseException as e:  # noqa: BLE001
        failures.append(f"{note}: {type(e).__name__}({str(e)!r}), not a prediction or a clear ValueError")
for f in failures:
    print("FAIL", f)
assert not failures
