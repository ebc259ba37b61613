"""``ResourceDocumentLoader``: one host-owned function decides what a URI means."""

from __future__ import annotations

from collections.abc import Callable

from ragport.domain.errors import LoadError, RagportError
from ragport.ports.documents import LoadedDocument

__all__ = ["ResourceDocumentLoader"]


class ResourceDocumentLoader:
    """Calls ``loader(uri)``, which returns a ``LoadedDocument`` or bytes; scans nothing.

    A ragport error from the function passes through; any other exception becomes
    ``LoadError(reason="failed")`` naming only its type (its message could quote content).
    """

    def __init__(self, *, loader: Callable[[str], LoadedDocument | bytes]) -> None:
        if not callable(loader):
            raise TypeError("loader must be callable")
        self._loader = loader

    def load(self, uri: str) -> LoadedDocument:
        try:
            result = self._loader(uri)
        except RagportError:
            raise
        except Exception as exc:
            raise LoadError(
                f"the loader function failed ({type(exc).__name__})", reason="failed"
            ) from None
        if isinstance(result, (bytes, bytearray, memoryview)):
            return LoadedDocument(bytes(result))
        if isinstance(result, LoadedDocument):
            return result
        raise LoadError(
            f"the loader function returned {type(result).__name__}, not bytes or LoadedDocument",
            reason="invalid",
        )
