"""``repo-lens trace``: a text's per-layer position statistics, or the trace saved."""

from __future__ import annotations

import argparse

from repo_lens.cli_args import command_line_text, output_file, read_text_file
from repo_lens.cli.model_arguments import add_model_arguments
from repo_lens.errors import InputError


def _read_text(args: argparse.Namespace) -> str:
    if args.text is not None and args.file is not None:
        raise InputError("give either --text or --file, not both")
    if args.file is not None:
        return read_text_file(args.file)
    if args.text is None:
        raise InputError("nothing to trace: pass --text 'some text' or --file path.txt")
    return args.text


def run(args: argparse.Namespace) -> int:
    import repo_lens
    from repo_lens.studies.report import layer_summary

    text = _read_text(args)
    lens = repo_lens.load(args.model, device=args.device, dtype=args.dtype, revision=args.revision, graft=args.graft)
    trace = lens.trace(text, truncate=args.truncate, allow_beyond_context=args.beyond_context)
    print(f"model: {trace.meta.get('name')}  ({trace.meta.get('format')}, {trace.meta.get('dtype')}, "
          f"{trace.meta.get('device')})")
    print(f"tokens: {len(trace)}  layers: {trace.n_layers}  heads: {trace.n_heads}")
    if trace.meta.get("truncation"):
        truncation = trace.meta["truncation"]
        print(f"truncated: kept {truncation['kept_tokens']} of {truncation['original_tokens']} tokens")
    for warning in trace.meta.get("warnings", []):
        print(f"warning: {warning}")
    print(layer_summary(trace, per_head=args.per_head))
    if args.save_path:
        print(f"trace saved to {trace.save(args.save_path)}")
    return 0


def add(commands: argparse._SubParsersAction) -> None:
    """``trace``: a text's per-layer position statistics, or the trace saved."""
    trace = commands.add_parser("trace", help="trace a text and print per-layer position statistics")
    add_model_arguments(trace)
    trace.add_argument("--text", type=command_line_text, help="text to trace")
    trace.add_argument("--file", help="UTF-8 text file to trace")
    trace.add_argument("--device", default="auto", help="auto (CUDA + bf16 when present), cpu, cuda, cuda:N")
    trace.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: by device)")
    too_long = trace.add_mutually_exclusive_group()
    too_long.add_argument("--truncate", action="store_true", help="keep the first context-length tokens of a long text")
    too_long.add_argument("--beyond-context", action="store_true",
                          help="trace every token of a text longer than the model's context (extrapolation)")
    trace.add_argument("--per-head", action="store_true", help="one row per layer and head")
    # not dest "save": nnsight mounts a .save method on every object, which argparse would take for a default
    trace.add_argument("--save", dest="save_path", type=output_file, help="write the trace to this .safetensors file")
    trace.set_defaults(handler=run,
                       context_flags={"truncate": "--truncate", "allow_beyond_context": "--beyond-context"})
