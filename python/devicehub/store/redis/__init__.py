"""The Redis store, one module per aggregate over one connection (connection.py); composed in store.py."""
