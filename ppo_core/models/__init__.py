"""Loading what a run trains and reads: models and tokenizers from a path, a hub name or a packaged GGUF, LoRA
adapters, the precision a model samples in, and the prompts.

- ``paths``: whether a model path can load, and where from (torch-free); ``gguf``: packaged and GGUF models
- ``loading``: causal LMs, tokenizers and the value model, with GPT-2's GELU fused; ``lora``: a loaded model made
  ready to train (gradient checkpointing, adapters, dropout off)
- ``sampling_precision``, ``packed_linear``: faster forwards for sampling on a CPU
- ``generation``: transformers' generate with a run's sampling settings; ``sequences``: token-level helpers
- ``prompt_data``: the prompt sets; ``cache_root``: where built things are cached; ``quiet``: hub logging
"""
