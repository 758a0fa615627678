"""The interactive pages people open: one self-contained HTML file, shared by the history dashboard and the run report.

``build.py`` assembles a page (Plotly's bundled JavaScript once, the data as one JSON blob, the page's script),
``facets.py`` splits case ids into the strategy, model and topology that both pages filter by, and ``common.js``
and ``style.css`` are the browser-side parts both pages share (filters, lazy drawing, copy buttons).
"""
