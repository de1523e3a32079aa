"""Reports of a release: the public summary page and the confidential per-record report.

Example:
    >>> from tabdp.report import render_summary_html, render_confidential_html
    >>> callable(render_summary_html) and callable(render_confidential_html)
    True
"""

from tabdp.report.html import render_confidential_html, render_summary_html

__all__ = ["render_summary_html", "render_confidential_html"]
