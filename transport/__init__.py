"""How job ids travel: the transport protocol the front door sends through, lanes, wake-ups
for waiters, and Celery on Redis in the distributed setup."""
