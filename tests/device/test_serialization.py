import torch


def test_save_and_load_with_map_location(tmp_path):
    path = tmp_path / "t.pt"
    original = {"w": torch.randn(3, 4), "n": torch.arange(5)}
    torch.save({k: v.to("neuron:1") for k, v in original.items()}, path)
    on_device = torch.load(path)
    assert on_device["w"].device == torch.device("neuron:1")
    assert torch.equal(on_device["w"].cpu(), original["w"])
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["n"].device.type == "cpu" and torch.equal(on_cpu["n"], original["n"])
    moved = torch.load(path, map_location="neuron:2")
    assert moved["w"].device == torch.device("neuron:2")
    module = torch.nn.Linear(4, 2).to("neuron")
    torch.save(module.state_dict(), tmp_path / "m.pt")
    loaded = torch.nn.Linear(4, 2)
    loaded.load_state_dict(torch.load(tmp_path / "m.pt", map_location="cpu"))
    assert torch.equal(loaded.weight, module.weight.cpu())
