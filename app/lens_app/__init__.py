"""Helpers of the repo_lens Streamlit app (app/streamlit_app.py)."""
