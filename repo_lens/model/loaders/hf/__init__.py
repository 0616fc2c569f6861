"""Hugging Face layouts (config.json, safetensors shards, pickled .bin, the Hub, tokenizers) and GGUF files."""
