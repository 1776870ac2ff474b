"""Model routing: which route serves a provider, one client and probe per
route, circuit breakers, and the embedded llama-server with its model file."""
