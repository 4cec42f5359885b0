"""neuron_migrate.predict.cost_model(config_dir) now loads the config (is_moe) before the per-TP loop
that turns the dry run's ValueError into a refused row: a config transformers does not know
escapes as a raw ValueError (a traceback from `neuron-migrate predict DIR --tp 1`) instead of the
refused row with its reason (or a PredictError) that it gave before this commit."""
import os  # noqa: E402
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CONFIGS = os.path.join(HERE, "configs")
import os
import torch_neuronx  # noqa
from neuron_migrate import predict as p
folder = os.path.abspath("unknown_model")  # the test runs it in a fresh temporary folder
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "config.json"), "w") as f:
    f.write('{"model_type": "not_a_model_xyz", "hidden_size": 64}')
try:
    table = p.predict(folder, tps=(1,))
except p.PredictError as e:
    print("PredictError (ok):", e)
except ValueError as e:
    raise SystemExit(f"FAIL: raw ValueError escapes neuron_migrate.predict: {str(e)[:120]}")
else:
    print("refused (ok):", table.get("refused") if isinstance(table, dict) else table)
