"""The sans-IO protocol core: no threads, no sockets, every rule testable in isolation."""
