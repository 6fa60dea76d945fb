"""Settings and model configuration (and, later, storage, queues and metrics)."""
