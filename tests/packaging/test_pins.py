"""The dependency pins of pyproject.toml cannot fall below what the code uses.

Each rule names a version-sensitive API, the release that introduced it, and how to find its use in the
source (every pattern of a rule must match in one file of ``repo_lens/`` or the Makefile). Where the code
uses it, the package's lower bound in pyproject.toml (core dependencies or an extra) must be at least that
release; where the code no longer uses it, the rule is skipped and says the pin may be lowered. The evidence
for each release is in the comment beside the pin.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
# a call's arguments, with one level of nested parentheses (``f(str(path), x=1)``), across lines
ARGS = r"\((?:[^()]|\([^()]*\))*"


@dataclass(frozen=True)
class Rule:
    package: str
    minimum: str
    what: str
    patterns: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{self.package}>={self.minimum}: {self.what}"


RULES = [
    Rule("torch", "2.6", "torch.serialization.safe_globals with (object, 'module.Name') pairs",
         (r"\bsafe_globals\b", r"\(stand_in, name\)")),
    Rule("torch", "2.5", "torch.serialization.safe_globals", (r"\bsafe_globals\b",)),
    Rule("torch", "2.5", "torch.OutOfMemoryError", (r"\btorch\.OutOfMemoryError\b",)),
    Rule("torch", "2.4", "torch.nn.functional.rms_norm", (r"\bF\.rms_norm\(|\bfunctional\.rms_norm\(",)),
    Rule("torch", "2.1", "load_state_dict(assign=True)", (r"load_state_dict" + ARGS + r"assign=True",)),
    Rule("transformer-lens", "3.3", "from transformer_lens import HookedRootModule",
         (r"from transformer_lens import [^\n]*\bHookedRootModule\b",)),
    Rule("transformer-lens", "3.0", "transformer_lens.utilities.logits_utils", (r"transformer_lens\.utilities\.logits_utils",)),
    Rule("transformers", "5.6", "load_gguf_checkpoint(torch_dtype=)", (r"load_gguf_checkpoint" + ARGS + r"torch_dtype=",)),
    Rule("transformers", "4.56", "from_pretrained(dtype=)", (r"AutoModelForCausalLM\.from_pretrained", r"\"dtype\": ")),
    Rule("tokenizers", "0.10", "tokenizers.pre_tokenizers.Split", (r"pre_tokenizers\.Split\(",)),
    Rule("safetensors", "0.3", "from safetensors import SafetensorError",
         (r"from safetensors import [^\n]*\bSafetensorError\b",)),
    Rule("numpy", "1.17", "np.random.default_rng", (r"\bnp\.random\.default_rng\(",)),
    Rule("scipy", "1.15", "scipy.stats.bootstrap(rng=)", (r"\bbootstrap" + ARGS + r"\brng=",)),
    Rule("scipy", "1.13", "scipy.stats.pearsonr(axis=)", (r"\bpearsonr" + ARGS + r"\baxis=",)),
    Rule("scikit-learn", "0.17", "roc_auc_score(average=None)", (r"roc_auc_score" + ARGS + r"average=None",)),
    Rule("tqdm", "4.27", "tqdm.auto", (r"from tqdm\.auto import|import tqdm\.auto",)),
    Rule("plotly", "6.1", "the plotly_get_chrome command", (r"plotly_get_chrome",)),
    Rule("kaleido", "1.1", "kaleido.start_sync_server", (r"kaleido\.start_sync_server\(",)),
    Rule("pillow", "8.0", "ImageFont.FreeTypeFont.getlength", (r"\bImageFont\b", r"\.getlength\(")),
    Rule("accelerate", "0.23", "accelerate.dispatch_model(force_hooks=)", (r"dispatch_model" + ARGS + r"force_hooks=",)),
    Rule("huggingface-hub", "0.25", "huggingface_hub.errors' HTTP and repository errors",
         (r"from huggingface_hub import errors",
          r"errors\.(GatedRepoError|RepositoryNotFoundError|RevisionNotFoundError|LocalEntryNotFoundError|HfHubHTTPError)")),
    Rule("pyarrow", "20", "pyarrow.json.open_json", (r"\bopen_json\(",)),
    Rule("pyarrow", "14", "pyarrow.unify_schemas(promote_options=)", (r"unify_schemas" + ARGS + r"promote_options=",)),
    Rule("datasets", "2.10", "Dataset.select_columns", (r"import datasets", r"\.select_columns\(")),
    Rule("pandas", "0.21.1", "pandas.read_parquet(columns=)", (r"read_parquet" + ARGS + r"columns=",)),
    Rule("streamlit", "1.52", "st.download_button with a callable for data",
         (r"download_button\(", r"data: Callable\[\[\], bytes\]")),
    Rule("streamlit", "1.51", "st.plotly_chart(width='stretch')", (r"plotly_chart" + ARGS + r"width=\"stretch\"",)),
    Rule("gguf", "0.16", "gguf's ReaderField.contents()", (r"\bgguf\b", r"field\.contents\(\)")),
]


def _sources() -> dict[Path, str]:
    files = sorted((ROOT / "repo_lens").rglob("*.py")) + [ROOT / "Makefile"]
    return {path: path.read_text(encoding="utf-8") for path in files}


SOURCES = _sources()


def _lower_bounds() -> dict[str, Version]:
    """Each dependency's ``>=`` bound: the core dependencies and every extra (the highest, if listed twice)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        lines += extra
    bounds: dict[str, Version] = {}
    for line in lines:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator in (">=", "==", "~="):
                name = canonicalize_name(requirement.name)
                bounds[name] = max(bounds.get(name, Version("0")), Version(spec.version))
    return bounds


def _uses(rule: Rule) -> list[str]:
    """The files (relative to the checkout) in which every pattern of ``rule`` matches."""
    return [str(path.relative_to(ROOT)) for path, text in SOURCES.items()
            if all(re.search(pattern, text) for pattern in rule.patterns)]


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.id)
def test_a_pin_covers_the_newest_api_the_code_uses(rule):
    used_in = _uses(rule)
    if not used_in:
        pytest.skip(f"the code no longer uses {rule.what}; {rule.package}'s pin may be lowered (and this rule removed)")
    bound = _lower_bounds().get(canonicalize_name(rule.package))
    assert bound is not None, f"{rule.package} is used ({rule.what}: {', '.join(used_in)}) but has no lower bound"
    assert bound >= Version(rule.minimum), (
        f"{rule.package}>={bound} in pyproject.toml, but the code uses {rule.what} ({', '.join(used_in)}), "
        f"which needs {rule.package}>={rule.minimum}")


def test_every_dependency_has_a_lower_bound():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    lines = list(project["dependencies"]) + [line for extra in project["optional-dependencies"].values()
                                             for line in extra]
    unbounded = [line for line in lines if not any(spec.operator in (">=", "==", "~=")
                                                   for spec in Requirement(line).specifier)]
    assert unbounded == []


def test_the_rules_find_what_they_look_for():
    """The patterns themselves: each finds its API in a snippet written the way the code writes it, so a rule
    that can never match does not pass silently."""
    snippets = {
        "load_gguf_checkpoint(torch_dtype=)": "load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=m,\n"
                                              "                     torch_dtype=torch.float32)",
        "scipy.stats.bootstrap(rng=)": "stats.bootstrap((data,), np.mean, n_resamples=9,\n rng=np.random.default_rng(0))",
        "accelerate.dispatch_model(force_hooks=)": "accelerate.dispatch_model(model, device_map=plan,\n force_hooks=True)",
    }
    by_what = {rule.what: rule for rule in RULES}
    for what, snippet in snippets.items():
        assert all(re.search(pattern, snippet) for pattern in by_what[what].patterns), what
    assert not re.search(by_what["scipy.stats.bootstrap(rng=)"].patterns[0], "bootstrap(data, seed=0)\nrng = 1")
