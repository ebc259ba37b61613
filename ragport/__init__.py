"""ragport: a hexagonal domain core for retrieval-augmented generation."""
