"""mkdocs hooks for this site: a quiet build.

The search plugin of mkdocs-material segments Chinese text with jieba when it is installed (the
pages quote Chinese examples), and jieba announces loading its dictionary on stderr; its logger is
set to warnings only before the first page is indexed.
"""

from __future__ import annotations

import logging


def on_startup(command: str, dirty: bool) -> None:
    try:
        import jieba
    except ImportError:
        return
    jieba.setLogLevel(logging.WARNING)
