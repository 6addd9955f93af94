"""The device side: CoAP transport, LwM2M registration interface, observations, content formats."""
