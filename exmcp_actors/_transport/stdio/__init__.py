"""_transport.stdio."""
