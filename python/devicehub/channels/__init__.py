"""Notification channels: per-key queues delivered by callback, WebSocket or pull (spec §2.5, §3.3, §6)."""
