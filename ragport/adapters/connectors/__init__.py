"""Connectors: external systems as pages of upserts and deletions (``ragport.ports.sync``)."""

from ragport.adapters.connectors.drive import GoogleDriveConnector, drive_permissions_access
from ragport.adapters.connectors.folder import FolderConnector, FolderFile

__all__ = [
    "FolderConnector",
    "FolderFile",
    "GoogleDriveConnector",
    "drive_permissions_access",
]
