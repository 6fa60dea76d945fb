"""Model workers: the llama-cpp-python reader and, later, the Celery tasks that use it."""
