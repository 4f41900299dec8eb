"""Data: dataset formats, transforms, rank sharding and loaders."""
