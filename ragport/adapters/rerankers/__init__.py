"""Reranker adapters. Every reranker runs behind ``ragport.application.rerank_hits``."""

from ragport.adapters.rerankers.simple import EmbeddingReranker, FakeReranker

__all__ = ["EmbeddingReranker", "FakeReranker"]
