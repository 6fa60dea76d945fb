"""Job execution: one job from claim to finish, the embedded worker thread, delivery, fair
turns, foreground jobs between a background job's rows, and fit jobs (run by
``decide.teach.fit_jobs``). Decoding happens in a
runner child process, reached only through ``decide.runner.client``."""
