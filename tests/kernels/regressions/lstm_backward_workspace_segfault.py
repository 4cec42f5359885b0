"""Review 11 (the recurrent layers), finding 1. _thnn_fused_lstm_cell_backward_impl with a workspace of the right element count but the
wrong shape ([8, 2] instead of [2, 8] for a [2, 2] gradient) must not crash the process:
either a RuntimeError (a shape check) or a result (CUDA reads the workspace as flat [B, 4H]).
Recurrent.cpp:127 checks only workspace.numel(); chunk(4, 1) of a width-2 workspace gives
2 chunks and gates[2], gates[3] index past the std::vector -> SIGSEGV (whole process).
Run in a child process so the crash is observable. Exit 0 = fixed."""
import subprocess, sys, textwrap

CHILD = textwrap.dedent("""
    import torch, torch_neuronx
    D = "neuron"
    g = torch.randn(2, 2, device=D)
    for ws_shape in [(8, 2), (16, 1)]:   # numel 16 == 4 * g.numel(), width < 4
        try:
            torch.ops.aten._thnn_fused_lstm_cell_backward_impl(g, None, g, g, torch.randn(*ws_shape, device=D), True)
            print("accepted workspace", ws_shape)
        except RuntimeError as e:
            print("RuntimeError for workspace", ws_shape, ":", str(e).splitlines()[0][:120])
    print("DONE", flush=True)
""")
p = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
print(p.stdout.strip())
print("child exit code:", p.returncode, "(-11 = SIGSEGV)")
ok = p.returncode == 0 and "DONE" in p.stdout
sys.exit(0 if ok else 1)
