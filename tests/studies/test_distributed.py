"""Studies data-parallel under torchrun / accelerate launch: real 2-rank runs on CPU (gloo)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from repo_lens.cli import main
from repo_lens.errors import InputError
from repo_lens.studies.distributed import (
    Ranks,
    idle_ranks_warning,
    load_placement,
    rank_device,
    rank_gpus,
    ranks_from_env,
    session,
    shard_size_for_ranks,
    share,
)
from repo_lens.studies.shards import chosen_shard_size

pytestmark = pytest.mark.study

LAUNCHER = Path(__file__).with_name("distributed_launcher.py")
MERGED = ("results.json", "results.csv", "summary.json", "run.json")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _niah_args(model: Path, out: Path, *extra: str, shard_size: int = 1) -> list[str]:
    return ["analyze", "--model", str(model), "--study", "niah", "--lengths", "400,480", "--depths", "0,0.5,1",
            "--out", str(out), "--quiet", "--shard-size", str(shard_size), *extra, "--device", "auto"]


def _rank_env(log: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                          "TORCHELASTIC_RUN_ID", "REPO_LENS_RUN_ID")}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "",
            "REPO_LENS_TEST_LOG": str(log), **extra}


def _torchrun(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
               "--master-port", str(_free_port()), str(LAUNCHER), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _by_hand(args: list[str], env: dict[str, str]) -> list[int]:
    """Two ranks started by hand, the launcher's variables set per process; their exit statuses."""
    port = str(_free_port())
    ranks = [subprocess.Popen([sys.executable, str(LAUNCHER), *args], stdout=subprocess.DEVNULL,
                              env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
                                   "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
             for rank in (0, 1)]
    return [process.wait(timeout=300) for process in ranks]


def _logged(log: Path) -> list[tuple[str, str]]:
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()] if log.exists() else []


def _one_process(args: list[str]) -> None:
    """The reference: the same study in one process, single-threaded as the ranks are."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main([*args[:-1], "cpu"]) == 0  # --device auto -> cpu
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def single_run(byte_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    _one_process(_niah_args(byte_model_dir, out))
    return out


@pytest.mark.slow
def test_two_ranks_under_torchrun_merge_the_same_bytes_as_one_process(byte_model_dir, tmp_path):
    """With shards of 2 prompts, batches of 2: a batch stays on one rank, so the records are those of one process."""
    args = {where: _niah_args(byte_model_dir, tmp_path / where, "--batch-size", "2", shard_size=2)
            for where in ("one", "two")}
    _one_process(args["one"])
    log = tmp_path / "log"
    done = _torchrun(args["two"], _rank_env(log))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in MERGED:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    # the work was split by whole shards in order: each shard written once, by its rank
    writers = {name: rank for rank, name in _logged(log)}
    assert len(_logged(log)) == 3 and writers == {"part-000000.json": "0", "part-000001.json": "1",
                                                  "part-000002.json": "0"}
    assert not (tmp_path / "two" / ".repo_lens.lock").exists()


@pytest.mark.slow
def test_a_corpus_study_under_torchrun_gives_the_records_of_one_process(byte_model_dir, tmp_path):
    """positions over a JSON-lines corpus, shards of 2 documents shared by 2 ranks: the same Parquet records."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Document {index}: " + "words and more words " * (index * 9)})
                              + "\n" for index in range(7)))
    args = {where: ["analyze", "--model", str(byte_model_dir), "--study", "positions", "--corpus", str(corpus),
                    "--shard-size", "2", "--out", str(tmp_path / where), "--quiet", "--device", "auto"]
            for where in ("one", "two")}
    _one_process(args["one"])
    done = _torchrun(args["two"], _rank_env(tmp_path / "log"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    import pandas as pd

    one, two = (pd.read_parquet(tmp_path / where / "records") for where in ("one", "two"))
    assert len(one) > 7 and one.equals(two)  # every document, its long ones in several windows
    for name in MERGED:
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes(), name
    assert sorted(rank for rank, _ in _logged(tmp_path / "log")) == ["0", "0", "1", "1"]


@pytest.mark.slow
def test_relaunch_after_a_killed_rank_computes_only_the_missing_items(byte_model_dir, single_run, tmp_path):
    out, log = tmp_path / "run", tmp_path / "log"
    args = _niah_args(byte_model_dir, out)
    killed = _torchrun(args, _rank_env(log, REPO_LENS_TEST_DIE="1:1"))  # rank 1 dies after its first shard
    assert killed.returncode != 0
    assert not (out / "results.json").exists() and not (out / "summary.json").exists()
    survivors = {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in (out / "shards").iterdir()}
    assert 1 <= len(survivors) < 6 and [rank for rank, _ in _logged(log)].count("1") == 1

    log.unlink()
    assert _by_hand(args, _rank_env(log)) == [0, 0]  # relaunched without torchrun: the variables set by hand
    recomputed = [name for _, name in _logged(log)]
    assert sorted(recomputed) == sorted(set(path.name for path in (out / "shards").iterdir()) - set(survivors))
    for name, stamp in survivors.items():
        path = out / "shards" / name
        assert (path.stat().st_ino, path.stat().st_mtime_ns) == stamp, f"{name} was rewritten"
    for name in MERGED:
        assert (out / name).read_bytes() == (single_run / name).read_bytes(), name


@pytest.mark.slow
def test_reproduce_shares_whole_results_among_the_ranks_under_accelerate_launch(tmp_path):
    out, log = tmp_path / "reproduce", tmp_path / "log"
    names = ["third", "first", "second"]
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), str(LAUNCHER),
               "reproduce", *names, "--out", str(out), "--model", "zoo:a", "--model", "zoo:bc", "--quiet"]
    done = subprocess.run(command, env=_rank_env(log, REPO_LENS_TEST_QUICK_STUDIES="1"), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    writers = {name: rank for rank, name in _logged(log)}
    assert len(_logged(log)) == len(writers) == 3 and set(writers.values()) == {"0", "1"}
    for name in names:  # each result written once, by one rank, where one process writes it
        document = json.loads((out / name / "results.json").read_text())
        assert document == {"models": ["zoo:a", "zoo:bc"], "letters": 11 + len(name), "markdown": f"| {name} |"}
    merged = json.loads((out / "distributed_run" / "results.json").read_text())
    assert [record["item"] for record in merged] == names
    # rank 0 alone reports, each result once, in the order asked
    assert [line.split()[1] for line in done.stdout.splitlines() if line.startswith("## ")] == names


def test_shares_are_disjoint_cover_everything_and_keep_blocks_together():
    items = list(range(23))
    for world in (1, 2, 3, 8):
        for block in (1, 4):
            shares = [share(items, Ranks(rank, world, rank, world), block) for rank in range(world)]
            assert sorted(sum(shares, [])) == items
            for rank, part in enumerate(shares):  # whole blocks only, dealt round-robin
                assert all((item // block) % world == rank for item in part)
    with pytest.raises(InputError, match="positive"):
        share(items, Ranks(), block=0)


def test_ranks_from_the_launchers_environment():
    assert ranks_from_env({}) == Ranks(0, 1, 0, 1) and not ranks_from_env({}).distributed
    torchrun = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}
    assert ranks_from_env(torchrun) == Ranks(5, 8, 1, 4)
    for bad, message in (({"WORLD_SIZE": "two"}, "not an integer"), ({"WORLD_SIZE": "0"}, "1 or more"),
                         ({"RANK": "-1", "WORLD_SIZE": "2"}, "not below"),
                         ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "2"},
                          "LOCAL_RANK=3")):
        with pytest.raises(InputError, match=message):
            ranks_from_env(bad)


def test_each_rank_gets_its_own_device_and_gpus(monkeypatch):
    second = Ranks(1, 2, 1, 2)
    assert rank_device("cpu", second) == "cpu" and rank_device("auto", Ranks()) == "auto"
    assert rank_gpus(second, 4) == [4, 5, 6, 7] and rank_gpus(Ranks(), 2) == [0, 1]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rank_device("auto", second) == "cpu"
    assert load_placement("auto", "auto", second) == {"device_map": "auto"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert rank_device("auto", second) == "cuda:1"
    with pytest.raises(InputError, match="LOCAL_RANK 5 has no GPU"):
        rank_device("auto", Ranks(5, 8, 5, 8))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda gpu: type("P", (), {"total_memory": 10 * 2**30}))
    placement = load_placement("auto", "auto", second)  # 4 GPUs, 2 ranks: GPUs 2 and 3 are rank 1's
    assert placement == {"device_map": "auto", "max_memory": {2: 9 * 2**30, 3: 9 * 2**30}}
    with pytest.raises(InputError, match="needs 6 GPUs, 4 visible"):
        load_placement("auto", "auto", second, gpus_per_rank=3)


def test_a_distributed_run_without_a_rendezvous_address_is_refused(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29500")
    with pytest.raises(InputError, match="MASTER_ADDR unset; start the run with torchrun"):
        with session(Ranks(0, 2, 0, 2)):
            pass
    assert not torch.distributed.is_initialized()


def test_analyze_with_a_device_map_gives_the_records_of_one_device(byte_model_dir, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("A first paragraph, long enough for a chunk or two.\n\nAnd a second one, long enough too.")
    runs = {}
    for name, placement in (("plain", []), ("mapped", ["--device-map", "auto"])):
        out = tmp_path / name
        assert main(["analyze", "--model", str(byte_model_dir), "--study", "positions", "--file", str(text),
                     "--out", str(out), "--quiet", "--device", "cpu", *placement]) == 0
        runs[name] = [(out / file).read_bytes() for file in ("results.json", "summary.json")]
    assert runs["mapped"] == runs["plain"]


def test_the_default_shard_size_gives_every_rank_a_share_of_a_small_corpus():
    """Fewer documents than one default shard (256) are cut into one shard per rank, not one shard for rank 0."""
    for total, world in ((7, 2), (100, 2), (300, 4), (5, 8), (10_000, 8)):
        ranks = [Ranks(rank, world, rank, world) for rank in range(world)]
        size = shard_size_for_ranks(256, total, ranks[0])
        n_shards = -(-total // size)
        shares = [share(range(n_shards), one) for one in ranks]
        documents = [sum(min(size, total - index * size) for index in mine) for mine in shares]
        assert sum(documents) == total
        busy = min(world, total)  # a rank can only get a document if there are as many documents as ranks
        assert sum(1 for count in documents if count) == busy, (total, world, documents)
        if total >= world * 256:
            assert size == 256  # a big corpus keeps the study's shards
        else:
            assert max(documents) - min(documents) <= size  # at most one shard apart
    assert shard_size_for_ranks(256, 7, Ranks()) == 256  # one process: the study's shards


def test_a_run_plans_its_shards_for_the_ranks_and_warns_when_a_given_size_leaves_ranks_idle(byte_model_dir, tmp_path):
    import repo_lens
    from repo_lens.studies.runner import RunOptions, plan_run

    lens = repo_lens.load(byte_model_dir, device="cpu")
    texts = [f"Document {index} has a few words." for index in range(7)]
    two = Ranks(0, 2, 0, 2)
    assert plan_run(lens, "positions", texts, ranks=Ranks()).n_shards == 1
    plan = plan_run(lens, "positions", texts, ranks=two)
    assert (plan.shard_size, plan.n_shards, plan.settings["shard_size"]) == (4, 2, 4)
    assert plan_run(lens, "positions", texts, ranks=two, run=RunOptions(shard_size=8)).n_shards == 1  # given: kept as given
    assert idle_ranks_warning(1, 7, two) == ("1 shard(s) for 2 ranks: rank(s) 1 have nothing to do; pass --shard-size "
                                             "4 (shard_size=4) so that every rank gets a share, or start fewer ranks")
    assert idle_ranks_warning(2, 7, two) is None
    assert "rank(s) 1-3 have nothing to do; pass --shard-size 2 " in idle_ranks_warning(1, 7, Ranks(0, 4, 0, 4))
    # a run resumes with the shards it was started with, whatever the number of ranks now
    assert chosen_shard_size(tmp_path, None) is None
    (tmp_path / "run.json").write_text(json.dumps({"study": "positions", "shard_size": 4}))
    assert chosen_shard_size(tmp_path, None) == 4 and chosen_shard_size(tmp_path, 9) == 9


@pytest.mark.slow
def test_two_ranks_share_a_corpus_smaller_than_one_default_shard(byte_model_dir, tmp_path):
    """No --shard-size: 7 short documents under torchrun with 2 ranks are written by both ranks, each once."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"Document {index}: " + "some words " * (index + 3)}) + "\n"
                              for index in range(7)))
    done = _torchrun(["analyze", "--model", str(byte_model_dir), "--study", "positions", "--corpus", str(corpus),
                      "--out", str(tmp_path / "run"), "--quiet", "--device", "auto"], _rank_env(tmp_path / "log"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert sorted(_logged(tmp_path / "log")) == [("0", "part-000000.json"), ("1", "part-000001.json")]
    import pandas as pd

    records = pd.read_parquet(tmp_path / "run" / "records")
    assert sorted(records["document"]) == list(range(7))  # shards of 4 and 3 documents: every one, once
    assert json.loads((tmp_path / "run" / "run.json").read_text())["shard_size"] == 4
    assert "nothing to do" not in done.stderr
