"""The package's one figure writer: matplotlib off-screen, one style, a grid of panels, one save.

The lab's curves (``gtpo_verl/lab/report.py``), the CPU demos' curves (``examples/cpu_demo/run_demo.py``)
and the real-LM study's paired differences (``examples/cpu_demo/lm_study.py``) are drawn through
``figure``; each caller draws its own panels' content. matplotlib is optional (a dependency of the lab
and the demos, not of training): ``pyplot`` is None without it, and ``figure`` then raises
``ImportError`` with the install command.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Optional

DPI = 100
PANEL_SIZE = (5.0, 4.0)
"""Width and height of one panel, in inches."""
STYLE = {
    "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8, "legend.fontsize": 8,
    "axes.grid": True, "grid.alpha": 0.3, "figure.titlesize": 11,
}
"""matplotlib settings every figure is drawn under (``matplotlib.rc_context``: nothing global changes)."""
LEGEND_COLUMNS = 7
INSTALL = "pip install -c requirements/test.txt matplotlib"


def pyplot():
    """``matplotlib.pyplot`` on the off-screen Agg backend, or None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def figure(path: str, panels: int, columns: Optional[int] = None, title: Optional[str] = None,
           shared_legend: bool = False) -> Iterator[tuple]:
    """``(fig, axes)``: ``panels`` axes in rows of ``columns`` (default one row), ``PANEL_SIZE`` each, the
    unused cells of the last row hidden; drawn under ``STYLE`` and, on leaving the block, titled, laid out
    and saved to ``path`` at ``DPI``, then closed. ``shared_legend``: one legend below the panels, from
    the first panel's labelled lines."""
    plt = pyplot()
    if plt is None:
        raise ImportError(f"figures need matplotlib: {INSTALL}")
    columns = max(1, min(columns or panels, panels))
    rows = -(-panels // columns)
    with plt.rc_context(STYLE):
        fig, grid = plt.subplots(rows, columns, figsize=(PANEL_SIZE[0] * columns, PANEL_SIZE[1] * rows), squeeze=False)
        try:
            for ax in grid.flat[panels:]:
                ax.axis("off")
            yield fig, list(grid.flat[:panels])
            top = 1.0
            if title:
                fig.suptitle(title)
                top = 1.0 - 0.3 / (PANEL_SIZE[1] * rows)
            bottom = 0.0
            if shared_legend:
                handles, labels = grid.flat[0].get_legend_handles_labels()
                if handles:
                    fig.legend(handles, labels, loc="lower center", ncol=min(LEGEND_COLUMNS, len(handles)))
                    bottom = (0.1 + 0.3 * -(-len(handles) // LEGEND_COLUMNS)) / (PANEL_SIZE[1] * rows)
            fig.tight_layout(rect=(0, bottom, 1, top))
            fig.savefig(path, dpi=DPI)
        finally:
            plt.close(fig)
