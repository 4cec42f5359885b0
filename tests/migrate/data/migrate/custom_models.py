"""Tiny custom models for neuron-migrate's tests (factories named in workload files)."""
import torch


class FilteredLM(torch.nn.Module):
    """A tiny LM that masks banned token ids in its logits with torch.isin: an op outside
    TorchNeuron's native set (it runs on the CPU on Trainium)."""

    def __init__(self, vocab=64, hidden=32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.mix = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, vocab)
        self.register_buffer("banned", torch.tensor([0, 1, 2]))

    def forward(self, input_ids):
        hidden = torch.tanh(self.mix(self.embed(input_ids)))
        logits = self.head(hidden)
        vocab_ids = torch.arange(logits.shape[-1], device=logits.device)
        return logits.masked_fill(torch.isin(vocab_ids, self.banned), -1e4)


class HashedLM(torch.nn.Module):
    """A tiny LM with hashed n-gram features: token ids times a large odd constant, in int64,
    exceed 2**31 (exact on the CPU, wrapped by 32-bit computation)."""

    def __init__(self, vocab=64, hidden=32, buckets=257):
        super().__init__()
        self.buckets = buckets
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.hashed = torch.nn.Embedding(buckets, hidden)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, input_ids):
        previous = torch.nn.functional.pad(input_ids, (1, 0))[:, :-1]
        key = input_ids * 2654435761 + previous * 40503
        bucket = torch.remainder(key, self.buckets)
        return self.head(self.embed(input_ids) + self.hashed(bucket))


def filtered():
    torch.manual_seed(0)
    return FilteredLM()


def hashed():
    torch.manual_seed(0)
    return HashedLM()
