"""The sidebar: which models (or which saved trace) and which input."""

from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from repo_lens import InputError, RepoLensError

from repo_lens.app import cache, config, state
from repo_lens.app.documents import PRESET_TEXT, PRESETS, REVERSAL_MAX_WORDS, Preset
from repo_lens.app.ui import guard

MODE_MODEL, MODE_TRACE = "Run a model", "Open a saved trace"
OTHER = "Other directory…"
HUB = "Hugging Face Hub id…"
NIAH_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)


@dataclass
class Selection:
    mode: str
    sources: list[str] = field(default_factory=list)
    kind: str = Preset.FREE_TEXT
    text: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    truncate: bool = True
    trace_file: Any = None
    problem: str | None = None  # why nothing can be shown yet

    @property
    def params_json(self) -> str:
        return json.dumps(self.params, sort_keys=True)


def sidebar() -> Selection:
    with st.sidebar:
        st.header("repo_lens")
        st.caption("Learned positions, layer by layer")
        mode = st.radio("Look at", [MODE_MODEL, MODE_TRACE], key="mode", horizontal=True)
        if mode == MODE_TRACE:
            return _trace_selection()
        selection = Selection(mode=MODE_MODEL)
        _models(selection)
        st.divider()
        _input(selection)
        return selection


def _trace_selection() -> Selection:
    selection = Selection(mode=MODE_TRACE)
    selection.trace_file = st.file_uploader(
        "Trace file (.safetensors, written by Trace.save or `repo-lens trace --save`)", type=["safetensors"],
        key="trace_file", max_upload_size=config.MAX_TRACE_BYTES // (1024 * 1024))
    if selection.trace_file is None:
        selection.problem = "Upload a trace file to look at it without a model."
    return selection


def _models(selection: Selection) -> None:
    roots = config.configured_roots()
    default = None
    with guard("Default model"):
        default = config.default_source()
    options = list(cache.get_model_sources(tuple(map(str, roots))))
    if default and default not in options:
        options.insert(0, default)
    if not options and not roots:
        st.warning(f"No zoo models are installed and no checkpoint directories are configured. Type a Hugging Face "
                   f"Hub id, set {config.ROOTS_ENV} to directories holding checkpoints, or open a saved trace.")
    if roots:
        options.append(OTHER)
    options.append(HUB)
    first = _pick("Model", "model_a", options, default, roots)
    if first is None:
        selection.problem = selection.problem or ("Pick a model (a zoo model, a checkpoint directory or a Hugging Face "
                                                  "Hub id) in the sidebar.")
        return
    selection.sources.append(first)
    if st.toggle("Compare with a second model", key="compare"):
        fallback: str | None = next((o for o in ("zoo:bytes-rope", "zoo:bytes-nope") if o in options and o != first),
                                    None)
        fallback = fallback or next((o for o in options if o not in (first, OTHER, HUB)), None)
        second = _pick("Second model", "model_b", options, fallback, roots)
        if second is not None:
            selection.sources.append(second)


def _pick(label: str, key: str, options: list[str], default: str | None, roots: list) -> str | None:
    index = options.index(default) if default in options else None
    choice = st.selectbox(label, options, index=index, key=key, placeholder="pick a model",
                          format_func=_option_label)
    if choice is None:
        return None
    if choice not in (OTHER, HUB) and _describe(choice):
        st.caption(_describe(choice))
    if choice == HUB:
        return _hub_pick(label, key)
    if choice == OTHER:
        path = st.text_input(f"{label}: checkpoint directory", key=f"{key}_path",
                             placeholder=str(roots[0]) + "/…" if roots else "")
        if not path.strip():
            return None
        try:
            return str(config.resolve_checkpoint(path, roots))
        except InputError as error:
            st.error(str(error), icon="⚠️")
            return None
    return choice


def _hub_pick(label: str, key: str) -> str | None:
    """A Hub id and an optional revision typed in; fetched (offline: found in the Hub cache) before it is used."""
    repo_id = st.text_input(f"{label}: Hugging Face Hub id", key=f"{key}_hub", placeholder=config.HUB_EXAMPLE,
                            help="org/name of a model repository; only its config, safetensors weights and "
                                 "tokenizer files are fetched, into the Hugging Face cache")
    revision = st.text_input(f"{label}: revision", key=f"{key}_revision", placeholder="main",
                             help="a branch, a tag or a commit hash (empty: the latest commit on main)")
    if not repo_id.strip():
        return None
    with guard(f"Hub model {repo_id.strip():.200}"):
        source = config.hub_source(repo_id, revision)
        commit = cache.get_hub_snapshot(source).commit
        info = model_info(source)
        st.caption(" · ".join([f"commit {commit[:12]}", *([info.describe()] if info is not None else [])]))
        return source
    return None


def _option_label(option: str) -> str:
    """The model's name as the box shows it (its size goes in a caption below, so the box never cuts it)."""
    if option in (OTHER, HUB) or option.startswith("zoo:") or config.parse_hub_source(option) is not None:
        return option
    return Path(option).name


def _describe(option: str) -> str:
    """The caption under the model box: the model's size, and where a checkpoint directory is."""
    info = model_info(option)
    parts = [info.describe()] if info is not None and info.describe() else []
    if not (option.startswith("zoo:") or config.parse_hub_source(option) is not None):
        parts.append(f"in {Path(option).parent}")
    return " · ".join(parts)


def model_info(source: str) -> Any:
    """The cached size of ``source`` (a ModelInfo), or None when it cannot be read."""
    try:
        return cache.get_model_info(source, cache.source_stamp(source))
    except (RepoLensError, OSError):
        return None


def context_of(sources: list[str]) -> tuple[int | None, str]:
    """The shortest context among ``sources`` and the label of the model that has it."""
    known = [(info.context, config.source_label(source)) for source in sources
             if (info := model_info(source)) is not None and info.context]
    return min(known) if known else (None, "")


def _niah_length(selection: Selection) -> tuple[int | None, bool]:
    """A NIAH length the chosen models can hold (only lengths up to the shortest context are offered),
    or any length when "beyond the context" (length extrapolation) is ticked; and whether it is."""
    context, label = context_of(selection.sources)
    beyond = False
    if context is not None and NIAH_LENGTHS[-1] > context:
        beyond = st.checkbox("Beyond the context (length extrapolation)", value=False, key="niah_beyond",
                             help=f"offer lengths longer than {label}'s context ({context:,} tokens); they are traced "
                                  "and measured whole, at positions the model was not trained on")
    lengths = [n for n in NIAH_LENGTHS if beyond or context is None or n <= context]
    if not lengths:
        selection.problem = (f"NIAH prompts start at {NIAH_LENGTHS[0]} tokens, longer than {label}'s context "
                             f"({context:,} tokens); pick a model with a longer context.")
        st.warning(selection.problem)
        return None, False
    default = 512 if 512 in lengths else lengths[-1]
    length = st.select_slider("Length (tokens, at most)", lengths, value=default, key=f"niah_length_{lengths[-1]}",
                              help="RULER fills the haystack with whole words up to this length, so a prompt can be a "
                                   "few tokens shorter; the page's header gives its length")
    if context is not None:
        st.caption(f"Lengths over {context:,} tokens ({label}'s context) are extrapolation." if beyond
                   else f"Up to {context:,} tokens: {label}'s context.")
    return int(length), beyond and context is not None and length > context


def _reversal_words(selection: Selection) -> int | None:
    """The most words a Reversal prompt may have so that it fits every chosen model's context."""
    fits = []
    for source in selection.sources:
        with guard(f"Loading {config.source_label(source)}"):
            fits.append((cache.get_max_reversal_words(source, cache.source_stamp(source)), config.source_label(source)))
    most, label = min(fits) if fits else (REVERSAL_MAX_WORDS, "")
    if most < 2:
        selection.problem = (f"A reversal prompt of 2 words is longer than {label}'s context; pick a model with a "
                             "longer context.")
        st.warning(selection.problem)
        return None
    if most < REVERSAL_MAX_WORDS:
        st.caption(f"Up to {most} words: longer prompts do not fit {label}'s context.")
    return most


def _input(selection: Selection) -> None:
    kind = st.selectbox("Input", PRESETS, key=state.INPUT, bind="query-params")
    selection.kind = kind
    if kind in PRESET_TEXT:
        selection.text = st.text_area("Text", PRESET_TEXT[kind], key=f"text_{kind}", height=180,
                                      max_chars=config.MAX_TEXT_BYTES)
    elif kind == Preset.NIAH:
        length, beyond = _niah_length(selection)
        if length is None:
            return
        depth = st.slider("Needle depth", 0.0, 1.0, 0.5, 0.05, key="niah_depth")
        seed = st.number_input("Seed", min_value=0, max_value=10_000, value=0, key="niah_seed")
        selection.params = {"length": int(length), "depth": float(depth), "seed": int(seed)}
        if beyond:
            selection.params["beyond_context"] = True
    elif kind == Preset.REVERSAL:
        most = _reversal_words(selection)
        if most is None:
            return
        words = (st.slider("Words to reverse", 2, most, min(12, most), key=f"reversal_words_{most}") if most > 2
                 else 2)
        selection.params = {"words": int(words), "seed": 0}
    elif kind == Preset.UPLOAD_TEXT:
        upload = st.file_uploader("Text file (UTF-8)", key="text_file",
                                  max_upload_size=config.MAX_TEXT_BYTES // 2**20)  # the widget states the limit
        selection.kind = Preset.FREE_TEXT
        if upload is None:
            selection.problem = "Upload a text file in the sidebar."
        else:
            data = upload.getvalue()
            if len(data) > config.MAX_TEXT_BYTES:
                selection.problem = (f"{upload.name} is {len(data):,} bytes; the app reads text files of at most "
                                     f"{config.MAX_TEXT_BYTES // 2**20} MB ({config.MAX_TEXT_BYTES:,} bytes). "
                                     "Upload a shorter excerpt.")
            else:
                try:
                    selection.text = data.decode("utf-8")
                except UnicodeDecodeError as error:
                    selection.problem = f"{upload.name} is not UTF-8 text ({error.reason} at byte {error.start})."
    selection.truncate = st.checkbox("Truncate input longer than the model's context", value=True, key="truncate",
                                     help="Keep the first tokens that fit (recorded in the trace); off: show an error")
