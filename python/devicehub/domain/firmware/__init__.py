"""Firmware update (issue 33): images, manifests, campaigns and the rules that drive a rollout over LwM2M object 5."""
