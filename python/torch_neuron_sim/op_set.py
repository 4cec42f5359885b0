"""TorchNeuron 2.13's op set (Note [Op tracking], csrc/OpTracking.h): data/torchneuron_ops.txt
names the ops it runs on the device ([device]) and those pinned to the CPU ([cpu]), by base
name ("add" for aten::add.Tensor). The file is parsed once per process (sections()); the
package gives it to the bridge at start-up, and the compiler's 64-bit rule reads
on_device() for every graph."""
import functools
import os

FILE = os.path.join(os.path.dirname(__file__), "data", "torchneuron_ops.txt")


def read(path):
    """The [device] and [cpu] sections of an op-set file: two lists of base names, in file
    order. Raises ValueError naming the file and line of an unknown section or of names
    before the first section."""
    sections, current = {"device": [], "cpu": []}, None
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("["):
                current = line.strip("[]")
                if current not in sections:
                    raise ValueError(f"{path}:{number}: unknown section [{current}] (expected [device] or [cpu])")
            elif current is None:
                raise ValueError(f"{path}:{number}: op names before the first [device] or [cpu] section")
            else:
                sections[current].extend(line.split())
    return sections["device"], sections["cpu"]


@functools.cache
def sections():
    """read(FILE), parsed once: ([device] names, [cpu] names) as tuples."""
    device, cpu = read(FILE)
    return tuple(device), tuple(cpu)


@functools.cache
def on_device():
    """The base names TorchNeuron runs on the device: listed under [device] and not under [cpu]."""
    device, cpu = sections()
    return frozenset(device) - frozenset(cpu)
