"""Thin faces for the things that consume context: LangChain, LlamaIndex and MCP.

Each face lives in its own module (``ragport.integrations.langchain``,
``ragport.integrations.llama_index``, ``ragport.integrations.mcp``) and imports its framework
only there, so ``import ragport`` and ``import ragport.integrations`` import none of them.
Every face calls ``retrieve_context`` with a store, an embedder, the scope(s) and the
authorization fixed at construction; nothing a caller passes per query can widen them.
"""

from ragport.integrations._common import BoundRetrieval, hit_metadata

__all__ = ["BoundRetrieval", "hit_metadata"]
