"""The device simulator: real LwM2M clients on UDP sockets (a product feature used by tests and bench)."""
