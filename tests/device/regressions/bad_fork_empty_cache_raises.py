"""Review of issue 39, finding 3: in a child forked after the parent started the runtime (a bad fork), torch.neuron.empty_cache()
and the memory statistics raise "cannot re-initialize the neuron runtime in a forked subprocess".
torch.cuda's are no-ops there (empty_cache: `if is_initialized()`, memory_stats: `if not is_initialized():
return {}`, and is_initialized() is False in a bad fork). The change's guard in
neuron_allocator_empty_cache() tests Runtime::initialized(), which the child inherits as true.
Expected: both return quietly in the child (PASS)."""
import os, sys
import torch, torch_neuronx  # noqa: F401

torch.ones(1, device="neuron")  # the parent uses the device


def child(body):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            text = "ok " + repr(body())
        except Exception as error:  # noqa: BLE001
            text = type(error).__name__ + ": " + str(error)[:70]
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    text = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    return text


failed = False
print("child: _is_in_bad_fork:", child(torch.neuron._is_in_bad_fork), " is_initialized:", child(torch.neuron.is_initialized))
for name, body in [("torch.neuron.empty_cache()", torch.neuron.empty_cache),
                   ("torch.neuron.memory_allocated()", torch.neuron.memory_allocated)]:
    got = child(body)
    bad = not got.startswith("ok")
    failed |= bad
    print(f"child: {name:32s} -> {got}  [{'FAIL' if bad else 'ok'}]")
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
