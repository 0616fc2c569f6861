"""repo_lens' own format: full checkpoints, deltas on a base, xz-packed weights."""
