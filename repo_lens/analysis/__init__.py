"""Analyzers: pure functions from arrays (positions, increments, attention) to arrays and
dataclasses. ``positions`` is always (n_layers, n_heads, T)."""

from repo_lens.analysis.attention_mass import AttentionMass, attention_mass, attention_mass_batch
from repo_lens.analysis.boundaries import BoundaryLabels, boundary_auc, cjk_boundary_labels, jieba_words
from repo_lens.analysis.categories import (
    BYTE_CATEGORIES,
    SUBWORD_CATEGORIES,
    byte_categories,
    is_cjk_char,
    subword_categories,
)
from repo_lens.analysis.encoding import CONTENT_CLASSES, VarianceShares, content_classes, position_variance_shares
from repo_lens.analysis.entities import (
    CARRIER_SENTENCES,
    ENTITY_PAIRS,
    FAKE_ENTITY_PAIRS,
    EntityGroupingResult,
    EntityPrompt,
    entity_grouping_test,
    entity_prompts,
    token_at_char,
)
from repo_lens.analysis.increments import (
    CategoryIncrements,
    increments_by_category,
    position_increments,
    trace_increments,
)
from repo_lens.analysis.lookback import LookbackCorrelation, attention_lookback, lookback_correlation
from repo_lens.analysis.position_attribution import (
    PositionAttribution,
    TokenAttribution,
    position_attribution,
    token_attribution,
)
from repo_lens.analysis.position_stats import (
    PATTERN_LABELS,
    HeadSummary,
    PatternFractions,
    chunk_pattern_codes,
    chunk_patterns,
    head_summary,
    pattern_fractions,
    range_stats,
)
from repo_lens.analysis.score_decomposition import ScoreDecomposition, score_decomposition
from repo_lens.analysis.selection import select_heads

__all__ = [
    "AttentionMass",
    "attention_mass",
    "attention_mass_batch",
    "BYTE_CATEGORIES",
    "CARRIER_SENTENCES",
    "CONTENT_CLASSES",
    "ENTITY_PAIRS",
    "FAKE_ENTITY_PAIRS",
    "PATTERN_LABELS",
    "SUBWORD_CATEGORIES",
    "BoundaryLabels",
    "CategoryIncrements",
    "EntityGroupingResult",
    "EntityPrompt",
    "HeadSummary",
    "LookbackCorrelation",
    "PatternFractions",
    "PositionAttribution",
    "TokenAttribution",
    "VarianceShares",
    "attention_lookback",
    "boundary_auc",
    "byte_categories",
    "chunk_pattern_codes",
    "chunk_patterns",
    "content_classes",
    "cjk_boundary_labels",
    "entity_grouping_test",
    "entity_prompts",
    "head_summary",
    "increments_by_category",
    "is_cjk_char",
    "jieba_words",
    "lookback_correlation",
    "pattern_fractions",
    "position_attribution",
    "token_attribution",
    "position_increments",
    "position_variance_shares",
    "range_stats",
    "ScoreDecomposition",
    "score_decomposition",
    "select_heads",
    "subword_categories",
    "token_at_char",
    "trace_increments",
]
