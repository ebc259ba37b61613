"""Connectors: external systems as pages of upserts and deletions (``ragport.ports.sync``)."""

from ragport.adapters.connectors.folder import FolderConnector, FolderFile

__all__ = ["FolderConnector", "FolderFile"]
