"""The script Streamlit serves: ``repo-lens app`` (or ``make app``) runs ``streamlit run`` on this file.

Environment: ``REPO_LENS_APP_ROOTS`` (directories local checkpoints may be read from, os.pathsep-
separated; none by default) and ``REPO_LENS_APP_DEFAULT_MODEL`` ("zoo:NAME" or a directory under
a root). Streamlit reads ``.streamlit/config.toml`` beside this file (local address, no telemetry,
no file watching).
"""

from repo_lens.app.page import run

run()
