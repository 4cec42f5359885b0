"""The workload's model and inputs, built the same way on every device: same weights (loaded
once on the CPU, then copied), same precision, same token ids."""
import dataclasses
import importlib.util
import os

import torch

from .fit import DTYPES


@dataclasses.dataclass
class Request:
    """One request: a batch of prompts of one length (token ids on the CPU)."""
    input_ids: torch.Tensor
    label: str  # "b2xL16"

    @property
    def shape(self):
        return tuple(self.input_ids.shape)


@dataclasses.dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: object  # None for factory / random models without a tokenizer
    config: object  # transformers config, or None for a factory model
    is_hf: bool  # has generate() and HF outputs


def build_cpu_model(workload):
    """The model on the CPU in the workload's dtype, in eval mode (weights seeded for random_init)."""
    dtype = DTYPES[workload.model.dtype]
    torch.manual_seed(workload.seed)
    if workload.model.factory:
        file, function = workload.model.factory.rsplit(":", 1)
        path = workload.resolve(file)
        spec = importlib.util.spec_from_file_location(f"neuron_migrate_factory_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model = getattr(module, function)()
        return LoadedModel(model.to(dtype).eval(), None, getattr(model, "config", None),
                           hasattr(model, "generate") and hasattr(model, "config"))
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    path = workload.resolve(workload.model.path)
    if workload.model.random_init:
        config = AutoConfig.from_pretrained(path)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, revision=workload.model.revision)
        config = model.config
    tokenizer = None
    if any(name.startswith("tokenizer") for name in os.listdir(path)):
        tokenizer = AutoTokenizer.from_pretrained(path)
    return LoadedModel(model.eval(), tokenizer, config, True)


def copy_to(loaded, device):
    """A copy of the CPU model on `device` (same weights)."""
    import copy
    model = copy.deepcopy(loaded.model).to(device)
    return LoadedModel(model.eval(), loaded.tokenizer, loaded.config, loaded.is_hf)


def vocab_size(loaded, workload):
    limit = workload.inputs.vocab_limit
    size = getattr(loaded.config, "vocab_size", None) or getattr(loaded.model, "vocab_size", None)
    if size is None and limit is None:
        raise ValueError("inputs.vocab_limit: needed for a model without config.vocab_size")
    return min(size or limit, limit or size)


def requests(loaded, workload):
    """The workload's shape distribution as requests: every text prompt and every random
    prompt length, at every batch size (random rows drawn with the workload's seed). Labels
    name the shape and are unique ("b1xL7", then "b1xL7#2" for another request of that shape)."""
    generator = torch.Generator().manual_seed(workload.seed)
    prompts = []
    for text in workload.inputs.prompts:
        if loaded.tokenizer is None:
            raise ValueError("inputs.prompts: text prompts need a tokenizer in the model folder "
                             "(use inputs.prompt_lengths for random-token prompts)")
        prompts.append(("text", loaded.tokenizer(text, return_tensors="pt")["input_ids"][0]))
    low = 3 if loaded.tokenizer is not None else 0  # keep clear of special ids (pad, bos, eos)
    high = vocab_size(loaded, workload)
    result = []
    for batch in workload.inputs.batch_sizes:
        for kind, ids in prompts:
            rows = ids.unsqueeze(0).repeat(batch, 1)
            result.append(Request(rows, f"b{batch}xL{rows.shape[1]}"))
        for length in workload.inputs.prompt_lengths:
            rows = torch.randint(low, high, (batch, length), generator=generator)
            result.append(Request(rows, f"b{batch}xL{length}"))
    seen = {}
    for request in result:  # labels key the saved inputs and the per-request results
        seen[request.label] = seen.get(request.label, 0) + 1
        if seen[request.label] > 1:
            request.label += f"#{seen[request.label]}"
    return result


def training_batches(loaded, workload):
    """`train.steps` batches of random token ids (seeded), the same on every device."""
    generator = torch.Generator().manual_seed(workload.seed + 1)
    high = vocab_size(loaded, workload)
    low = 3 if loaded.tokenizer is not None else 0
    return [torch.randint(low, high, (workload.train.batch_size, workload.train.seq_len), generator=generator)
            for _ in range(workload.train.steps)]


def forward_logits(loaded, input_ids):
    """Logits of one forward pass (no cache)."""
    if loaded.is_hf:
        return loaded.model(input_ids=input_ids, use_cache=False).logits
    out = loaded.model(input_ids)
    return out.logits if hasattr(out, "logits") else out


def causal_lm_loss(loaded, input_ids):
    logits = forward_logits(loaded, input_ids).float()
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                             input_ids[:, 1:].reshape(-1))


def generate(loaded, input_ids, max_new_tokens, streamer=None):
    """Greedy generation of exactly `max_new_tokens` tokens; returns the new token ids.
    HF models use their own generate(); others a plain greedy loop without cache."""
    if loaded.is_hf:
        pad = getattr(loaded.config, "pad_token_id", None)
        eos = getattr(loaded.config, "eos_token_id", None)
        out = loaded.model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                    max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                    do_sample=False, pad_token_id=pad if pad is not None else (eos or 0),
                                    streamer=streamer)
        return out[:, input_ids.shape[1]:]
    ids = input_ids
    if streamer is not None:
        streamer.put(ids)
    for _ in range(max_new_tokens):
        next_ids = forward_logits(loaded, ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, next_ids], dim=1)
        if streamer is not None:
            streamer.put(next_ids)
    if streamer is not None:
        streamer.end()
    return ids[:, input_ids.shape[1]:]
