"""Fallback reporting means what TorchNeuron 2.13 would run on the CPU (Note [Op tracking]),
logged as the real package logs it."""
import os
import textwrap

import pytest
import torch
import torch_neuron_sim
import torch_neuronx

from conftest import run_python

DEVICE_OPS, CPU_OPS = torch_neuron_sim._read_op_set(torch_neuron_sim._OP_SET_FILE)


def base_name(name):
    return name.split("::", 1)[1].split(".", 1)[0]


def test_the_op_set_file_is_complete_and_cites_its_source():
    text = open(torch_neuron_sim._OP_SET_FILE).read()
    assert "torch_api_compatibility.md" in text and "98154b86" in text
    assert len(set(DEVICE_OPS)) > 190 and len(CPU_OPS) == 11
    assert {"add", "mm", "_softmax", "copy_", "view", "_index_put_impl_"} <= set(DEVICE_OPS)
    assert "linalg_qr" in CPU_OPS and "isin" not in DEVICE_OPS


def test_bad_op_set_file_is_named(tmp_path):
    bad = tmp_path / "ops.txt"
    bad.write_text("[device]\nadd\n[gpu]\nmm\n")
    with pytest.raises(ValueError, match=r"ops.txt:3: unknown section \[gpu\]"):
        torch_neuron_sim._read_op_set(str(bad))


def test_fallbacks_are_the_ops_outside_torchneurons_native_set():
    torch_neuronx.clear_op_tracking()
    a = torch.arange(12.0, device="neuron").reshape(3, 4)
    b = a * 2 + 1                       # native: mul, add
    torch.isin(a, b)                     # not in the native set: the CPU on Trainium
    torch.linalg.qr(a @ a.T + torch.eye(3, device="neuron"))  # pinned to the CPU
    torch.special.erfcx(a)               # not in the native set
    fallback, executed = torch_neuronx.get_fallback_ops(), torch_neuronx.get_executed_ops()
    assert {"aten::mul.Tensor", "aten::add.Tensor", "aten::mm"} <= set(executed)
    assert any(name.startswith("aten::isin") for name in fallback)
    assert any(name.startswith("aten::linalg_qr") for name in fallback)
    assert any(name.startswith("aten::special_erfcx") for name in fallback)
    for name in fallback:
        assert base_name(name) not in DEVICE_OPS or base_name(name) in CPU_OPS, name
    for name in executed:
        assert base_name(name) in DEVICE_OPS, name
    # how the simulator ran them is a separate report: every op runs on device memory
    counts = torch_neuronx.get_op_counts()
    assert counts["aten::mul.Tensor"] == {"count": 1, "kernel": "hot", "torchneuron": "device"}
    assert counts["aten::linalg_qr.out"] == {"count": 1, "kernel": "generic", "torchneuron": "cpu"}
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_fallback_ops() == [] and torch_neuronx.get_executed_ops() == []


def test_plain_generate_prints_no_warning_and_reports_only_true_fallbacks():
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        import torch, torch_neuronx
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging
        logging.disable_progress_bar()
        tok = AutoTokenizer.from_pretrained("demo/model")
        model = AutoModelForCausalLM.from_pretrained("demo/model", device_map="neuron")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.generate(**tok("The list", return_tensors="pt").to("neuron"), max_new_tokens=8,
                           do_sample=False)
        print("WARNINGS", len(caught), [str(w.message)[:80] for w in caught])
        print("FALLBACK", sorted(torch_neuronx.get_fallback_ops()))
    """)
    from conftest import ROOT as root
    result = run_python(f"import os; os.chdir({root!r})\n" + code, env={"TORCH_NEURONX_LOG_LEVEL": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert "WARNINGS 0 []" in result.stdout, result.stdout
    assert "[torch_neuronx]" not in result.stderr
    fallback = eval(result.stdout.split("FALLBACK", 1)[1])
    assert fallback, "generate uses isin and argmax, which TorchNeuron runs on the CPU"
    for name in fallback:
        assert base_name(name) not in DEVICE_OPS, name


def test_info_log_level_writes_one_line_per_fallback_op(tmp_path):
    code = textwrap.dedent("""
        import torch, torch_neuronx
        a = torch.arange(6.0, device="neuron")
        for _ in range(3):
            torch.special.erfcx(a); a * 2
    """)
    result = run_python(code, env={"TORCH_NEURONX_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("[torch_neuronx]")]
    assert lines == ["[torch_neuronx] INFO: Operator 'aten::special_erfcx.out' fell back to CPU"] or \
        lines == ["[torch_neuronx] INFO: Operator 'aten::special_erfcx' fell back to CPU"], lines
    log = tmp_path / "neuron.log"
    result = run_python(code, env={"TORCH_NEURONX_LOG_LEVEL": "3", "TORCH_NEURONX_LOG_FILE": str(log)})
    assert result.returncode == 0 and "[torch_neuronx]" not in result.stderr
    text = log.read_text()
    assert "fell back to CPU" in text and "Operator 'aten::mul.Tensor' executed on Neuron" in text
    result = run_python(code, env={"TORCH_NEURONX_LOG_LEVEL": "loud"})
    assert "TORCH_NEURONX_LOG_LEVEL='loud' is not 0 (ERROR)" in result.stderr


def test_a_failing_native_op_counts_as_a_fallback_or_raises_when_fallback_is_off():
    code = textwrap.dedent("""
        import torch, torch_neuronx
        a, b = torch.ones(2, 3, device="neuron"), torch.ones(4, 5, device="neuron")
        try:
            a @ b
        except RuntimeError as error:
            print("ERROR", str(error).splitlines()[0])
        print("FALLBACK", torch_neuronx.get_fallback_ops())
    """)
    default = run_python(code)
    assert default.returncode == 0, default.stderr
    assert "ERROR mat1 and mat2 shapes cannot be multiplied" in default.stdout
    assert "FALLBACK ['aten::mm']" in default.stdout  # TorchNeuron retries it on the CPU
    strict = run_python(code, env={"TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS": "1"})
    assert strict.returncode == 0, strict.stderr
    assert ("ERROR CPU fallback disabled because TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS=1. "
            "Operation aten::mm failed to execute on Neuron") in strict.stdout
