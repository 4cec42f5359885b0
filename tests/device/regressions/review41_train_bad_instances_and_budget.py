"""predict_train checks dp, tp, seq_len and local_batch but not `instances` or `token_budget`:
instances="2" is a bare TypeError ('<' not supported), instances=2.5 is taken (2.5 instances in the
answer and its cost), 50 instances for 2 ranks are taken (the DP all-gathers costed over EFA, the
cost charged for 50 instances), a negative token budget gives negative hours. Each should be a
ValueError naming the argument and what to give."""
import transformers  # noqa: E402
import torch_neuronx  # noqa: E402,F401
from torch_neuron_sim import train_dry_run  # noqa: E402

config = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=4,
              vocab_size=100, head_dim=16)
failures = []
for kwargs, name in ((dict(instances="2"), "instances"), (dict(instances=2.5), "instances"),
                     (dict(dp=2, instances=50), "instances"), (dict(token_budget=-1e9), "token_budget")):
    try:
        p = train_dry_run.predict_train(transformers.LlamaConfig(**config), seq_len=4, **kwargs)
        failures.append(f"{kwargs}: answered (instances {p.instances}, hours {p.hours_to_budget})")
    except ValueError as error:
        if name not in str(error):
            failures.append(f"{kwargs}: ValueError without the argument's name: {error}")
    except Exception as error:  # noqa: BLE001
        failures.append(f"{kwargs}: {type(error).__name__}: {error}")
for f in failures:
    print("FAIL", f)
assert not failures
