"""The Streamlit app: ``repo-lens app`` serves ``streamlit_app.py`` (the page is :mod:`repo_lens.app.page`).

Modules without Streamlit, usable on their own: :mod:`~repo_lens.app.config` (where models may be
read from), :mod:`~repo_lens.app.documents` (inputs and presets), :mod:`~repo_lens.app.models`,
:mod:`~repo_lens.app.results`, :mod:`~repo_lens.app.names` and :mod:`~repo_lens.app.state` (the
session-state keys views share).
"""
