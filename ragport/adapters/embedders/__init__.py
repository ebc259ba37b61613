"""Embedder adapters."""

from ragport.adapters.embedders.hash import HashEmbedder

__all__ = ["HashEmbedder"]
