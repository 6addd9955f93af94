"""Test-suite root: makes `support` importable for every test directory."""
