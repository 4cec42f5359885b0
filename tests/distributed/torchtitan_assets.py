"""The two files torchtitan's llama3 debug config reads from its source repository's tests/assets
(hf_assets_path "./tests/assets/tokenizer" and the dataset "c4_test" at "tests/assets/c4_test"),
which the torchtitan wheel does not ship: made here instead, small and deterministic, with nothing
downloaded. torchtitan is pointed at them through its own command-line overrides
(--hf-assets-path, --dataloader.dataset-path).

- tokenizer/: a byte-level BPE tokenizer (tokenizer.json, as torchtitan's HuggingFaceTokenizer
  loads first) trained by the `tokenizers` library on the corpus below, 2,000 tokens (the debug
  model's vocabulary is 2,048), with Llama 3's BOS/EOS names in tokenizer_config.json;
- c4_test/data.json: JSON lines with a "text" field, the layout of torchtitan's c4_test (which
  it loads with datasets.load_dataset(path, split="train")).

The corpus is sentences drawn by a seeded random generator from a small grammar: learnable (the
loss falls over ten steps), the same on every machine."""
import json
import os
import random

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
VOCAB_SIZE = 2000

_SUBJECTS = ["the model", "a small network", "the optimizer", "every rank", "the device", "a tensor",
             "the compiler", "the scheduler", "our kernel", "the pipeline", "each expert", "the mesh",
             "a gradient", "the checkpoint", "the tokenizer", "the dataset", "a layer", "the loss"]
_VERBS = ["computes", "shards", "gathers", "reduces", "stores", "loads", "trains", "updates",
          "splits", "sends", "receives", "compiles", "checks", "records", "predicts", "scales"]
_OBJECTS = ["the weights", "its activations", "a batch of tokens", "the attention scores",
            "the learning rate", "every parameter", "the output logits", "a block mask",
            "the hidden states", "the optimizer state", "the embeddings", "each microbatch"]
_TAILS = ["before the next step", "on every rank", "in one launch", "after the backward pass",
          "without a copy", "across the mesh", "at the end of the stage", "twice as fast",
          "as the schedule says", "with a fixed seed", "in bfloat16", "for ten steps"]


def corpus(documents=1200, seed=26):
    rng = random.Random(seed)
    texts = []
    for _ in range(documents):
        sentences = []
        for _ in range(rng.randint(3, 12)):
            words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
            if rng.random() < 0.6:
                words.append(rng.choice(_TAILS))
            number = rng.randint(0, 999)
            if rng.random() < 0.3:
                words.append(f"at step {number}")
            sentence = " ".join(words)
            sentences.append(sentence[0].upper() + sentence[1:] + rng.choice([".", ".", ".", "!", "?"]))
        texts.append(" ".join(sentences))
    return texts


def make_assets(root):
    """Writes root/tokenizer and root/c4_test; returns (tokenizer dir, dataset dir)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = corpus()
    dataset_dir = os.path.join(root, "c4_test")
    os.makedirs(dataset_dir, exist_ok=True)
    with open(os.path.join(dataset_dir, "data.json"), "w") as f:
        for text in texts:
            f.write(json.dumps({"text": text}) + "\n")

    tokenizer_dir = os.path.join(root, "tokenizer")
    os.makedirs(tokenizer_dir, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.save(os.path.join(tokenizer_dir, "tokenizer.json"))
    with open(os.path.join(tokenizer_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS, "add_bos_token": False, "add_eos_token": False,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=1)
    return tokenizer_dir, dataset_dir


if __name__ == "__main__":
    import sys

    print(make_assets(sys.argv[1]))
