"""Core records, the event bus, registries and configuration."""
