"""The core: registry, subscriptions, presubscriptions, snapshot, device-request queue, event routing."""
