"""Hugging Face text generation on neuron gives the same greedy tokens as on CPU."""
import pytest
import torch
from transformers import AutoModelForCausalLM

from tiny_models import CONFIGS, build


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_greedy_generate_matches_cpu(model_type, dtype, tmp_path):
    model = build(model_type, dtype=dtype)
    model.save_pretrained(tmp_path)
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    expected = model.generate(ids, max_new_tokens=32, do_sample=False, pad_token_id=0)
    on_neuron = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype, device_map="neuron")
    assert on_neuron.device.type == "neuron"
    assert next(on_neuron.parameters()).dtype == dtype
    out = on_neuron.generate(ids.to("neuron"), max_new_tokens=32, do_sample=False, pad_token_id=0)
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), expected)


def test_forward_logits_match_cpu():
    model = build("llama")
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(2))
    expected = model(ids).logits
    got = model.to("neuron")(ids.to("neuron")).logits
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
