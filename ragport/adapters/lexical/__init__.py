"""Lexical index adapters."""

from ragport.adapters.lexical.bm25 import Bm25Index

__all__ = ["Bm25Index"]
