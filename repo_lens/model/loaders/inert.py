"""Inert stand-ins for the objects some authors' checkpoints pickle beside their weights.

CoPE's training checkpoint (github ``facebookresearch/RAM``, ``projects/cope/src/utils/checkpoint.py``)
stores its options as an ``argparse.Namespace`` and its logger's ``src.utils.logger.Metric`` objects.
The restricted unpickler (:mod:`repo_lens.model.loaders.unpickler`) never imports those classes: it
builds these stand-ins instead, which only keep the data the pickle holds and run none of it.
"""

from __future__ import annotations

from typing import Any


class InertRecord:
    """What a pickled object of an allowed foreign class becomes: its pickled state, as data.

    ``state`` is whatever the pickle set (for plain objects, the dict of their attributes);
    ``args`` what it was constructed with. Nothing of the original class runs.

    Example:
        >>> record = InertRecord()
        >>> record.__setstate__({"name": "loss/val", "best_value": 1.5})
        >>> record.attributes()["name"]
        'loss/val'
    """

    __slots__ = ("args", "state")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = (args, kwargs)
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def attributes(self) -> dict[str, Any]:
        """The pickled attributes (an empty dict when the state was not a dict of names)."""
        if isinstance(self.state, dict):
            return {key: value for key, value in self.state.items() if isinstance(key, str)}
        return {}

    def __repr__(self) -> str:
        return f"InertRecord({sorted(self.attributes())})"


class InertNamespace(InertRecord):
    """An ``argparse.Namespace`` read as data: :meth:`attributes` are the training options.

    Example:
        >>> options = InertNamespace()
        >>> options.__setstate__({"pos_emb": "cope", "nlayers": 4})
        >>> options.attributes()
        {'pos_emb': 'cope', 'nlayers': 4}
    """

    __slots__ = ()


# full pickle name of each allowed foreign class -> its stand-in
STAND_INS: dict[str, type] = {
    "argparse.Namespace": InertNamespace,
    "src.utils.logger.Metric": InertRecord,
}
