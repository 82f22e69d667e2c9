"""_runtime."""
