"""What host threads call and hold: ``connect()``, the ``Client`` facade, handles, tasks,
catalogs, the hub, the ``mcpServers`` config (data only) and the exit hook.

Everything here runs on the host's own threads. A command enters the session through the
client's session monitor (see ``exmcp_actors._runtime`` for the rule); nothing here starts an
actor or keeps protocol state of its own.
"""
