"""The arguments that name a model and where it runs, shared by the subcommands that load one.

>>> command = argparse.ArgumentParser(prog="repo-lens trace", exit_on_error=False)
>>> add_model_arguments(command)
>>> add_device_map_arguments(command)
>>> command.parse_args(["--model", "zoo:repo-tiny", "--device-map", "balanced", "--gpus-per-rank", "2"])
Namespace(model='zoo:repo-tiny', revision=None, graft=None, device_map='balanced', gpus_per_rank=2)
>>> command.parse_args(["--model", "zoo:smollm2-135m", "--graft", "checkpoints/delta_mlp.pt"]).graft
'checkpoints/delta_mlp.pt'
>>> try:
...     command.parse_args(["--model", "zoo:repo-tiny", "--gpus-per-rank", "0"])
... except argparse.ArgumentError as error:
...     print(error)
argument --gpus-per-rank: must be ≥ 1, got 0
"""

from __future__ import annotations

import argparse

from repo_lens.cli_args import model_name, positive_int


def add_model_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--model", required=True, type=model_name,
                         help="checkpoint directory, zoo:NAME or Hugging Face Hub id org/name")
    command.add_argument("--revision", default=None,
                         help="with a Hub id: branch, tag or commit hash (default: main); a gated or private "
                              "repository reads the token in HF_TOKEN or the saved Hugging Face login")
    command.add_argument("--graft", default=None, type=graft_file, metavar="PATH",
                         help="the learned-increments post's graft (its delta_mlp.pt) to put onto --model, the "
                              "Llama-family RoPE model it was trained on (docs/guide/authors-checkpoints.md)")


def graft_file(text: str) -> str:
    """An argparse type: the path of a graft file, not empty and without NUL characters.

    >>> graft_file("delta_mlp.pt")
    'delta_mlp.pt'
    """
    if not text.strip() or "\x00" in text:
        raise argparse.ArgumentTypeError(f"must be the path of the post's delta_mlp.pt, got {text!r:.80}")
    return text


def add_device_map_arguments(command: argparse.ArgumentParser) -> None:
    command.add_argument("--device-map", choices=["auto", "balanced", "sequential"], default=None,
                         help="spread a model too big for one GPU over this rank's GPUs (docs/big_checkpoints.md)")
    command.add_argument("--gpus-per-rank", type=positive_int, default=None,
                         help="with --device-map: GPUs per rank, rank r on GPUs r*K..r*K+K-1 of its node "
                              "(default: the node's GPUs divided among its ranks)")
