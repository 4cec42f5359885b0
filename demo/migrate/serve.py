"""The team's current serving script (CUDA), scanned by neuron-migrate for CUDA-only code."""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

device = "cuda" if torch.cuda.is_available() else "cpu"
tokenizer = AutoTokenizer.from_pretrained("demo/model")
model = AutoModelForCausalLM.from_pretrained("demo/model", dtype=torch.bfloat16).cuda()
model.forward = torch.compile(model.forward, mode="reduce-overhead")


def answer(prompt):
    inputs = tokenizer(prompt, return_tensors="pt").to(device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model.generate(**inputs, max_new_tokens=32)
    torch.cuda.synchronize()
    return tokenizer.decode(out[0])
