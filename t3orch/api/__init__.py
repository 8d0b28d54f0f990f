"""The client API: JSON-RPC 2.0 over a loopback WebSocket and a 0600 Unix socket.

``runner.serve_api`` starts both listeners over a :class:`~t3orch.core.Core` and
an :class:`~t3orch.api.operations.Operations` (the supervisor, or
``CoreOperations`` until it is wired). See ``docs/api.md`` for the wire contract.
"""
