"""NKI (the Neuron Kernel Interface) entry points of AWS's package.

NKI kernels are compiled by neuronx-cc for the NeuronCore's engines; the simulator has
neither, so these names exist (a script that imports them loads) but using them raises an
error that says what to do instead."""

_MESSAGE = ("{name}: NKI kernels are compiled by neuronx-cc for real NeuronCores, which the "
            "simulated neuron device does not have. Give the operation a PyTorch implementation "
            "(for example a torch.library.custom_op with a CPU kernel, which runs on the simulated "
            "device), and keep the NKI kernel for runs on Trainium.")


def nki_op(*args, **kwargs):
    """Registers an NKI kernel as a PyTorch op on Trainium; not available in the simulator."""
    raise NotImplementedError(_MESSAGE.format(name="torch_neuronx.nki_op"))


def wrap_nki(*args, **kwargs):
    """Wraps an NKI kernel for PyTorch tensors on Trainium; not available in the simulator."""
    raise NotImplementedError(_MESSAGE.format(name="torch_neuronx.wrap_nki"))
