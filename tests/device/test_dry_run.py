"""The dry run (python/torch_neuron_sim/dry_run.py; issue 25 §2): a model on the meta device,
each op costed from its sizes and dtypes by the device clock's own cost path, agrees with the
live clock's device_time() of the same forward on the device, and a 70B config runs."""
import os

import pytest
import torch

import torch_neuronx
from torch_neuron_sim import _C, dry_run

transformers = pytest.importorskip("transformers")
CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "demo", "configs")


def tiny_llama():
    return transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, vocab_size=256, head_dim=16)


def live_ns(model, tokens):
    ids = torch.zeros(1, tokens, dtype=torch.long, device="neuron")
    start = torch_neuronx.device_time()
    model(input_ids=ids, use_cache=False, logits_to_keep=1)
    return (torch_neuronx.device_time() - start) * 1e6


@pytest.mark.parametrize("tokens", [1, 8])
def test_dry_run_of_a_tiny_llama_equals_the_live_clock(tokens):
    properties = torch.neuron.get_device_properties(0)
    torch.manual_seed(0)
    live_model = transformers.AutoModelForCausalLM.from_config(tiny_llama(), dtype=torch.bfloat16).eval().to("neuron")
    with torch.no_grad():
        live_ns(live_model, tokens)  # first call: one-time work out of the measure
        live = live_ns(live_model, tokens)
        meta_model = dry_run.build(tiny_llama())
        ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
        mode = dry_run.CostingMode(properties.platform, properties.logical_nc_config)
        with mode:
            meta_model(input_ids=ids, use_cache=False, logits_to_keep=1)
    assert mode.ns == pytest.approx(live, rel=0.01), mode.by_op


def test_the_binding_costs_a_matmul_as_the_live_clock():
    properties = torch.neuron.get_device_properties(0)
    a = torch.randn(64, 256, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(256, 512, dtype=torch.bfloat16, device="neuron")
    start = torch_neuronx.device_time()
    torch.mm(a, b)
    live = (torch_neuronx.device_time() - start) * 1e6
    ns = _C._cost_op("aten::mm", [([64, 256], torch.bfloat16, True), ([256, 512], torch.bfloat16, True)],
                     [([64, 512], torch.bfloat16, True)], properties.platform, properties.logical_nc_config)[0]
    assert ns == pytest.approx(live, abs=2)


def test_the_70b_config_runs_at_tp_64_with_positive_latencies():
    prediction = dry_run.predict(os.path.join(CONFIGS, "llama-3.3-70b"), "trn2", tp=64, input_tokens=128,
                                 output_tokens=2)
    assert prediction.ttft_ms > 0 and prediction.per_token_ms > 0
    assert prediction.decode_launches > 80 * 10  # every decoder layer's ops were costed


def test_a_folder_without_a_config_is_refused_with_what_to_give(tmp_path, capsys):
    import pytest
    from torch_neuron_sim import dry_run
    with pytest.raises(SystemExit) as exit_info:
        dry_run.main([str(tmp_path), "--tp", "4"])
    assert exit_info.value.code == 2
    assert "no config.json there" in capsys.readouterr().err
