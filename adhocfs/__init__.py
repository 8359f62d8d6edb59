"""malleable.adhocfs: an elastic ad-hoc file system in user space (metadata server, data servers, client)."""
