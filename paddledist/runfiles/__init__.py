"""Files the supervisor and the workers both read: the ranks' progress reports (progress.py), the latest
checkpoint's progress (latest.py) and the run's result files (results.py). Imports nothing of engine,
launch or stages, and no paddle: the engine and the launcher both stand on it.
"""
