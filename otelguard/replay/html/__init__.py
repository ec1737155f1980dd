"""The replay as one self-contained HTML page."""
