"""_delivery."""
