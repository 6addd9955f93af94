"""Helpers shared by integration and end-to-end tests: free ports, service processes, API clients."""
