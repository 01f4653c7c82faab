"""Importers that turn recorded runs of other systems into v1 traces (``pbkv-sdk import``)."""
