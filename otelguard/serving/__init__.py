"""The HTTP servers: the sidecar (``otelguard serve``) and the metrics endpoint."""
