"""Review of issue 39, finding 2: torch.neuron's memory statistics start the runtime. torch.cuda.memory_allocated() /
memory_stats() / memory_reserved() return 0 / {} without creating a context (memory_stats checks
is_initialized()), so a process that only logged memory may still fork a child that uses the
device. Here each call flips torch.neuron._initialized to True and a child forked afterwards is in
a bad fork (cannot use the device), contrary to Note [Counting devices without starting the runtime].
Expected: _initialized stays False and the forked child can use the device (PASS)."""
import os, subprocess, sys, textwrap

CODE = textwrap.dedent("""
    import os, torch, torch_neuronx
    r = {call}
    started = torch.neuron._initialized
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            text = str(torch.ones(2, device="neuron").sum().item())
        except Exception as error:
            text = type(error).__name__ + ": " + str(error)[:60]
        os.write(write, text.encode()); os._exit(0)
    os.close(write)
    child = os.read(read, 4096).decode(); os.waitpid(pid, 0)
    print(repr(r), "| _initialized:", started, "| child:", child)
""")
failed = False
for call in ("torch.neuron.memory_allocated()", "torch.neuron.memory_reserved()",
             "torch.neuron.max_memory_allocated()", "len(torch.neuron.memory_stats())"):
    p = subprocess.run([sys.executable, "-c", CODE.format(call=call)], capture_output=True, text=True, timeout=120)
    line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr[-300:]
    bad = "_initialized: True" in line or "child: 2.0" not in line
    failed |= bad
    print(f"{call:38s} -> {line}  [{'FAIL' if bad else 'ok'}]")
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
