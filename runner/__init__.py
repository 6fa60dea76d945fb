"""The decoding runner: the child process that holds the models and decodes (``child``), the
protocol's worker side (``client``, the only part workers and launch import), exit statuses in
words (``crashes``), the start-up self-check (``probe``), which llama.cpp build a runner loads
(``variants``), the same build in-process (``in_process``) and ``decide check`` (``check``)."""
