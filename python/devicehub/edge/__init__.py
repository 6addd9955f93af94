"""Edge Core: the gateway process — an LwM2M client of the service with a local status API (spec §1.6, §2.6, §4.9)."""
