"""Shared parts of the examples: dataset location and download, the end-to-end pipeline, reports."""
