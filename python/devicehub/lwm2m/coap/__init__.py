"""CoAP (RFC 7252, 7959) in layers: message layer (endpoint), exchanges by token, blockwise, send batching."""
