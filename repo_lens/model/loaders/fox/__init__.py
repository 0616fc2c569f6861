"""The FoX authors' package checkpoints: their config and names."""
