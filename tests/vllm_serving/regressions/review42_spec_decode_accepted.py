"""review42: speculative decoding is accepted at startup, then the first request kills the engine.

Bug: NeuronPlatform.check_and_update_config refuses LoRA and pipeline parallelism up front, but not
a speculative_config. The platform's own kernels module registers vLLM's rejection-sampler Triton
kernels as `_unsupported("speculative decoding")` (and leaves EAGLE's vllm.v1.spec_decode.utils
kernels unregistered), so such an engine builds, sizes its KV cache, reports ready, and then the
first step that samples raises NotImplementedError("speculative decoding is not supported on the
neuron platform yet") out of sample_tokens: the engine core dies (checked end to end on the demo
model with speculative_config={"method": "ngram", "num_speculative_tokens": 2, ...}: "ENGINE UP",
then the NotImplementedError on the first generate). Under `vllm serve` that takes the server down
at its first request instead of refusing the flag at startup.

Expected: building the engine config with a speculative_config on the neuron platform raises a
clear error at once (as the platform does for LoRA and pipeline parallelism).

This repro builds vLLM's engine config (EngineArgs.create_engine_config, which calls the platform's
check_and_update_config) without starting an engine.

Fix: in check_and_update_config,
`if vllm_config.speculative_config is not None: raise ValueError("speculative decoding is not
supported on the neuron platform yet")`.
"""
import os
import sys

os.environ.pop("VLLM_TARGET_DEVICE", None)  # the neuron plugin, not vLLM CPU
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DEMO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "demo", "model")


def main():
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform
    assert type(current_platform).__name__ == "NeuronPlatform", type(current_platform).__name__
    args = EngineArgs(model=os.path.normpath(DEMO), max_model_len=256, dtype="float32", enforce_eager=True,
                      kv_cache_memory_bytes=64 << 20,
                      speculative_config={"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3,
                                          "prompt_lookup_min": 1})
    try:
        args.create_engine_config()
    except (ValueError, NotImplementedError) as error:
        if "specul" in str(error).lower():
            print(f"ok: refused at startup: {error}")
            return
        raise
    print("FAIL: a speculative_config is accepted on the neuron platform; the engine would start and die at "
          "its first sampling step (NotImplementedError from the rejection sampler's kernels)")
    sys.exit(1)


if __name__ == "__main__":
    main()
