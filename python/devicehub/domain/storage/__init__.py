"""The ports the domain persists through, one per aggregate; the stores (SQLite, Redis) implement them all."""
