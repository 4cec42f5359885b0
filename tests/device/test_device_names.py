"""Device names as AWS's package reports them (../shared/reference/torchneuron-facts.md,
section 5): get_device_name(i) is "neuron:i" and get_device_properties(i).name the instance
type ("trn1", "trn2", "trn3"); ours says it is simulated in `.is_simulated`, not in the name.

torchtitan's MFU reads both: torchtitan/components/metrics.py passes get_device_name(device)
to torchtitan/tools/utils.py get_peak_flops, which needs "neuron" in it and then matches
get_device_properties().name against its lists (added in pytorch/torchtitan 353c0643, #2382;
unchanged in the torchtitan 0.3.0 wheel and at b5bcd76c)."""
import importlib.util
import json
import textwrap

import pytest
import torch

from conftest import run_python

NAMES = textwrap.dedent("""
    import json, torch, torch_neuronx
    props = torch.neuron.get_device_properties(1)
    print(json.dumps([torch.neuron.get_device_name(1), props.name, props.is_simulated,
                      props.logical_nc_config]))
""")

# (settings, get_device_properties().name, LNC)
PLATFORMS = [
    ({"NEURON_SIM_PLATFORM": "trn1"}, "trn1", 1),
    ({"NEURON_SIM_PLATFORM": "trn2"}, "trn2", 2),
    ({"NEURON_SIM_PLATFORM": "trn2", "NEURON_LOGICAL_NC_CONFIG": "1"}, "trn2", 1),
    ({"NEURON_SIM_PLATFORM": "trn3"}, "trn3", 2),
]


def torchtitan_peak_flops(device_name, properties_name):
    """The neuron branch of torchtitan's get_peak_flops (torchtitan/tools/utils.py, torchtitan
    0.3.0), with the fallback it takes for every device name without "neuron" in it."""
    if "neuron" not in device_name:
        return 312e12, f"Peak flops undefined for: {device_name}, fallback to A100"
    if properties_name in ("trn1", "trn1n", "inf2"):
        return 90e12 * 1, None
    if properties_name in ("trn2", "trn2n", "trn2u", "trn3", "trn3u"):
        return 79e12 * 2, None
    return 79e12 * 2, f"Unknown neuron device: {properties_name}, fallback to trn2/trn3"


def test_names_in_this_process():
    assert torch.neuron.get_device_name(0) == "neuron:0"
    assert torch.neuron.get_device_name(torch.device("neuron:3")) == "neuron:3"
    assert torch.neuron.get_device_name() == f"neuron:{torch.neuron.current_device()}"
    props = torch.neuron.get_device_properties(0)
    assert props.name == "trn2" and props.is_simulated is True
    assert "name='trn2'" in repr(props) and "is_simulated=True" in repr(props)
    with pytest.raises(IndexError, match="out of range"):
        torch.neuron.get_device_name(4)


@pytest.mark.parametrize("settings,name,lnc", PLATFORMS, ids=["trn1", "trn2", "trn2-lnc1", "trn3"])
def test_names_per_platform(settings, name, lnc):
    result = run_python(NAMES, env=settings)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == ["neuron:1", name, True, lnc]


@pytest.mark.parametrize("settings,name,lnc", PLATFORMS, ids=["trn1", "trn2", "trn2-lnc1", "trn3"])
def test_torchtitan_matches_our_names(settings, name, lnc):
    peak, warning = torchtitan_peak_flops("neuron:0", name)
    assert warning is None
    # TensorEngine BF16 per logical core: 90 TFLOPS on a trn1 core, 79 per physical NeuronCore-v3/v4
    # times LNC 2 on trn2/trn3. torchtitan assumes the platform's default LNC, so a trn2 at LNC=1
    # (79 TFLOPS per core) reads 2x its peak there, as it does on a real trn2 at LNC=1.
    expected = {"trn1": 90e12, "trn2": 158e12, "trn3": 158e12}[name]
    assert peak == expected


@pytest.mark.skipif(importlib.util.find_spec("torchtitan") is None,
                    reason="torchtitan is not installed (test_torchtitan_matches_our_names has its matching)")
@pytest.mark.parametrize("settings,name,lnc", PLATFORMS, ids=["trn1", "trn2", "trn2-lnc1", "trn3"])
def test_torchtitan_get_peak_flops(settings, name, lnc):
    code = textwrap.dedent("""
        import torch, torch_neuronx
        from torchtitan.tools import utils
        assert utils.device_type == "neuron"
        print(utils.get_peak_flops(utils.device_module.get_device_name(torch.device("neuron:0"))))
    """)
    result = run_python(code, env=settings, timeout=300)
    assert result.returncode == 0, result.stderr
    assert float(result.stdout.splitlines()[-1]) == torchtitan_peak_flops("neuron:0", name)[0]
    assert "Unknown neuron device" not in result.stderr and "Peak flops undefined" not in result.stderr
