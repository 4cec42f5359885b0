"""Review of issue 9 by a test-writing helper, finding 3. A process that destroys its neuron process group while a DDP module still holds it hangs
forever when the DDP module is freed (here: `del ddp`; in a script: at exit, or when the
Trainer / model is garbage collected).

gdb (2 threads of one rank):
  main thread, holding the GIL (a Python decref):
    ~Reducer -> ~ProcessGroup -> torch_neuron::ProcessGroupNeuron::~ProcessGroupNeuron
    (ProcessGroupNeuron.cpp, transport_ reset) -> c10d::ProcessGroupGloo::~ProcessGroupGloo
    -> std::thread::join (Gloo's worker thread)
  Gloo's worker thread "pt_gloo_runloop":
    torch_neuron::NeuronWork::~NeuronWork (ProcessGroupNeuron.cpp:350) -> ~IValue ->
    ~ListImpl -> TensorImpl::decref_pyobject -> gil_scoped_acquire -> take_gil   (waits)
The last reference to a NeuronWork (its value_: the output tensors, which have Python objects)
is dropped on Gloo's thread (the transport future's callback captures the work), and that needs
the GIL, which the thread joining Gloo's thread holds. PyTorch's own bindings release the GIL in
a process group's destructor (IntrusivePtrNoGilDestructor in torch/csrc/distributed/c10d/init.cpp).

NEURON_SIM_SHM_COLLECTIVES=0 (Gloo only, as across hosts) is set here: the shared-memory path
sends fewer works through Gloo's thread. Run several times (ROUNDS, default 6): each round is
a fresh pair of processes; the script exits 1 if a round hangs (40 s).
Exits 1 while the bug exists."""
import os, subprocess, sys, tempfile

CHILD = r'''
import datetime, os, sys, torch, torch.distributed as dist, torch.nn as nn
import torch_neuronx  # noqa
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=20))
torch.manual_seed(0)
ddp = DDP(nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)]).to("neuron"), bucket_cap_mb=0.005)
for _ in range(3):
    ddp(torch.randn(4, 32).to("neuron")).sum().backward()
dist.destroy_process_group()
print("destroyed", flush=True)
del ddp  # the Reducer held the last reference to the process group
print("freed", flush=True)
'''

def one_round(port):
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", NEURON_SIM_SHM_COLLECTIVES="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    hung = []
    for r, p in enumerate(procs):
        try:
            out = p.communicate(timeout=40)[0]
            if p.returncode != 0:
                print(f"rank {r} failed ({p.returncode}):\n{out[-2000:]}")
                hung.append(r)
        except subprocess.TimeoutExpired:
            p.kill()
            out = p.communicate()[0]
            last = [l for l in out.splitlines() if l in ("destroyed", "freed")]
            print(f"rank {r} hung (40 s); its last line: {last[-1] if last else 'none'}")
            hung.append(r)
    return hung

if __name__ == "__main__":
    import socket
    bad = 0
    for i in range(int(os.environ.get("ROUNDS", "6"))):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
        hung = one_round(port)
        print(f"round {i}: {'hung/failed ranks ' + str(hung) if hung else 'ok'}", flush=True)
        bad += bool(hung)
    sys.exit(1 if bad else 0)
