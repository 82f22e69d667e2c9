"""Leaves any layer may use, importing nothing else of the package: the process-wide
scheduler, a request's answer slot, argument checks and redaction of secrets."""
