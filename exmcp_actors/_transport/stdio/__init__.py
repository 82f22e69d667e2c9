"""The stdio transport: a child process speaking newline-delimited JSON-RPC, its pipes, and
the watchdog that ends it with its host."""
