"""The user's view of training runs, read from their run directories: which runs there are
and how they ended (`srl runs`), their curves (`srl plot`), what the bundled configs need and
reached (`srl configs`), a run as it goes (`srl top`).

Read-only: nothing here writes into a run directory. It imports `srl.api`, `srl.data` and
`srl.launch.run_dir` (the file names of a run) and nothing else of srl.
"""
