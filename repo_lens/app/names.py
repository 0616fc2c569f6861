"""File names of the app's downloads: model, view, layer/head and a short hash of the input, so
exports of different models, heads or texts never share a name (no Streamlit here)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np


def slug(text: str) -> str:
    """``"zoo:bytes-repo"`` → ``"bytes-repo"``; a path → its last part; anything else → lowercase ASCII words.

    >>> slug("zoo:bytes-repo"), slug("/ckpt/Run 1"), slug("Spaced tokens")
    ('bytes-repo', 'run-1', 'spaced-tokens')
    """
    text = text.removeprefix("zoo:").rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "trace"


def input_hash(token_ids: Sequence[int] | np.ndarray) -> str:
    """Six hex digits of SHA-1 over the token ids (int64 little-endian): same input, same hash.

    >>> input_hash([1, 2, 3]) == input_hash(np.array([1, 2, 3])), input_hash([1, 2, 3]) == input_hash([1, 2, 4])
    (True, False)
    """
    return hashlib.sha1(np.asarray(token_ids, dtype="<i8").tobytes()).hexdigest()[:6]


def export_name(model: str, view: str, input_id: str, layer: int | str | None = None,
                head: int | str | None = None) -> str:
    """``model_view_L{layer}-H{head}_{hash}`` without a suffix; the parts that do not apply are left out.

    >>> export_name("zoo:bytes-repo", "Spaced tokens", "1a2b3c", layer=5, head=3)
    'bytes-repo_spaced-tokens_L5-H3_1a2b3c'
    >>> export_name("tiny-rope", "range", "1a2b3c", head="mean")
    'tiny-rope_range_Hmean_1a2b3c'
    """
    where = "-".join(part for part in (f"L{layer}" if layer is not None else "",
                                       f"H{head}" if head is not None else "") if part)
    return "_".join(part for part in (slug(model), slug(view), where, input_id) if part)
