"""The trend report: differences, duplicates and repairs per table over runs, as one static page.

``page`` renders (pure, and light enough for the alerts to import), ``charts`` draws the SVG,
``history`` reads the state database and writes the page beside the Data Docs.
"""
