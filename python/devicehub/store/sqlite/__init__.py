"""The embedded SQLite store, one module per aggregate over one writer (writer.py); composed in store.py."""
