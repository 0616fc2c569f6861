"""The GRAPE authors' checkpoints: their format's names, config, variants and notes."""
