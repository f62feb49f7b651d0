"""What every process shares: the IPC schema, logging, process utilities, build
selection, listening sockets, TLS/SASL settings and the management schema."""
