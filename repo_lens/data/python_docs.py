"""English from another domain than Brown's 1961 prose, on every machine without a download: the
documentation strings of Python's standard library (technical writing about software), one document per
module (its docstring, then those of its public functions and classes longer than 200 characters).

The held-out text of a second domain for models continued on Brown: none of it is trained on, and its
register (API reference, examples, code names) differs from every Brown genre. The text depends on the
Python version; :func:`python_docs_documents` records none, so an evaluation should state the version.

Example:
    >>> documents = python_docs_documents()
    >>> len(documents) == len(MODULES), documents[MODULES.index("json")].startswith("JSON (JavaScript Object")
    (True, True)
"""

from __future__ import annotations

import importlib
import inspect
import warnings

# modules of every CPython build (no Tk, no platform-only ones), in a fixed order
MODULES = ("argparse", "asyncio.tasks", "collections", "concurrent.futures", "contextlib", "csv", "dataclasses",
           "datetime", "decimal", "email.message", "enum", "fractions", "functools", "gettext", "heapq",
           "http.client", "inspect", "ipaddress", "itertools", "json", "logging", "mailbox", "os", "pathlib",
           "pickle", "queue", "random", "re", "sched", "shutil", "smtplib", "socket", "statistics", "string",
           "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit", "typing", "unittest.case",
           "urllib.parse", "urllib.request", "uuid", "warnings", "weakref", "xml.dom.minidom", "zipfile")
MIN_DOCSTRING = 200  # characters: shorter docstrings are one-line summaries, mostly code names


def python_docs_documents() -> list[str]:
    """One document per module of :data:`MODULES`: its docstring, then its public functions' and classes'
    docstrings of at least 200 characters, in name order, separated by blank lines."""
    documents = []
    for name in MODULES:
        module = importlib.import_module(name)
        parts = [inspect.getdoc(module) or ""]
        for attribute, value in sorted(vars(module).items()):
            if attribute.startswith("_") or not isinstance(getattr(value, "__module__", None), str) \
                    or value.__module__ != module.__name__:
                continue
            if inspect.isfunction(value) or inspect.isclass(value):
                with warnings.catch_warnings():  # typing's deprecated aliases (typing.io) warn when read
                    warnings.simplefilter("ignore", DeprecationWarning)
                    doc = inspect.getdoc(value) or ""
                if len(doc) >= MIN_DOCSTRING:
                    parts.append(doc)
        documents.append("\n\n".join(part for part in parts if part))
    return documents
