"""One Lens used from several threads gives exactly the answers of the same calls made one after another."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

import repo_lens
from repo_lens.analysis import attention_mass
from repo_lens.capture import forward_lock
from repo_lens.model.byte_tokenizer import ByteTokenizer
from repo_lens.model.tiny import tiny_model

TEXTS = [("needle %d in the haystack " % index) * (index + 2) for index in range(6)]


def make_lens() -> repo_lens.Lens:
    torch.manual_seed(0)
    return repo_lens.Lens(tiny_model("repo", n_layers=3, d_model=32, n_heads=2), ByteTokenizer())


def calls(lens: repo_lens.Lens) -> list:
    """(name, thunk) pairs covering trace, attention mass, run_with_cache, run_with_hooks and a plain forward."""
    work = []
    for index, text in enumerate(TEXTS):
        ids = lens.encode(text)
        tensor = torch.tensor([ids])
        work.append(("trace", lambda text=text: lens.trace(text).positions))
        work.append(("mass", lambda ids=ids: attention_mass(lens, ids, {"a": (1, 5)}, (len(ids) - 3, len(ids)))
                     .by_layer_head["a"]))
        work.append(("cache", lambda t=tensor: lens.model.run_with_cache(t)[1]["blocks.2.attn.hook_pos"].numpy()))
        work.append(("hooks", lambda t=tensor, index=index: lens.model.run_with_hooks(
            t, fwd_hooks=[("blocks.1.attn.hook_pos", lambda z, hook: z + index)])[0, -1].detach().numpy()))
        work.append(("forward", lambda t=tensor: lens.model(t)[0, -1].detach().numpy()))
    return work


def test_four_threads_on_one_lens_give_the_sequential_answers_exactly():
    lens = make_lens()
    work = calls(lens) * 3
    expected = [thunk() for _, thunk in work]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(thunk) for _, thunk in work]
        got = [future.result(timeout=120) for future in futures]
    for (name, _), want, answer in zip(work, expected, got):
        np.testing.assert_array_equal(answer, want, err_msg=name)
    assert not any(point._forward_hooks for point in lens.model.hook_dict.values())  # nothing left attached


def test_a_plain_forward_waits_for_a_hooked_one_instead_of_firing_its_hooks():
    lens = make_lens()
    entered, release = threading.Event(), threading.Event()
    fired = []

    def slow_hook(z, hook):
        fired.append(threading.get_ident())
        entered.set()
        release.wait(10)

    ids = torch.tensor([lens.encode("hello there")])
    hooked = threading.Thread(target=lambda: lens.model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_pos",
                                                                                          slow_hook)]))
    hooked.start()
    assert entered.wait(10)
    plain = threading.Thread(target=lambda: lens.model(ids))
    plain.start()
    plain.join(0.3)
    assert plain.is_alive()  # blocked on the model's lock, not running through the other thread's hook
    release.set()
    hooked.join(10)
    plain.join(10)
    assert fired == [hooked.ident]


def test_the_lock_is_per_model_and_survives_a_deep_copy():
    lens = make_lens()
    twin = copy.deepcopy(lens.model)
    assert forward_lock(twin) is not forward_lock(lens.model)
    ids = torch.tensor([lens.encode("copy me")])
    np.testing.assert_array_equal(twin(ids).detach().numpy(), lens.model(ids).detach().numpy())
    with forward_lock(lens.model):  # holding the original's lock does not block the copy
        done = threading.Event()
        threading.Thread(target=lambda: (twin(ids), done.set())).start()
        assert done.wait(10)
