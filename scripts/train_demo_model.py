#!/usr/bin/env python3
"""Train the tiny demo language model for torch-neuron-sim.

Trains, from scratch and offline:
  * a byte-level BPE tokenizer (vocab 4096) on demo/corpus/python_docs.txt,
    saved as a transformers PreTrainedTokenizerFast (bos/eos/pad tokens), and
  * a tiny LlamaForCausalLM built from a config (no download),
then saves both with save_pretrained() to demo/model/ together with
demo/model/TRAINING.md (command, steps, losses, device) and the corpus
licence.  The corpus comes from scripts/prepare_corpus.py.

Examples (from the repo root):
  python scripts/train_demo_model.py                       # device "neuron", 10 minutes
  python scripts/train_demo_model.py --device cpu --minutes 3
  python scripts/train_demo_model.py --device cpu --steps 500

Afterwards:
  tok = AutoTokenizer.from_pretrained("demo/model")
  model = AutoModelForCausalLM.from_pretrained("demo/model")
"""
from __future__ import annotations

import argparse
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_SEP = "<|endoftext|>"
DEFAULT_CORPUS = os.path.join(REPO, "demo", "corpus", "python_docs.txt")
BOS, EOS, PAD = "<s>", "</s>", "<pad>"
MAX_FOLDER_BYTES = 20 * 1024 * 1024


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="neuron",
                    help='torch device to train on: "neuron" (default, needs torch_neuronx) or "cpu"')
    ap.add_argument("--corpus", default=DEFAULT_CORPUS)
    ap.add_argument("--out", default=os.path.join(REPO, "demo", "model"))
    budget = ap.add_argument_group("budget (the first one reached stops training)")
    budget.add_argument("--minutes", type=float, default=None,
                        help="wall-clock training budget (default 10 if --steps is not given)")
    budget.add_argument("--steps", type=int, default=None, help="number of optimizer steps")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--save-dtype", choices=["float32", "bfloat16"], default="float32",
                    help="dtype of the saved weights (the folder must stay <= 20 MB)")
    ap.add_argument("--no-autocast", action="store_true",
                    help="train in float32 without torch.autocast (for comparison only)")
    ap.add_argument("--sample-prompt", default="The interpreter",
                    help="prompt for the greedy sample written to TRAINING.md ('' to skip)")
    args = ap.parse_args()
    if args.minutes is None and args.steps is None:
        args.minutes = 10.0
    return args


ARGS = parse_args()

import torch  # noqa: E402

# "neuron" is not a device type torch knows until torch_neuronx has been
# imported, so look at the string before calling torch.device().
if ARGS.device.split(":")[0] == "neuron":
    try:
        import torch_neuronx  # noqa: F401  registers the "neuron" device with torch
    except ImportError as exc:
        sys.exit(
            "error: --device neuron needs the torch_neuronx package (the torch-neuron-sim "
            f"backend), which could not be imported: {exc}\n"
            "Build/install it first, or run with --device cpu.")
DEVICE = torch.device(ARGS.device)

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig,  # noqa: E402
                          LlamaForCausalLM, PreTrainedTokenizerFast)


def read_documents(path: str) -> list[str]:
    if not os.path.exists(path) and os.path.abspath(path) == os.path.abspath(DEFAULT_CORPUS):
        # The repository keeps the script, the source note and the licence, not the text: made
        # here from Debian's python3.11-doc package (demo/corpus/SOURCE.md)
        print(f"corpus {path} not found: making it with scripts/prepare_corpus.py", flush=True)
        subprocess.run([sys.executable, os.path.join(REPO, "scripts", "prepare_corpus.py")], check=True)
    if not os.path.exists(path):
        sys.exit(f"error: corpus {path} not found; make it with scripts/prepare_corpus.py")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    return [d.strip() for d in text.split(DOC_SEP) if d.strip()]


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    # Every encoded text starts with <s>, as every training document does.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        model_max_length=ARGS.max_positions, padding_side="left",
        clean_up_tokenization_spaces=False)


def encode_corpus(tokenizer: PreTrainedTokenizerFast, docs: list[str]) -> torch.Tensor:
    ids: list[int] = []
    for enc in tokenizer.backend_tokenizer.encode_batch(docs):  # adds <s>
        ids.extend(enc.ids)
        ids.append(tokenizer.eos_token_id)
    return torch.tensor(ids, dtype=torch.long)


def lr_at(step: int, progress: float) -> float:
    """Linear warm-up, then cosine decay to min_lr_ratio * lr over `progress` in [0, 1]."""
    if step < ARGS.warmup:
        return ARGS.lr * (step + 1) / ARGS.warmup
    cos = 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    return ARGS.lr * (ARGS.min_lr_ratio + (1 - ARGS.min_lr_ratio) * cos)


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def main() -> None:
    random.seed(ARGS.seed)
    torch.manual_seed(ARGS.seed)
    t_start = time.time()

    docs = read_documents(ARGS.corpus)
    tokenizer = train_tokenizer(docs, ARGS.vocab_size)
    data = encode_corpus(tokenizer, docs)
    n_val = max(len(data) // 50, ARGS.seq_len * 8 + 1)  # last 2 % held out
    train_data, val_data = data[:-n_val], data[-n_val:]
    print(f"corpus: {len(docs)} documents, {len(data):,} tokens "
          f"({len(train_data):,} train / {len(val_data):,} held out); "
          f"tokenizer vocab {len(tokenizer)} trained in {time.time() - t_start:.1f}s", flush=True)

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=ARGS.hidden, num_hidden_layers=ARGS.layers,
        num_attention_heads=ARGS.heads, num_key_value_heads=ARGS.kv_heads,
        intermediate_size=ARGS.intermediate, max_position_embeddings=ARGS.max_positions,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id, attention_dropout=0.0)
    model = LlamaForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: LlamaForCausalLM, {n_params / 1e6:.2f} M parameters, "
          f"{ARGS.layers} layers, hidden {ARGS.hidden}", flush=True)
    model.to(DEVICE)
    model.train()

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": ARGS.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=ARGS.lr, betas=(0.9, 0.95), eps=1e-8)

    gen = torch.Generator().manual_seed(ARGS.seed)  # batches are drawn on the CPU

    def batch(src: torch.Tensor, g: torch.Generator | None = None):
        starts = torch.randint(0, len(src) - ARGS.seq_len - 1, (ARGS.batch_size,), generator=g)
        x = torch.stack([src[s:s + ARGS.seq_len + 1] for s in starts.tolist()])
        x = x.to(DEVICE)
        return x[:, :-1], x[:, 1:]

    autocast = torch.autocast(device_type=DEVICE.type, dtype=torch.bfloat16,
                              enabled=not ARGS.no_autocast)

    def evaluate(n_batches: int = 8) -> float:
        model.eval()
        g = torch.Generator().manual_seed(0)
        total = 0.0
        with torch.no_grad():
            for _ in range(n_batches):
                x, y = batch(val_data, g)
                with autocast:
                    logits = model(input_ids=x).logits
                total += torch.nn.functional.cross_entropy(
                    logits.float().flatten(0, 1), y.flatten()).item()
        model.train()
        return total / n_batches

    budget_s = ARGS.minutes * 60 if ARGS.minutes is not None else None
    t0 = time.time()
    step, loss_ema, log = 0, None, []
    print(f"training on {DEVICE} (autocast bf16: {not ARGS.no_autocast}), batch "
          f"{ARGS.batch_size} x {ARGS.seq_len} tokens, budget: "
          f"{ARGS.steps if ARGS.steps else '-'} steps / "
          f"{ARGS.minutes if ARGS.minutes else '-'} minutes", flush=True)
    while True:
        elapsed = time.time() - t0
        if ARGS.steps is not None and step >= ARGS.steps:
            break
        if budget_s is not None and elapsed >= budget_s:
            break
        progress = max(step / ARGS.steps if ARGS.steps else 0.0,
                       elapsed / budget_s if budget_s else 0.0)
        lr = lr_at(step, progress)
        for group in optim.param_groups:
            group["lr"] = lr
        x, y = batch(train_data, gen)
        with autocast:
            logits = model(input_ids=x).logits
        # The labels are already shifted, so compute the loss here (in float32).
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        step += 1
        if step % ARGS.log_every == 0 or step == 1:
            lv = loss.item()
            loss_ema = lv if loss_ema is None else 0.9 * loss_ema + 0.1 * lv
            el = time.time() - t0
            log.append((step, el, lv))
            print(f"step {step:5d}  loss {lv:.3f}  lr {lr:.2e}  {el / 60:5.1f} min  "
                  f"{step / el * 60:6.1f} steps/min  "
                  f"{step * ARGS.batch_size * ARGS.seq_len / el:7.0f} tok/s", flush=True)
    train_s = time.time() - t0
    final_loss = loss.item() if step else float("nan")
    val_loss = evaluate()
    print(f"done: {step} steps in {train_s / 60:.1f} min, last train loss {final_loss:.3f}, "
          f"held-out loss {val_loss:.3f} (perplexity {math.exp(val_loss):.1f})", flush=True)

    # ---- save -----------------------------------------------------------------
    model.to("cpu")
    model.to(getattr(torch, ARGS.save_dtype))
    model.config.dtype = ARGS.save_dtype
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    if os.path.isdir(ARGS.out):
        shutil.rmtree(ARGS.out)
    model.save_pretrained(ARGS.out)
    tokenizer.save_pretrained(ARGS.out)
    lic = os.path.join(os.path.dirname(ARGS.corpus), "LICENSE-PSF.txt")
    if os.path.exists(lic):
        shutil.copy(lic, os.path.join(ARGS.out, "LICENSE-PSF.txt"))

    sample = ""
    if ARGS.sample_prompt:
        tok2 = AutoTokenizer.from_pretrained(ARGS.out)
        m2 = AutoModelForCausalLM.from_pretrained(ARGS.out)
        enc = tok2(ARGS.sample_prompt, return_tensors="pt")
        with torch.no_grad():
            out = m2.generate(**enc, max_new_tokens=40, do_sample=False)
        sample = tok2.decode(out[0], skip_special_tokens=True)
        print(f"sample (greedy, 40 new tokens, on cpu): {sample!r}", flush=True)

    cmd = "python " + " ".join(shlex.quote(a) for a in
                               [os.path.relpath(sys.argv[0], REPO)] + sys.argv[1:])
    curve = "\n".join(f"| {s} | {e / 60:.1f} | {lv:.3f} |" for s, e, lv in log)
    with open(os.path.join(ARGS.out, "TRAINING.md"), "w", encoding="utf-8") as fh:
        fh.write(f"""# Demo model: how it was trained

- **Command** (from the repo root): `{cmd}`
- **Device:** `{DEVICE}` (torch {torch.__version__}), autocast bfloat16: {not ARGS.no_autocast}
- **Steps:** {step} in {train_s / 60:.1f} minutes, batch {ARGS.batch_size} x {ARGS.seq_len} tokens,
  AdamW lr {ARGS.lr} (warm-up {ARGS.warmup}, cosine to {ARGS.min_lr_ratio} x), seed {ARGS.seed}
- **Final training loss:** {final_loss:.3f}; **held-out loss:** {val_loss:.3f}
  (perplexity {math.exp(val_loss):.1f})
- **Model:** LlamaForCausalLM, {n_params / 1e6:.2f} M parameters ({ARGS.layers} layers,
  hidden {ARGS.hidden}, {ARGS.heads} heads, {ARGS.kv_heads} kv heads, intermediate
  {ARGS.intermediate}, max positions {ARGS.max_positions}, tied embeddings), weights saved as
  {ARGS.save_dtype}
- **Tokenizer:** byte-level BPE, vocab {len(tokenizer)}, bos `{BOS}` eos `{EOS}` pad `{PAD}`;
  every encoded text starts with `{BOS}`
- **Corpus:** `{os.path.relpath(ARGS.corpus, REPO)}`, {len(data):,} tokens: the Python
  documentation, PSF License (see `LICENSE-PSF.txt` here and `demo/corpus/SOURCE.md`)
- **Greedy sample** from `{ARGS.sample_prompt!r}`: {sample!r}

| step | minutes | training loss |
| --- | --- | --- |
{curve}
""")
    size = folder_bytes(ARGS.out)
    print(f"saved to {ARGS.out} ({size / 1e6:.1f} MB)", flush=True)
    if size > MAX_FOLDER_BYTES:
        sys.exit(f"error: {ARGS.out} is {size / 1e6:.1f} MB, over the 20 MiB limit; "
                 "use --save-dtype bfloat16 or fewer --layers")


if __name__ == "__main__":
    main()
