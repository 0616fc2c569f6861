"""The CoPE authors' checkpoints: their names, options and word tokenizer."""
