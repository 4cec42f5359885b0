"""Every random op of ATen a user reaches, as calls on the neuron device (tests/kernels/test_rng.py runs
them eagerly, in asynchronous mode and compiled). Each entry: name -> function(device) that
draws and returns a tensor (or a tuple of them); `generator=` entries take a generator too."""
import torch
import torch.nn.functional as F


def _ones(device, *shape, dtype=torch.float32):
    return torch.ones(*shape, device=device, dtype=dtype)


def _probabilities(device):
    return torch.tensor([[0.1, 0.2, 0.3, 0.4]] * 8, device=device)


# name -> f(device, generator): the op with an explicit generator (None: the default one)
OPS = {
    "rand": lambda d, g=None: torch.rand(64, 16, device=d, generator=g),
    "rand.bfloat16": lambda d, g=None: torch.rand(300, device=d, dtype=torch.bfloat16, generator=g),
    "rand.float64": lambda d, g=None: torch.rand(300, device=d, dtype=torch.float64, generator=g),
    "randn": lambda d, g=None: torch.randn(64, 16, device=d, generator=g),
    "randn.complex64": lambda d, g=None: torch.randn(100, device=d, dtype=torch.complex64, generator=g),
    "randint": lambda d, g=None: torch.randint(0, 1000, (500,), device=d, generator=g),
    "randint.wide": lambda d, g=None: torch.randint(-2**40, 2**40, (500,), device=d, generator=g),
    "randperm": lambda d, g=None: torch.randperm(200, device=d, generator=g),
    "rand_like": lambda d, g=None: torch.rand_like(_ones(d, 300), generator=g),
    "randn_like": lambda d, g=None: torch.randn_like(_ones(d, 300), generator=g),
    "randint_like": lambda d, g=None: torch.randint_like(_ones(d, 300), 0, 50, generator=g),
    "uniform_": lambda d, g=None: _ones(d, 300).uniform_(-2, 3, generator=g),
    "uniform_.noncontiguous": lambda d, g=None: _ones(d, 20, 30).t().uniform_(generator=g),
    "normal_": lambda d, g=None: _ones(d, 300).normal_(1.5, 2.0, generator=g),
    "random_": lambda d, g=None: _ones(d, 300).random_(generator=g),
    "random_.to": lambda d, g=None: _ones(d, 300, dtype=torch.int32).random_(7, generator=g),
    "random_.from": lambda d, g=None: _ones(d, 300, dtype=torch.int64).random_(-5, 17, generator=g),
    "random_.full_range": lambda d, g=None: _ones(d, 300, dtype=torch.int64).random_(-2**63, None, generator=g),
    "random_.bool": lambda d, g=None: _ones(d, 300, dtype=torch.bool).random_(generator=g),
    "exponential_": lambda d, g=None: _ones(d, 300).exponential_(2.0, generator=g),
    "cauchy_": lambda d, g=None: _ones(d, 300).cauchy_(generator=g),
    "log_normal_": lambda d, g=None: _ones(d, 300).log_normal_(generator=g),
    "geometric_": lambda d, g=None: _ones(d, 300).geometric_(0.3, generator=g),
    "bernoulli": lambda d, g=None: torch.bernoulli(torch.full((300,), 0.3, device=d), generator=g),
    "bernoulli.p": lambda d, g=None: torch.bernoulli(_ones(d, 300), 0.3, generator=g),
    "bernoulli_.float": lambda d, g=None: _ones(d, 300).bernoulli_(0.4, generator=g),
    "bernoulli_.Tensor": lambda d, g=None: _ones(d, 300).bernoulli_(torch.linspace(0, 1, 300, device=d), generator=g),
    "normal.Tensor_float": lambda d, g=None: torch.normal(_ones(d, 300), 2.0, generator=g),
    "normal.float_Tensor": lambda d, g=None: torch.normal(1.0, _ones(d, 300), generator=g),
    "normal.Tensor_Tensor": lambda d, g=None: torch.normal(_ones(d, 300), _ones(d, 300), generator=g),
    "normal.float_float": lambda d, g=None: torch.normal(0.0, 1.0, (300,), device=d, generator=g),
    "multinomial": lambda d, g=None: torch.multinomial(_probabilities(d), 3, generator=g),
    "multinomial.replacement": lambda d, g=None: torch.multinomial(_probabilities(d), 20, True, generator=g),
    "poisson": lambda d, g=None: torch.poisson(torch.linspace(0, 30, 300, device=d), generator=g),
    "_standard_gamma": lambda d, g=None: torch._standard_gamma(torch.linspace(0.1, 5, 300, device=d), generator=g),
    "_sample_dirichlet": lambda d, g=None: torch._sample_dirichlet(torch.linspace(0.5, 3, 200, device=d).reshape(50, 4), generator=g),
    "binomial": lambda d, g=None: torch.binomial(torch.full((300,), 20.0, device=d),
                                                 torch.linspace(0, 1, 300, device=d), generator=g),
    "rrelu_with_noise": lambda d, g=None: torch.ops.aten.rrelu_with_noise(
        torch.linspace(-1, 1, 300, device=d), _ones(d, 300), 0.1, 0.3, True, generator=g),
}

# name -> f(device): ops without a generator argument (they draw from the device's default)
DEFAULT_ONLY = {
    "dropout": lambda d: F.dropout(_ones(d, 300), 0.5),
    "dropout.bfloat16": lambda d: F.dropout(_ones(d, 300, dtype=torch.bfloat16), 0.3),
    "native_dropout": lambda d: torch.native_dropout(_ones(d, 300), 0.5, True),
    "dropout2d": lambda d: F.dropout2d(_ones(d, 4, 30, 3, 3), 0.5),
    "alpha_dropout": lambda d: F.alpha_dropout(_ones(d, 300), 0.5, training=True),
    "feature_alpha_dropout": lambda d: F.feature_alpha_dropout(_ones(d, 4, 30, 3), 0.5, training=True),
    "_fused_dropout": lambda d: torch._fused_dropout(_ones(d, 300), 0.5),
    "rrelu": lambda d: F.rrelu(torch.linspace(-1, 1, 300, device=d), training=True),
    "sdpa_dropout": lambda d: F.scaled_dot_product_attention(
        _ones(d, 1, 2, 8, 4), _ones(d, 1, 2, 8, 4), torch.arange(64.0, device=d).reshape(1, 2, 8, 4), dropout_p=0.5),
    "dropout_module": lambda d: torch.nn.Dropout(0.5).train()(_ones(d, 300)),
    "kaiming_uniform_": lambda d: torch.nn.init.kaiming_uniform_(torch.empty(30, 10, device=d)),
    "trunc_normal_": lambda d: torch.nn.init.trunc_normal_(torch.empty(300, device=d)),
    "distributions.Normal": lambda d: torch.distributions.Normal(_ones(d, 300), 1.0).sample(),
    "distributions.Gamma": lambda d: torch.distributions.Gamma(_ones(d, 300), 1.0).sample(),
    "distributions.Beta": lambda d: torch.distributions.Beta(_ones(d, 300), 2.0).sample(),
    "distributions.Dirichlet": lambda d: torch.distributions.Dirichlet(_ones(d, 50, 4)).sample(),
    "distributions.Poisson": lambda d: torch.distributions.Poisson(_ones(d, 300) * 4).sample(),
    "distributions.Binomial": lambda d: torch.distributions.Binomial(10, _ones(d, 300) * 0.3).sample(),
    "distributions.Categorical": lambda d: torch.distributions.Categorical(_probabilities(d)).sample((10,)),
    "distributions.Bernoulli": lambda d: torch.distributions.Bernoulli(_ones(d, 300) * 0.5).sample(),
    "distributions.Exponential": lambda d: torch.distributions.Exponential(_ones(d, 300)).sample(),
    "distributions.Gumbel": lambda d: torch.distributions.Gumbel(_ones(d, 300), 1.0).sample(),
    "distributions.Multinomial": lambda d: torch.distributions.Multinomial(10, _probabilities(d)).sample(),
}

# Ops compiled with torch.compile(backend="neuron") (functions of a device tensor).
COMPILED = {
    "rand_like": lambda x: torch.rand_like(x) + x,
    "randn_like": lambda x: torch.randn_like(x) * x,
    "randint_like": lambda x: torch.randint_like(x, 0, 100) + x,
    "uniform_": lambda x: x.clone().uniform_(-1, 1),
    "normal_": lambda x: x.clone().normal_(),
    "bernoulli.p": lambda x: torch.bernoulli(x, 0.3),
    "bernoulli": lambda x: torch.bernoulli(x * 0.5),
    "exponential_": lambda x: x.clone().exponential_(),
    "dropout": lambda x: F.dropout(x, 0.5, training=True),
    "rand": lambda x: torch.rand(x.shape, device=x.device) + x,
    "randn": lambda x: torch.randn(x.shape, device=x.device) + x,
    "randn.bfloat16": lambda x: torch.randn(x.shape, device=x.device, dtype=torch.bfloat16) * x,
    "randint": lambda x: torch.randint(0, 10, x.shape, device=x.device) + x,
    "randint.int32": lambda x: torch.randint(-5, 5, x.shape, device=x.device, dtype=torch.int32) * x,
    "randperm": lambda x: torch.randperm(x.numel(), device=x.device).view(x.shape) + x,
    "randint_like.Tensor": lambda x: torch.randint_like(x, torch.tensor(10)) + x,  # high: a CPU scalar, as on CUDA
    "randint_like.low_dtype": lambda x: torch.randint_like(x, 3, 9, dtype=torch.int64) + x,
}


def as_cpu(value):
    if isinstance(value, tuple):
        return tuple(as_cpu(v) for v in value)
    return value.cpu()


def same(a, b):
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b))
    return torch.equal(a, b)


def check_seeding(name, draw):
    """The class check: `draw()` is reproducible under torch.neuron.manual_seed, draws anew on
    the next call, replays after set_rng_state, advances the neuron generator and leaves the
    CPU's default generator alone. Returns a list of what failed."""
    problems = []
    cpu_state = torch.get_rng_state()
    torch.neuron.manual_seed(11)
    first = as_cpu(draw())
    state = torch.neuron.get_rng_state()
    second = as_cpu(draw())
    torch.neuron.manual_seed(11)
    again = as_cpu(draw())
    torch.neuron.set_rng_state(state)
    replay = as_cpu(draw())
    if not same(first, again):
        problems.append(f"{name}: not reproducible under torch.neuron.manual_seed")
    if not same(second, replay):
        problems.append(f"{name}: set_rng_state does not replay the draw")
    if same(first, second):
        problems.append(f"{name}: two calls drew the same values")
    if int(state[8:].view(torch.int64)) == 0:
        problems.append(f"{name}: the neuron generator's offset did not advance")
    if not torch.equal(torch.get_rng_state(), cpu_state):
        problems.append(f"{name}: the CPU's default generator was used")
    return problems


def check_generator(name, op, device):
    """With a generator of its own, `op` draws from it: reproducible under its manual_seed,
    and neither the device's default generator nor the CPU's moves."""
    problems = []
    cpu_state, default_state = torch.get_rng_state(), torch.neuron.get_rng_state()
    generator = torch.Generator(device=device)
    first = as_cpu(op(device, generator.manual_seed(3)))
    offset = generator.get_offset()
    again = as_cpu(op(device, generator.manual_seed(3)))
    if not same(first, again):
        problems.append(f"{name} (generator): not reproducible under the generator's manual_seed")
    if offset == 0:
        problems.append(f"{name} (generator): the generator's offset did not advance")
    if not torch.equal(torch.neuron.get_rng_state(), default_state):
        problems.append(f"{name} (generator): the device's default generator was used")
    if not torch.equal(torch.get_rng_state(), cpu_state):
        problems.append(f"{name} (generator): the CPU's default generator was used")
    return problems


def check_all(device="neuron"):
    problems = []
    for name, op in OPS.items():
        problems += check_seeding(name, lambda op=op: op(device))
        problems += check_generator(name, op, device)
    for name, op in DEFAULT_ONLY.items():
        problems += check_seeding(name, lambda op=op: op(device))
    return problems
