"""Connectors: external systems as pages of upserts and deletions (``ragport.ports.sync``)."""

from ragport.adapters.connectors.drive import (
    DriveOptions,
    GoogleDriveConnector,
    drive_permissions_access,
)
from ragport.adapters.connectors.folder import FolderConnector, FolderFile
from ragport.adapters.http_options import HttpOptions

__all__ = [
    "DriveOptions",
    "FolderConnector",
    "FolderFile",
    "GoogleDriveConnector",
    "HttpOptions",
    "drive_permissions_access",
]
