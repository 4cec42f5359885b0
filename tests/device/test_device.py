import importlib.util
import textwrap

import pytest
import torch
import torch_neuronx

from conftest import run_python


def test_device_registered_and_simulated():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == 4  # one trn2 chip, LNC=2
    assert torch_neuronx.is_simulated()
    props = torch.neuron.get_device_properties(0)
    assert props.is_simulated and props.name == "trn2"
    assert props.total_memory == 24 * 2**30
    assert props.platform == "trn2" and props.logical_nc_config == 2


def test_torch_accelerator_reports_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == 4


def test_current_device_and_context_manager():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(2):
        assert torch.neuron.current_device() == 2
        assert torch.empty(3, device="neuron").device == torch.device("neuron:2")
    assert torch.neuron.current_device() == 0
    t = torch.ones(2, device="neuron:3")
    assert t.device.index == 3 and t.cpu().tolist() == [1.0, 1.0]


def test_out_of_range_device_index_is_a_clear_error():
    with pytest.raises(IndexError, match="neuron device index 4 is out of range: valid indices are 0 to 3"):
        torch.empty(2, device="neuron:4")
    with pytest.raises(IndexError, match="NEURON_RT_VISIBLE_CORES"):
        torch.neuron.set_device(7)


def test_hugging_face_libraries_detect_neuron():
    from accelerate.utils import is_neuron_available
    from transformers.utils import is_torch_neuron_available

    assert importlib.util.find_spec("torch_neuronx") is not None
    assert is_torch_neuron_available()
    assert is_neuron_available()


def test_entry_point_autoloads_the_backend():
    result = run_python("import torch; print(torch._C._get_privateuse1_backend_name(), hasattr(torch, 'neuron'))")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["neuron", "True"]


def test_visible_cores_and_platform_settings():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        print(torch.neuron.device_count(), torch.neuron.get_device_properties(0).total_memory >> 30,
              torch.neuron.get_device_properties(1).global_core_index)
        try:
            torch.empty(1, device="neuron:2")
        except IndexError as e:
            print("error:", e)
    """)
    result = run_python(code, env={"NEURON_RT_VISIBLE_CORES": "1-2"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "2 24 2"
    assert "out of range" in lines[1] and "NEURON_RT_VISIBLE_CORES=1-2" in lines[1]

    result = run_python("import torch, torch_neuronx; print(torch.neuron.device_count(), "
                        "torch.neuron.get_device_properties(0).total_memory >> 30)",
                        env={"NEURON_SIM_PLATFORM": "trn1", "NEURON_SIM_CHIPS": "2"})
    assert result.stdout.split() == ["4", "16"], result.stderr
    result = run_python("import torch, torch_neuronx; print(torch.neuron.device_count())",
                        env={"NEURON_LOGICAL_NC_CONFIG": "1"})
    assert result.stdout.split() == ["8"], result.stderr


def test_bad_visible_cores_setting_names_it():
    result = run_python("import torch, torch_neuronx; print(torch.neuron.device_count())",
                        env={"NEURON_RT_VISIBLE_CORES": "9"})
    assert "NEURON_RT_VISIBLE_CORES='9'" in result.stderr
    assert result.stdout.split() == ["0"]
