"""Transcript readers: every recorded format turned into one normalised event stream."""
