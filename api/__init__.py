"""The FastAPI front door (SPEC §2, §4): validate, check limits, store a job, queue it."""
