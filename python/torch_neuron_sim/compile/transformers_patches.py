"""Note [Sliding-window static caches compile once]
transformers' static cache keeps a sliding-window layer's length in a Python int
(StaticSlidingWindowLayer.cumulative_length_int, transformers/cache_utils.py) and branches on it
in update(): not full yet (write at the length), full (roll left by one, write the last slot),
becoming full (a prefill longer than the window). Dynamo guards on that int, and transformers
compiles generate's forward with CompileConfig(dynamic=False) (as TorchNeuron does), so every
decode step of every sliding-window architecture (Mistral, Gemma 2/3, gpt-oss, Cohere 2, ...)
was a new graph until Dynamo's recompile limit sent the rest of the generation back to eager.

For a layer on the neuron device, a one-token update traced by Dynamo takes the branch from the
layer's length tensor (cumulative_length, which transformers already keeps for the not-full
branch) instead: `full = length >= window` as a tensor, the rolled or unrolled cache chosen by
torch.where, the token written at where(full, window - 1, length). It returns what upstream's
branches return (the cache, of the window's size, in the same slot order), so the masks that
generate builds outside the graph (get_mask_sizes) match it, and it never reads the Python int:
one decode graph serves the whole generation, before and after the window fills. The same
update outside Dynamo, multi-token updates (prefills, continuations) and the other devices run
transformers' own code.

The length lives in the tensor from then on: cumulative_length_int becomes a property whose
value the host knows after a transformers update (the prefill sets it) and, after compiled
one-token updates that only the device counted, reads once from the tensor (a host sync; in
generate that is the mask built before each step, where generate syncs anyway). Every branch
of upstream's update leaves the tensor equal to the int (upstream advances the tensor only while
the cache is not full).

Not covered: a forward that reads the length inside the compiled graph itself (called without
position_ids, get_seq_length(); or building its masks in the graph, get_mask_sizes()). After
compiled one-token updates that read is a device read, which breaks the graph; the values stay
right, but such a loop still compiles per token, as transformers' own layer does there (review
43: 20 Dynamo graphs for 14 steps against upstream's 8, both at the recompile limit). generate()
passes position_ids and builds its masks outside the graph, so it never reads it there.

What upstream would do: keep the counter in the tensor and the branches in tensor ops, as here;
this shim goes when transformers does. Relies on: StaticSlidingWindowLayer's update(key_states,
value_states, ...), max_cache_len (the window), keys/values of [batch, heads, window, head_dim],
cumulative_length (0-dim tensor on the layer's device), is_initialized and device, and
cumulative_length_int being set in __init__ and reset. Tests:
tests/compile/test_compile_sliding_window.py."""
import torch

_PATCHED = "_neuron_length_on_device"


def _length(self):
    """cumulative_length_int: known on the host, or read from the device after compiled one-token updates."""
    known = getattr(self, "_host_length", None)
    if known is not None:
        return known
    value = int(self.cumulative_length.item())
    if not torch.compiler.is_compiling():
        self._host_length = value
    return value


def _set_length(self, value):
    self._host_length = value


def _one_token_update(self, key_states, value_states):
    """upstream's update for one token, its branches as tensor ops (no guard on the length)."""
    window = self.max_cache_len
    full = self.cumulative_length >= window
    position = torch.where(full, window - 1, self.cumulative_length).reshape(1)
    keys = torch.where(full, self.keys.roll(-1, dims=-2), self.keys)
    values = torch.where(full, self.values.roll(-1, dims=-2), self.values)
    keys.index_copy_(2, position, key_states)
    values.index_copy_(2, position, value_states)
    self.keys.copy_(keys)  # copied back: the cache keeps its static address
    self.values.copy_(values)
    self.cumulative_length.add_(1)
    self._host_length = None  # only the device knows the length now
    return self.keys, self.values


def install(cache_utils):
    """Patches cache_utils.StaticSlidingWindowLayer (Note [Sliding-window static caches compile once]). Idempotent."""
    layer = getattr(cache_utils, "StaticSlidingWindowLayer", None)
    if layer is None or getattr(layer, _PATCHED, False):
        return
    upstream_update = layer.update

    def update(self, key_states, value_states, *args, **kwargs):
        if (torch.compiler.is_compiling() and self.is_initialized and key_states.shape[-2] == 1
                and self.device.type == "neuron"):
            return _one_token_update(self, key_states, value_states)
        out = upstream_update(self, key_states, value_states, *args, **kwargs)
        if self.device.type == "neuron":  # upstream advances the tensor only while the cache is not full
            self.cumulative_length.fill_(self._host_length)
        return out

    update.__doc__ = upstream_update.__doc__
    update.__wrapped__ = upstream_update
    layer.update = update
    layer.cumulative_length_int = property(_length, _set_length)
    setattr(layer, _PATCHED, True)
