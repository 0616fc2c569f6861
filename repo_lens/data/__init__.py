"""Prompt builders (NIAH, few-shot, tables, reversal) with named token spans, and corpus fetchers.

Pure functions of a tokenizer passed in (HF fast tokenizer, ``tokenizers.Tokenizer`` or
``ByteTokenizer``); nothing here imports torch.
"""

from repo_lens.data.bilingual import bilingual_splits, held_out_chinese_sentences
from repo_lens.data.brown import brown_documents
from repo_lens.data.corpora import CorpusFetchError, Sentence, fetch_peoples_daily, parse_peoples_daily, peoples_daily
from repo_lens.data.fewshot import FewshotLayout, fewshot_prompt
from repo_lens.data.niah import (
    NEEDLE,
    NOISE,
    TEMPLATE,
    NiahSpec,
    niah_multikey,
    niah_multiquery,
    niah_multivalue,
    niah_prompt,
    niah_single,
)
from repo_lens.data.python_docs import python_docs_documents
from repo_lens.data.retrieval_families import FAMILIES, moved_pairs, retrieval_prompt, retrieval_prompts
from repo_lens.data.reversal import (
    REVERSAL_PROMPT,
    REVERSAL_SPECIALS,
    reversal_prompt,
    reversal_sequence,
    reversal_words,
)
from repo_lens.data.spans import Prompt, PromptBuilder, PromptEncoding, char_to_token_span, encode_with_offsets
from repo_lens.data.tables import table_prompt

__all__ = [
    "FAMILIES",
    "NEEDLE",
    "NOISE",
    "REVERSAL_PROMPT",
    "REVERSAL_SPECIALS",
    "TEMPLATE",
    "CorpusFetchError",
    "FewshotLayout",
    "NiahSpec",
    "Prompt",
    "PromptBuilder",
    "PromptEncoding",
    "Sentence",
    "bilingual_splits",
    "brown_documents",
    "moved_pairs",
    "python_docs_documents",
    "retrieval_prompt",
    "retrieval_prompts",
    "char_to_token_span",
    "encode_with_offsets",
    "fetch_peoples_daily",
    "fewshot_prompt",
    "held_out_chinese_sentences",
    "niah_multikey",
    "niah_multiquery",
    "niah_multivalue",
    "niah_prompt",
    "niah_single",
    "parse_peoples_daily",
    "peoples_daily",
    "reversal_prompt",
    "reversal_sequence",
    "reversal_words",
    "table_prompt",
]
