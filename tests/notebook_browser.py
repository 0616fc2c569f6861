"""An executed notebook opened in a real JupyterLab, in headless Chromium: does a figure cell show a
plotly chart? Used by tests/notebooks/test_notebooks.py; as a script it also saves a screenshot:

    .venv/bin/python tests/notebook_browser.py notebooks/01_quickstart.ipynb \
        --screenshot docs/screenshots/jupyterlab.png
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "app"))
from browser_helpers import CHROMEDRIVER, CHROMIUM, chromium, free_port, local_server  # noqa: E402

PLOTLY_CHART = ".jp-RenderedPlotly.js-plotly-plot .main-svg"  # drawn by plotly.js, not a picture
PLOTLY_PICTURE = ".jp-RenderedPlotly img"  # the stored image/png, shown until the pointer enters the figure

__all__ = ["CHROMEDRIVER", "CHROMIUM", "first_chart", "jupyterlab"]


@contextlib.contextmanager
def jupyterlab(root: Path, log: Path) -> Iterator[tuple[str, str]]:
    """A JupyterLab server of this Python on 127.0.0.1 serving ``root``; yields (base URL, token).
    Its settings, workspaces and runtime files go to a temporary directory; it checks for no
    updates, fetches no news and asks no package index for extensions."""
    port, token = free_port(), secrets.token_hex(16)
    state = Path(tempfile.mkdtemp(prefix="repo-lens-jupyterlab-"))
    news = state / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false"}')  # no "get notified about Jupyter news?" prompt over the page
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(state / "config"), "JUPYTER_RUNTIME_DIR": str(state / "runtime"),
           "HF_HUB_OFFLINE": "1"}
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               f"--LabApp.workspaces_dir={state / 'workspaces'}", f"--LabApp.user_settings_dir={state / 'settings'}",
               "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--LabApp.extension_manager=readonly"]  # no PyPI queries for extensions
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--ServerApp.allow_root=True")  # containers and CI machines often run as root
    url = f"http://127.0.0.1:{port}"
    with local_server(command, cwd=root, env=env, log=log, health=f"{url}/api/status?token={token}",
                      name="JupyterLab", timeout=120):
        yield url, token


def first_chart(notebook: Path, timeout: float = 180.0, screenshot: Path | None = None) -> dict[str, float]:
    """Open a copy of ``notebook`` in JupyterLab and wait until its first figure is drawn by plotly.js;
    returns the chart's size in pixels, the width of its output area and how many charts were drawn by
    then (a figure stored with its picture is drawn when the pointer enters it, as a reader's would). Raises AssertionError
    naming the server log when no chart appears within ``timeout`` s. The copy lives in a temporary
    folder, so JupyterLab's autosave and checkpoints never touch the repository."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    served = Path(tempfile.mkdtemp(prefix="repo-lens-lab-"))
    relative = f"notebooks/{notebook.name}"
    (served / "notebooks").mkdir()
    shutil.copy(notebook, served / relative)
    log = served / "jupyterlab.log"
    with jupyterlab(served, log) as (url, token), chromium(size=(1700, 1050)) as driver:
        driver.get(f"{url}/lab/tree/{relative}?token={token}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            charts = driver.find_elements(By.CSS_SELECTOR, PLOTLY_CHART)
            if charts and charts[0].size["height"] > 50:
                break
            pictures = [one for one in driver.find_elements(By.CSS_SELECTOR, PLOTLY_PICTURE) if one.is_displayed()]
            if pictures:  # the pointer entering the stored picture makes plotly.js draw the chart
                driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", pictures[0])
                ActionChains(driver).move_to_element(pictures[0]).perform()
            driver.execute_script(  # bring later cells into view: JupyterLab renders cells near the viewport
                "const panel = document.querySelector('.jp-WindowedPanel-outer');"
                "if (panel) panel.scrollTop = Math.min(panel.scrollTop + 400, panel.scrollHeight);")
            time.sleep(0.5)
        else:
            raise AssertionError(f"no plotly chart in {relative} after {timeout:g} s; JupyterLab's log: {log}")
        chart = charts[0]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", chart)
        time.sleep(1.0)  # let plotly finish drawing before the picture
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(screenshot))
        area = driver.execute_script("return arguments[0].closest('.jp-OutputArea-output').clientWidth;", chart)
        return {"width": chart.size["width"], "height": chart.size["height"], "output_area_width": area,
                "charts": len(driver.find_elements(By.CSS_SELECTOR, PLOTLY_CHART))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--screenshot", type=Path)
    args = parser.parse_args()
    print(first_chart(args.notebook, screenshot=args.screenshot))
