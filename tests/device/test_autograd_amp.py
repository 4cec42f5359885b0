import torch


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


def train(device, steps=5):
    model = make_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_matches_cpu():
    cpu_losses, cpu_params = train("cpu")
    neuron_losses, neuron_params = train("neuron")
    assert cpu_losses[-1] < cpu_losses[0]
    torch.testing.assert_close(neuron_losses, cpu_losses, rtol=1e-5, atol=1e-5)
    for a, b in zip(neuron_params, cpu_params):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_autocast_uses_cuda_op_lists():
    a = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        mm = a @ a
        soft = torch.softmax(mm, dim=-1)  # fp32 list
    assert mm.dtype == torch.bfloat16
    assert soft.dtype == torch.float32
    with torch.autocast("neuron", dtype=torch.float16):
        assert (a @ a).dtype == torch.float16
    assert torch.neuron.get_amp_supported_dtype() == [torch.float32, torch.float16, torch.bfloat16]  # as AWS's
    assert torch.neuron.is_bf16_supported()


def test_module_to_keeps_tied_weights():
    from tiny_models import build

    model = build("llama")
    model.config.tie_word_embeddings = True
    model.tie_weights()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    model.to("neuron")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model.lm_head.weight.device.type == "neuron"
    model.to("cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
