import pytest
import torch
import torch_neuronx


def assert_same(neuron_result, cpu_result):
    assert neuron_result.device.type == "neuron"
    assert neuron_result.dtype == cpu_result.dtype
    assert neuron_result.shape == cpu_result.shape
    torch.testing.assert_close(neuron_result.cpu(), cpu_result)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_elementwise_and_reductions_match_cpu(dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.randn(5, 7, generator=g) * 10).to(dtype)
    b = (torch.randn(5, 7, generator=g) * 10).to(dtype)
    an, bn = a.to("neuron"), b.to("neuron")
    if dtype != torch.bool:
        assert_same(an + bn, a + b)
        assert_same(an * bn, a * b)
        assert_same(an.sum(dim=1), a.sum(dim=1))
        assert_same(an.max(dim=0).values, a.max(dim=0).values)
    assert_same(an == bn, a == b)
    assert_same(torch.where(an > bn if dtype != torch.bool else an, an, bn), torch.where(a > b if dtype != torch.bool else a, a, b))
    assert_same(torch.cat([an, bn], dim=1), torch.cat([a, b], dim=1))


def test_matmul_softmax_and_views_match_cpu():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    an, bn = a.to("neuron"), b.to("neuron")
    assert_same(an @ bn, a @ b)
    assert_same(torch.softmax(an, dim=-1), torch.softmax(a, dim=-1))
    assert_same(an.t().contiguous(), a.t().contiguous())
    assert_same(an[2:5, ::3], a[2:5, ::3])
    assert_same(an.view(4, 32).transpose(0, 1)[3], a.view(4, 32).transpose(0, 1)[3])
    assert_same(an.unfold(1, 4, 2), a.unfold(1, 4, 2))
    top_n, top_c = an.topk(3, dim=1), a.topk(3, dim=1)
    assert_same(top_n.values, top_c.values)
    assert_same(top_n.indices, top_c.indices)
    parts_n, parts_c = an.split(5, dim=1), a.split(5, dim=1)
    for pn, pc in zip(parts_n, parts_c):
        assert_same(pn, pc)


def test_views_share_device_memory():
    base = torch.zeros(4, 4, device="neuron")
    view = base[1]
    view.fill_(3.0)
    assert view.data_ptr() == base.data_ptr() + 4 * 4
    assert base.cpu()[1].tolist() == [3.0] * 4
    row = base.select(0, 2)
    row.add_(1)
    assert base.cpu()[2].tolist() == [1.0] * 4


def test_in_place_and_out_variants_with_resize():
    a = torch.arange(6.0).to("neuron")
    out = torch.empty(0, device="neuron")
    result = torch.add(a, 1, out=out)
    assert result is out
    assert out.shape == (6,) and out.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    a.mul_(2)
    assert a.cpu().tolist() == [0, 2, 4, 6, 8, 10]
    values = torch.empty(0, device="neuron")
    indices = torch.empty(0, dtype=torch.long, device="neuron")
    torch.max(a.view(2, 3), dim=1, out=(values, indices))
    assert values.cpu().tolist() == [4, 10] and indices.cpu().tolist() == [2, 2]


def test_copies_between_host_devices_and_dtypes():
    a = torch.randn(3, 5)
    n0 = a.to("neuron:0")
    n1 = n0.to("neuron:1")
    assert n1.device == torch.device("neuron:1")
    assert torch.equal(n1.cpu(), a)
    assert torch.equal(n0.t().cpu(), a.t())
    assert torch.equal(n0.to(torch.bfloat16).cpu(), a.to(torch.bfloat16))
    dst = torch.empty(5, 3, device="neuron")
    dst.copy_(a.t())
    assert torch.equal(dst.cpu(), a.t())
    pinned = a.pin_memory()  # the current accelerator's pinned allocator: neuron's
    assert pinned.is_pinned() and not a.is_pinned()
    assert torch.equal(pinned.to("neuron", non_blocking=True).cpu(), a)


def test_scalar_item_and_printing():
    t = torch.tensor([1.5, 2.5], device="neuron")
    assert t.sum().item() == 4.0
    assert "device='neuron:0'" in repr(t)


def test_mixing_cpu_and_neuron_tensors_raises_like_cuda():
    a = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*neuron:0 and cpu"):
        a + torch.ones(3)
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]  # CPU scalars are fine, as on CUDA


def test_cross_device_op_raises():
    a = torch.ones(3, device="neuron:0")
    b = torch.ones(3, device="neuron:1")
    with pytest.raises(RuntimeError, match="neuron:0 and neuron:1"):
        a + b


def test_convolution_forward_and_backward_match_cpu():
    torch.manual_seed(0)
    for conv, shape in [(torch.nn.Conv1d(4, 4, 3, groups=4, padding=2), (2, 4, 9)),
                        (torch.nn.Conv2d(3, 5, 3, stride=2, padding=1), (2, 3, 8, 8))]:
        x = torch.randn(shape, requires_grad=True)
        expected = conv(x)
        expected.square().sum().backward()
        on_neuron = type(conv)(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                               padding=conv.padding, groups=conv.groups)
        on_neuron.load_state_dict(conv.state_dict())
        on_neuron.to("neuron")
        xn = x.detach().to("neuron").requires_grad_()
        got = on_neuron(xn)
        got.square().sum().backward()
        torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(xn.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(on_neuron.weight.grad.cpu(), conv.weight.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(on_neuron.bias.grad.cpu(), conv.bias.grad, rtol=1e-5, atol=1e-5)


def test_histc_accepts_integer_inputs_like_an_accelerator():
    x = torch.tensor([0, 2, 2, 3, 7], dtype=torch.int32)
    got = torch.histc(x.to("neuron"), bins=4, min=0, max=3)
    assert got.dtype == torch.int32
    assert got.cpu().tolist() == torch.histc(x.float(), bins=4, min=0, max=3).int().tolist()


def test_cpu_scalars_first_and_64bit_operands_in_functional_hot_ops():
    flags = torch.tensor([1, 0, 1]).to("neuron")
    assert (1 - flags).cpu().tolist() == [0, 1, 0]  # rsub: a CPU wrapped number comes first
    x = torch.arange(3.0).to("neuron")
    assert (torch.tensor(2.0) * x).cpu().tolist() == [0.0, 2.0, 4.0]
    assert (flags * 5 + flags).cpu().tolist() == [6, 0, 6]


def test_attention_uses_the_fused_kernel_and_matches_cpu():
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, 9, 16, generator=g, requires_grad=True) for heads in (4, 2, 2))
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected.sum().backward()
    qn, kn, vn = (t.detach().to("neuron").requires_grad_() for t in (q, k, v))
    torch_neuronx.clear_op_tracking()
    got = F.scaled_dot_product_attention(qn, kn, vn, is_causal=True, enable_gqa=True)
    got.sum().backward()
    counts = torch_neuronx.get_op_counts()  # the device's fused op (CPU flash kernel inside)
    assert counts["aten::_scaled_dot_product_fused_attention_overrideable"]["kernel"] == "hot"
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in torch_neuronx.get_executed_ops()
    assert not any("attention" in name for name in torch_neuronx.get_fallback_ops())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-5, atol=1e-6)
    for a, b in ((qn, q), (kn, k), (vn, v)):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-5, atol=1e-5)
