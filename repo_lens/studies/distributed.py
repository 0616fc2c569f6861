"""Data-parallel runs under ``torchrun`` / ``accelerate launch``: who this rank is, its share, its device.

The launchers set ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` (and ``LOCAL_WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``). Outside a launcher the process is rank 0 of 1, no process group
is made and no barrier is waited for. The ranks exchange no tensors, only barriers, so the group
this module makes is gloo's, on GPUs too: it needs no CUDA context on any GPU, whichever GPUs a
rank's model sits on (one, several with ``device_map``, or one shared).

Example:
    >>> ranks = ranks_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    >>> ranks, ranks.distributed, ranks.is_main
    (Ranks(rank=1, world_size=2, local_rank=1, local_world_size=2), True, False)
    >>> share(list("abcdefg"), ranks, block=2)
    ['c', 'd', 'g']
    >>> rank_device("cpu", ranks), rank_gpus(ranks, gpus_per_rank=3)
    ('cpu', [3, 4, 5])
    >>> shard_size_for_ranks(256, total=100, ranks=ranks)  # 100 documents, 2 ranks: 2 shards of 50, not 1 of 100
    50
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from repo_lens.errors import InputError

T = TypeVar("T")
# How long a rank that finished its share waits for the slowest one (torch's default, 30 min, is
# shorter than the spread of a long corpus run); a rank that dies ends the run sooner (torchrun).
BARRIER_TIMEOUT = timedelta(days=2)


@dataclass(frozen=True)
class Ranks:
    """This process's place in a data-parallel run (rank 0 of 1 outside a launcher)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that merges results and prints."""
        return self.rank == 0


def ranks_from_env(environ: Mapping[str, str] | None = None) -> Ranks:
    """The :class:`Ranks` that ``torchrun`` / ``accelerate launch`` (or SLURM + torchrun) put in the environment.

    >>> ranks_from_env({})
    Ranks(rank=0, world_size=1, local_rank=0, local_world_size=1)
    >>> ranks_from_env({"RANK": "2", "WORLD_SIZE": "2"})
    Traceback (most recent call last):
    repo_lens.errors.InputError: RANK=2 is not below WORLD_SIZE=2; a launcher sets 0 <= RANK < WORLD_SIZE
    """
    environ = os.environ if environ is None else environ
    world_size = _env_int(environ, "WORLD_SIZE", 1)
    rank = _env_int(environ, "RANK", 0)
    local_rank = _env_int(environ, "LOCAL_RANK", rank)
    local_world_size = _env_int(environ, "LOCAL_WORLD_SIZE", world_size)
    if world_size < 1:
        raise InputError(f"WORLD_SIZE={world_size} is not a number of processes; it must be 1 or more")
    if not 0 <= rank < world_size:
        raise InputError(f"RANK={rank} is not below WORLD_SIZE={world_size}; a launcher sets 0 <= RANK < WORLD_SIZE")
    if not 0 <= local_rank < max(local_world_size, 1):
        raise InputError(f"LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world_size}; "
                         "a launcher sets 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE")
    return Ranks(rank, world_size, local_rank, local_world_size)


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name, "")
    if not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{name}={text!r} is not an integer; unset it or let torchrun / accelerate set it") from None


def share(items: Sequence[T], ranks: Ranks, block: int = 1) -> list[T]:
    """This rank's share of ``items``: blocks of ``block`` consecutive items dealt round-robin over
    the ranks (so a batch of ``block`` inputs stays on one rank); the same on every rank, whatever
    the timing.

    >>> [share(range(5), Ranks(rank, 2, rank, 2)) for rank in (0, 1)]
    [[0, 2, 4], [1, 3]]
    """
    if block < 1:
        raise InputError(f"block={block} must be a positive number of items")
    return [item for index, item in enumerate(items) if (index // block) % ranks.world_size == ranks.rank]


def shard_size_for_ranks(largest: int, total: int, ranks: Ranks) -> int:
    """Items per shard when the caller named none: ``largest`` (a study's default), or fewer when
    ``total`` items in shards of ``largest`` would leave ranks with nothing or with very unequal shares,
    so that every rank gets about ``total / world_size`` items. A single process keeps ``largest``.

    >>> [shard_size_for_ranks(256, total, Ranks(0, 4, 0, 4)) for total in (7, 300, 10_000)]
    [2, 75, 256]
    >>> shard_size_for_ranks(256, 7, Ranks())
    256
    """
    if not ranks.distributed or total <= 0:
        return largest
    return max(1, min(largest, -(-total // ranks.world_size)))


def idle_ranks_warning(n_shards: int, total: int, ranks: Ranks) -> str | None:
    """What to tell the user when a run's ``n_shards`` leave ranks idle (None when every rank has one).

    >>> print(idle_ranks_warning(1, 100, Ranks(0, 2, 0, 2)))
    1 shard(s) for 2 ranks: rank(s) 1 have nothing to do; pass --shard-size 50 (shard_size=50) so that every rank gets a share, or start fewer ranks
    """
    if n_shards >= ranks.world_size or total <= 0:
        return None
    idle = f"{n_shards}" if n_shards == ranks.world_size - 1 else f"{n_shards}-{ranks.world_size - 1}"
    size = shard_size_for_ranks(max(total, 1), total, ranks)
    return (f"{n_shards} shard(s) for {ranks.world_size} ranks: rank(s) {idle} have nothing to do; pass "
            f"--shard-size {size} (shard_size={size}) so that every rank gets a share, or start fewer ranks")


def rank_device(device: str, ranks: Ranks) -> str:
    """The device this rank loads its model on: ``"auto"`` in a distributed run is ``cuda:LOCAL_RANK``
    when CUDA is present (an error if this rank has no GPU of its own), else ``cpu``; any other
    choice, and ``"auto"`` in a single process, is passed on unchanged."""
    if str(device) != "auto" or not ranks.distributed:
        return device
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    count = torch.cuda.device_count()
    if ranks.local_rank >= count:
        raise InputError(f"LOCAL_RANK {ranks.local_rank} has no GPU of its own ({count} visible); start at most "
                         f"{count} ranks per node (--nproc-per-node {count}) or pass --device cpu / cuda:N")
    return f"cuda:{ranks.local_rank}"


def rank_gpus(ranks: Ranks, gpus_per_rank: int) -> list[int]:
    """The GPUs of this rank when each of the node's ranks spreads its model over ``gpus_per_rank``:
    ``LOCAL_RANK * k`` .. ``LOCAL_RANK * k + k - 1``."""
    if gpus_per_rank < 1:
        raise InputError(f"gpus_per_rank={gpus_per_rank} must be 1 or more")
    first = ranks.local_rank * gpus_per_rank
    return list(range(first, first + gpus_per_rank))


def load_placement(device: str, device_map: str | None, ranks: Ranks,
                   gpus_per_rank: int | None = None) -> dict[str, Any]:
    """Keyword arguments for :func:`repo_lens.load` that put this rank's model on its own device(s).

    Without ``device_map``: ``{"device": rank_device(device, ranks)}``. With it (a model too big for
    one GPU): the model is spread over this rank's ``gpus_per_rank`` GPUs (default: the visible GPUs
    divided among the node's ranks), ``max_memory`` naming only those, so ranks never share a GPU.

    >>> load_placement("auto", None, Ranks())
    {'device': 'auto'}
    """
    if device_map is None:
        return {"device": rank_device(device, ranks)}
    import torch

    if not torch.cuda.is_available():
        return {"device_map": device_map}
    count = torch.cuda.device_count()
    per_rank = gpus_per_rank if gpus_per_rank is not None else count // ranks.local_world_size
    if per_rank < 1 or per_rank * ranks.local_world_size > count:
        raise InputError(f"{ranks.local_world_size} rank(s) per node x {per_rank} GPU(s) per rank needs "
                         f"{max(per_rank, 1) * ranks.local_world_size} GPUs, {count} visible; lower --gpus-per-rank "
                         "or --nproc-per-node")
    gpus = rank_gpus(ranks, per_rank)
    return {"device_map": device_map,
            "max_memory": {gpu: int(0.9 * torch.cuda.get_device_properties(gpu).total_memory) for gpu in gpus}}


class Session:
    """Barriers between the ranks of a run; every method is a no-op in a single process."""

    def __init__(self, ranks: Ranks, nccl: bool = False) -> None:
        self.ranks = ranks
        self._nccl = nccl  # a group the caller made with nccl (e.g. accelerate's): barriers need the rank's GPU

    def barrier(self) -> None:
        """Wait until every rank got here."""
        if not self.ranks.distributed:
            return
        import torch.distributed as dist

        if self._nccl:
            import torch

            dist.barrier(device_ids=[torch.cuda.current_device()])
        else:
            dist.barrier()


@contextmanager
def session(ranks: Ranks | None = None) -> Iterator[Session]:
    """A :class:`Session` for the ``with`` block: in a distributed run, a gloo process group is made
    (from the launcher's ``MASTER_ADDR`` / ``MASTER_PORT``) unless the caller already made one, and
    destroyed again at the end if made here.

    >>> with session(Ranks()) as ranks_of_run:
    ...     ranks_of_run.barrier()  # a single process: nothing to wait for
    """
    ranks = ranks_from_env() if ranks is None else ranks
    if not ranks.distributed:
        yield Session(ranks)
        return
    import torch.distributed as dist

    made_here = not dist.is_initialized()
    if made_here:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name)]
        if missing:
            raise InputError(f"WORLD_SIZE={ranks.world_size} but {', '.join(missing)} unset; start the run with "
                             "torchrun / accelerate launch, or set MASTER_ADDR and MASTER_PORT for every rank")
        dist.init_process_group("gloo", rank=ranks.rank, world_size=ranks.world_size, timeout=BARRIER_TIMEOUT)
    try:
        yield Session(ranks, nccl=not made_here and dist.get_backend() == "nccl")
    finally:
        if made_here:
            dist.destroy_process_group()
