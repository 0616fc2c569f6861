"""Names an earlier release used, resolved to the current ones: checkpoint keys, hook names and attributes.

Each attention layer's position mechanism was the submodule ``attn.positions`` (now ``attn.mechanism``: its hooks
are ``blocks.{l}.attn.mechanism.hook_delta`` and the like), the module whose increments the layers share was
``LensModel.increments`` (now ``LensModel.shared_delta``), and RePo's d_p was the config key ``repo_dim`` (now
``d_position``). Checkpoints, configs and traces saved under the old names load as they are. The old hook names
and attributes work for one more release and warn (DeprecationWarning) with the new name.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Callable
from typing import Any

from repo_lens.errors import CheckpointError

MECHANISM = "mechanism"  # the attention layer's submodule that computes its positions
SHARED_DELTA = "shared_delta"  # the model's module whose increments the layers share
_FORMER_MECHANISM = re.compile(r"(^|\.)attn\.positions(?=\.|$)")
_CURRENT_MECHANISM = re.compile(r"(^|\.)attn\.mechanism(?=\.|$)")
_FORMER_SHARED = re.compile(r"^increments(?=\.|$)")


def current_state_key(key: str) -> str:
    """The current name of state-dict key ``key`` (unchanged when it is current).

    >>> current_state_key("blocks.2.attn.positions.gate_map.weight"), current_state_key("increments.fc_in.bias")
    ('blocks.2.attn.mechanism.gate_map.weight', 'shared_delta.fc_in.bias')
    >>> current_state_key("blocks.2.attn.q_proj.weight")
    'blocks.2.attn.q_proj.weight'
    """
    return _FORMER_SHARED.sub(SHARED_DELTA, _FORMER_MECHANISM.sub(rf"\1attn.{MECHANISM}", key))


def rename_former_keys(state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A ``load_state_dict`` pre-hook of a model: keys saved under a former name (below ``prefix``) take their
    current name, so ``model.load_state_dict`` reads checkpoints of either release."""
    for key in [key for key in state_dict if key.startswith(prefix)]:
        current = prefix + current_state_key(key[len(prefix):])
        if current != key and current not in state_dict:
            state_dict[current] = state_dict.pop(key)


_INTERNAL = ("repo_lens.", "transformer_lens.", "torch.", "contextlib")  # modules a warning looks past


def _warn(old: str, new: str, what: str) -> None:
    """A DeprecationWarning that points at the first caller outside repo_lens, TransformerLens and torch."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and str(frame.f_globals.get("__name__", "")).startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    warnings.warn(f"{what} {old!r} is deprecated and stops working in the next release: use {new!r}",
                  DeprecationWarning, stacklevel=level + 1)


def current_hook_name(name: str) -> str:
    """The current name of hook ``name``; a former name (``blocks.{l}.attn.positions.hook_delta``) warns.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     current_hook_name("blocks.1.attn.positions.hook_gates")
    'blocks.1.attn.mechanism.hook_gates'
    >>> current_hook_name("blocks.1.attn.hook_pos")
    'blocks.1.attn.hook_pos'
    """
    current = _FORMER_MECHANISM.sub(rf"\1attn.{MECHANISM}", name)
    if current != name:
        _warn(name, current, "hook name")
    return current


def current_hook_filter(names: Any) -> Any:
    """A hook name, a list of names or a function of a name (TransformerLens' ``names_filter`` and the names
    ``add_hook`` takes), with former names resolved: a function is also asked about a hook's former name, and
    warns when only that one matches. Anything else comes back unchanged.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     pick = current_hook_filter(lambda name: name.endswith("attn.positions.hook_delta"))
    ...     pick("blocks.3.attn.mechanism.hook_delta"), pick("blocks.3.attn.hook_pos")
    (True, False)
    """
    if isinstance(names, str):
        return current_hook_name(names)
    if isinstance(names, list):
        return [current_hook_name(name) if isinstance(name, str) else name for name in names]
    if callable(names):
        return _FormerNamesToo(names)
    return names


class _FormerNamesToo:
    """A filter of hook names that also matches a hook whose former name the wrapped filter selects."""

    def __init__(self, accepts: Callable[[str], Any]) -> None:
        self.accepts = accepts

    def __call__(self, name: str) -> bool:
        if self.accepts(name):
            return True
        former = _CURRENT_MECHANISM.sub(r"\1attn.positions", name)
        if former != name and self.accepts(former):
            _warn(former, name, "hook name")
            return True
        return False


class FormerHookNames(dict):
    """A model's ``hook_dict`` / ``mod_dict``: a name that is not a key but a former name of one gives that
    entry (and warns)."""

    def __missing__(self, name: Any) -> Any:
        current = current_hook_name(name) if isinstance(name, str) else name
        if current == name or current not in self:
            raise KeyError(name)
        return self[current]


class FormerMechanismName:
    """The deprecated ``positions`` attribute of an attention layer: its position mechanism, now ``mechanism``."""

    @property
    def positions(self) -> Any:
        _warn("attn.positions", f"attn.{MECHANISM}", "the attention layer's attribute")
        return getattr(self, MECHANISM)


FORMER_SETTINGS = {"repo_dim": "d_position"}  # former key -> current key (ModelConfig fields, mechanism settings)


def current_setting_keys(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` (a trace's ``meta["mechanism"]``, a config's fields) with former keys renamed, in their order;
    where both a former key and its current one are given, the current one's value is kept.

    >>> current_setting_keys({"layer_kinds": ["rope", "repo"], "repo_dim": 8})
    {'layer_kinds': ['rope', 'repo'], 'd_position': 8}
    """
    if not any(key in settings for key in FORMER_SETTINGS):
        return settings
    renamed = {FORMER_SETTINGS.get(key, key): value for key, value in settings.items()}
    renamed.update({key: settings[key] for key in FORMER_SETTINGS.values() if key in settings})
    return renamed


def current_config_keys(config: dict[str, Any], where: str = "model config") -> dict[str, Any]:
    """``config`` (a ModelConfig's fields, as config.json stores them) with former keys renamed (``repo_dim``
    is ``d_position``). A former key and its current one given with different values is an error naming both.

    >>> current_config_keys({"d_model": 64, "repo_dim": 8})
    {'d_model': 64, 'd_position': 8}
    """
    for former, current in FORMER_SETTINGS.items():
        if former in config and current in config and config[former] != config[current]:
            raise CheckpointError(f"{where} gives {current}={config[current]!r} and also its former name "
                                  f"{former}={config[former]!r}; keep {current} alone")
    return current_setting_keys(config)
